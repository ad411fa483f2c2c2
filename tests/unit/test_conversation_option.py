"""`--conversation` names a conversation: a blank one is refused (exit status 2, naming the option), never taken
as a conversation whose memos an MCP client started without one would see."""

from __future__ import annotations

import pytest

from myao2.cli import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["memo", "add", "secret", "--content", "canary", "--conversation", ""],
        ["memo", "add", "secret", "--content", "canary", "--conversation", "  "],
        ["memo", "show", "secret", "--conversation", ""],
        ["mcp", "--conversation", " "],
    ],
)
def test_a_blank_conversation_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    assert stopped.value.code == 2
    assert "--conversation" in capsys.readouterr().err


def test_a_conversation_id_is_taken_without_surrounding_spaces() -> None:
    assert build_parser().parse_args(["mcp", "--conversation", " D1 "]).conversation == "D1"
    adding = build_parser().parse_args(["memo", "add", "x", "--content", "y", "--conversation", "workspace"])
    assert adding.conversation == "workspace"
