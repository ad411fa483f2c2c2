"""`myao2 memo export` and `myao2 memo import`, run as a person runs them, on a folder kept in git."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ALICE, CLI_SECONDS, GENERAL, BotProcess
from tests.e2e.test_memo_privacy import DM, SECRET
from tests.e2e.test_mentions import prompt_text
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

CONFIG_YAML = """\
persona:
  timezone: Asia/Tokyo
memory:
  database_path: {database}
"""


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG_YAML.format(database=tmp_path / "memos.db"))
    return path


def myao2(config_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The real `myao2 memo ...` command."""
    return subprocess.run(
        [sys.executable, "-m", "myao2", "memo", *argv, "--config", str(config_path)],
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def git(folder: Path, *argv: str) -> str:
    identity = ["-c", "user.name=Tester", "-c", "user.email=tester@example.invalid", "-c", "core.autocrlf=false"]
    result = subprocess.run(["git", *identity, *argv], cwd=folder, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def tree(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(folder).parts
    }


def memos_in(config_path: Path) -> dict[str, tuple[str, int]]:
    with sqlite3.connect(config_path.parent / "memos.db") as db:
        rows = db.execute("SELECT name, content, priority FROM memos WHERE removed_at IS NULL").fetchall()
    return {name: (content, priority) for name, content, priority in rows}


@pytest.fixture
def notebook(config_path: Path) -> Path:
    ok(myao2(config_path, "add", "alice-ramen", "--content", "Alice loves spicy ramen", "--tags", "food,alice",
             "--priority", "4", "--detail", "Likes Ichiran\nin Shibuya"))
    ok(myao2(config_path, "add", "standup", "--content", "Standup at 10:00"))
    ok(myao2(config_path, "pin", "standup"))
    ok(myao2(config_path, "add", "surprise", "--content", "A party for Bob on Friday", "--conversation", "D1"))
    return config_path


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_exports_are_byte_identical_and_git_shows_only_what_changed(notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "memos"
    said = ok(myao2(notebook, "export", "--output", str(out)))
    assert said == f"Exported 2 memos the whole workspace may see (--visibility all adds private ones) to {out}.\n"
    assert sorted(tree(out)) == ["food/alice-ramen.md", "standup.md"]
    assert b"Bob" not in b"".join(tree(out).values())
    again = tmp_path / "again"
    ok(myao2(notebook, "export", "--output", str(again)))
    assert tree(again) == tree(out)

    git(out, "init", "-q")
    git(out, "add", "-A")
    git(out, "commit", "-q", "-m", "snapshot")
    ok(myao2(notebook, "edit", "standup", "--content", "Standup at 10:30"))
    ok(myao2(notebook, "remove", "alice-ramen"))
    ok(myao2(notebook, "export", "--output", str(out)))

    assert git(out, "status", "--porcelain").splitlines() == [" D food/alice-ramen.md", " M standup.md"]
    diff = git(out, "diff", "-U0", "standup.md")
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed[0] == "-updated: " + changed[0].split(": ", 1)[1]
    assert sorted(line for line in changed if not line[1:].startswith("updated: ")) == [
        "+Standup at 10:30", "+revision: 2", "-Standup at 10:00", "-revision: 1"
    ]


def test_private_memos_are_exported_only_when_asked_for(notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "all"
    ok(myao2(notebook, "export", "--output", str(out), "--visibility", "all"))

    files = tree(out)
    assert sorted(files) == ["food/alice-ramen.md", "standup.md", "surprise.md"]
    assert b"visibility: conversation\nconversation: D1\n" in files["surprise.md"]
    assert b"pinned: true\n" in files["standup.md"]


def test_an_edited_folder_is_planned_then_applied_keeping_history(notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "memos"
    ok(myao2(notebook, "export", "--output", str(out)))
    alice = out / "food" / "alice-ramen.md"
    alice.write_text(alice.read_text().replace("priority: 4", "priority: 5"))
    (out / "food" / "lunch.md").write_text("---\nname: lunch\ntags: [food]\n---\n\nLunch at noon\n")
    (out / "too-many.md").write_text("---\nname: too-many\ntags: [a, b, c, d]\n---\n\nFour tags\n")
    (out / "broken.md").write_text("---\nname: [broken\n---\n\nhi\n")
    before = memos_in(notebook)

    planned = myao2(notebook, "import", "--dir", str(out))

    assert planned.returncode == 2, planned.stderr
    assert planned.stdout == (
        "invalid   broken.md: the front matter is not valid YAML (line 2)\n"
        "changed   food/alice-ramen.md (priority)\n"
        "added     food/lunch.md\n"
        "refused   too-many.md: A memo can have at most 3 tags (4 were given).\n"
        "Plan: 1 added, 1 changed, 1 unchanged, 1 refused, 1 invalid. Nothing written: --apply applies it.\n"
    )
    assert memos_in(notebook) == before

    applied = myao2(notebook, "import", "--dir", str(out), "--apply")

    assert applied.returncode == 2, applied.stderr
    assert applied.stdout.splitlines()[-1] == "Applied: 1 added, 1 changed, 1 unchanged, 1 refused, 1 invalid."
    after = memos_in(notebook)
    assert after["alice-ramen"] == ("Alice loves spicy ramen", 5)
    assert after["lunch"] == ("Lunch at noon", 3)
    assert "too-many" not in after
    history = ok(myao2(notebook, "history", "alice-ramen"))
    assert [line.split()[-1] for line in history.splitlines() if " by " in line] == ["user:cli", "user:import"]


def test_a_memo_without_a_file_is_removed_only_with_prune(notebook: Path, tmp_path: Path) -> None:
    out = tmp_path / "memos"
    ok(myao2(notebook, "export", "--output", str(out)))
    (out / "standup.md").unlink()

    kept = ok(myao2(notebook, "import", "--dir", str(out), "--apply"))
    assert kept == "kept      standup (no file; --prune removes it)\nApplied: 1 unchanged, 1 kept.\n"
    assert "standup" in memos_in(notebook)

    pruned = ok(myao2(notebook, "import", "--dir", str(out), "--apply", "--prune"))
    assert pruned == "removed   standup (no file)\nApplied: 1 unchanged, 1 removed.\n"
    assert set(memos_in(notebook)) == {"alice-ramen", "surprise"}
    assert ok(myao2(notebook, "import", "--dir", str(out))) == "Plan: 1 unchanged. Nothing written: --apply applies it.\n"


def test_a_missing_folder_is_refused(notebook: Path, tmp_path: Path) -> None:
    result = myao2(notebook, "import", "--dir", str(tmp_path / "nowhere"))

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"myao2 memo: no folder {tmp_path / 'nowhere'}\n"


def test_with_the_bot_running_a_dm_memo_stays_out_of_the_shared_export_and_an_import_reaches_the_next_prompt(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(DM, ALICE, is_im=True, members=[ALICE])
    bot.start()

    def mention(channel: str, text: str, *calls: ToolCall) -> None:
        llm.script(*([ToolCalls(list(calls))] if calls else []), Text("ok"))
        posts = len(slack.posted)
        slack.post_message(channel, ALICE, text if channel == DM else f"<@{slack.bot_user_id}> {text}")
        slack.wait_for(lambda: len(slack.posted) > posts, what=f"the reply in {channel}")

    mention(GENERAL, "lunch is on fridays", ToolCall("add_memo", {"name": "team-lunch", "content": "Lunch on Fridays", "priority": 4, "tags": ["food"]}))
    mention(DM, SECRET, ToolCall("add_memo", {"name": "bob-party", "content": SECRET, "priority": 4}))

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "myao2", "memo", *argv, "--config", str(bot.config_path)],
            env=bot.environment(), capture_output=True, text=True, timeout=CLI_SECONDS,
        )

    shared, everything = bot.tmp_path / "shared", bot.tmp_path / "everything"
    ok(cli("export", "--output", str(shared)))
    ok(cli("export", "--output", str(everything), "--visibility", "all"))
    assert sorted(tree(shared)) == ["food/team-lunch.md"]
    assert SECRET.encode() not in b"".join(tree(shared).values())
    assert f"conversation: {DM}\n".encode() in tree(everything)["bob-party.md"]

    lunch = shared / "food" / "team-lunch.md"
    lunch.write_text(lunch.read_text().replace("Lunch on Fridays", "Lunch on Thursdays"))
    assert ok(cli("import", "--dir", str(shared), "--apply")) == "changed   food/team-lunch.md (content)\nApplied: 1 changed.\n"

    seen = len(llm.requests)
    mention(GENERAL, "when is lunch?")
    prompt = prompt_text(llm.requests[seen])
    assert "Lunch on Thursdays" in prompt and "Lunch on Fridays" not in prompt
    assert bot.stop() == 0
