"""`myao2 playground` against the fake model, driven in headless Chromium (Debian's, at /usr/bin/chromium)."""

from __future__ import annotations

import base64
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.e2e.conftest import CLI_SECONDS, START_SECONDS, BotProcess, held_port, wait_until
from tests.fakes import WAIT_SECONDS
from tests.fakes.memory_model import is_memory_request, remember
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # its calls home are refused by a closed network, many at a time
    "--disable-component-update",
    "--disable-sync",
]
BACKGROUND = (0xA1, 0xC1, 0xE6)
TEXT = (0x10, 0x10, 0x10)

expect.set_options(timeout=WAIT_SECONDS * 1000)  # positive waits cost nothing when the event comes

SERVED = re.compile(r"myao2 playground: http://127\.0\.0\.1:(\d+)/\n")
"""The playground's line naming where it serves (`playground.port` 0: on any free port)."""


class PlaygroundProcess(BotProcess):
    """`myao2 playground` as a subprocess on a free port, with the e2e config."""

    def start(self, wait_connected: bool = True) -> PlaygroundProcess:
        self.settings["playground.port"] = 0  # a port picked free here could be taken before the playground binds it
        self.write_config()
        served = len(SERVED.findall(self.log()))
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "myao2", "playground", "--config", str(self.config_path)],
            cwd=self.tmp_path,
            env=self.environment(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(
            lambda: len(SERVED.findall(self.log())) > served or self.process.poll() is not None,
            timeout=START_SECONDS,
            what="the playground to listen",
        )
        assert self.process.poll() is None, f"the playground exited early:\n{self.log()}"
        self.port = int(SERVED.findall(self.log())[served])
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


@pytest.fixture
def playground(tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI) -> Iterator[PlaygroundProcess]:
    process = PlaygroundProcess(tmp_path, slack, llm)
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(WAIT_SECONDS * 1000)  # as expect's: page loads and wait_for_function too
    page = context.new_page()
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None)
    yield page
    context.close()
    assert refused == [], "the page's Content-Security-Policy refused some of the page"


def open_chat(page: Page, playground: PlaygroundProcess, conversation: str, name: str = "Alice") -> None:
    page.goto(playground.url)
    page.select_option("#conversation", conversation)
    page.fill("#name", name)


def say(page: Page, text: str) -> None:
    page.click("#text")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def add_memo(name: str, content: str, delay: float = 0.0) -> ToolCalls:
    return ToolCalls([ToolCall("add_memo", {"name": name, "content": content, "priority": 4})], delay=delay)


def memo_item(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.locator(f'#memos li[data-name="{name}"]')


def test_a_message_gets_a_streamed_reply_and_the_memo_shows_in_the_panel(playground, llm, page: Page) -> None:
    playground.start()
    answer = "Got it, Alice: your birthday is May 3. I will remember it!"
    # Seen as they happen: the typing dots for the 2 s before the first words, part of the answer for 4 s.
    llm.script(add_memo("alice-birthday", "Alice's birthday is May 3", delay=2.0), Text(answer, pieces=8, interval=0.6))
    open_chat(page, playground, "play-general")

    page.click("#text")
    page.keyboard.type("my birthday is May 3")
    page.keyboard.press("Shift+Enter")  # a new line, not sent
    page.keyboard.type("remember it")
    page.keyboard.press("Enter")

    expect(page.locator(".bubble.user .text")).to_have_text("my birthday is May 3\nremember it")
    expect(page.locator("#typing")).to_be_visible()  # before the first words
    bot = page.locator(".bubble.bot")
    expect(bot.locator(".note")).to_contain_text("Add memo: alice-birthday")
    # Streamed: part of the answer shows while the rest is still being written.
    page.wait_for_function(
        "full => { const t = document.querySelector('.bubble.bot .text'); "
        "return t && t.textContent.length > 0 && t.textContent !== full; }",
        arg=answer,
    )
    expect(bot.locator(".text")).to_have_text(answer)
    expect(bot.locator(".note")).to_contain_text("✓")
    expect(page.locator("#typing")).to_be_hidden()
    expect(bot.locator("time")).not_to_have_text("")
    memo = memo_item(page, "alice-birthday")
    expect(memo).to_contain_text("Alice's birthday is May 3")
    expect(memo).to_contain_text("priority 4")
    expect(memo).to_have_class("changed")

    with sqlite3.connect(playground.database) as db:
        stored = db.execute("SELECT user_id, text FROM messages WHERE channel_id = 'play-general' ORDER BY ts").fetchall()
    assert stored == [("play-user-alice", "my birthday is May 3\nremember it"), ("play-bot", answer)]
    page.reload()  # the conversation is kept
    expect(page.locator(".bubble")).to_have_count(2)
    assert playground.stop() == 0


def test_a_memo_taken_in_the_private_conversation_does_not_show_in_another(playground, llm, page: Page) -> None:
    playground.start()
    llm.script(add_memo("team-lunch", "Lunch is at noon"), Text("Noted."))
    open_chat(page, playground, "play-general")
    say(page, "lunch is at noon")
    expect(memo_item(page, "team-lunch")).to_be_visible()

    llm.script(add_memo("alice-surprise", "Alice plans a surprise party for Bob"), Text("My lips are sealed."))
    page.select_option("#conversation", "play-secret")
    expect(page.locator(".bubble")).to_have_count(0)
    say(page, "I am planning a surprise party for Bob")
    expect(memo_item(page, "alice-surprise")).to_be_visible()
    expect(memo_item(page, "alice-surprise")).to_contain_text("this conversation only")

    for elsewhere in ("play-general", "play-random", "play-dm"):
        page.select_option("#conversation", elsewhere)
        expect(memo_item(page, "team-lunch")).to_be_visible()  # the panel shows this conversation's memos...
        expect(memo_item(page, "alice-surprise")).to_have_count(0)  # ...and not the private one
    assert playground.stop() == 0


def test_what_it_remembers_of_the_private_conversation_shows_only_there(playground, llm, page: Page) -> None:
    playground.settings["memory.update_interval_seconds"] = 0.5
    llm.set_responder(lambda request: remember(request) if is_memory_request(request) else Text("Noted."))
    playground.start()
    open_chat(page, playground, "play-general")
    say(page, "the release moves to friday")
    expect(page.locator(".bubble.bot .text")).to_have_text("Noted.")
    page.select_option("#conversation", "play-secret")
    say(page, "canary-secret surprise party for Bob")
    expect(page.locator(".bubble.bot .text")).to_have_text("Noted.")

    memory = page.locator("#memory")
    for _ in range(60):  # the memory job runs every 0.5 s; the panel shows what it made when opened
        page.select_option("#conversation", "play-general")
        page.select_option("#conversation", "play-secret")
        if "canary-secret" in memory.inner_text() and "release moves to friday" in memory.inner_text():
            break
        page.wait_for_timeout(500)
    expect(memory).to_contain_text("canary-secret surprise party")
    expect(memory).to_contain_text("the release moves to friday")  # the public channel's, seen from here

    page.select_option("#conversation", "play-general")
    expect(memory).to_contain_text("#general (long): remembered: the release moves to friday")  # general's view...
    expect(memory).not_to_contain_text("canary-secret")  # ...without the private conversation's memory
    assert playground.stop() == 0


def test_a_model_error_shows_as_a_message(playground, llm, page: Page) -> None:
    playground.start()
    llm.set_responder(lambda request: Error(500, "the model is down"))
    open_chat(page, playground, "play-dm", name="Bob")
    say(page, "hello?")

    expect(page.locator(".error[role=alert]")).to_contain_text("The model could not answer")
    expect(page.locator(".bubble.bot .text")).to_contain_text("Sorry")
    expect(page.locator("#typing")).to_be_hidden()
    assert playground.stop() == 0


def test_with_a_token_the_page_works_when_opened_with_it(playground, llm, page: Page) -> None:
    playground.settings["playground.token"] = "s3cret-token"
    playground.start()
    llm.script(Text("Hello, Carol."))
    assert page.goto(playground.url).status == 401
    page.goto(playground.url + "?token=s3cret-token")
    page.fill("#name", "Carol")
    say(page, "hi")
    expect(page.locator(".bubble.bot .text")).to_have_text("Hello, Carol.")
    expect(page.locator("#avatar")).to_have_js_property("naturalWidth", 240)  # the picture came with the token too
    assert "s3cret-token" not in playground.log()
    assert playground.stop() == 0


def test_a_refused_message_shows_why(playground, page: Page) -> None:
    playground.start()
    open_chat(page, playground, "play-general")
    page.fill("#text", "x" * 4001)
    page.press("#text", "Enter")
    expect(page.locator(".error[role=alert]")).to_contain_text("the message is too long")
    expect(page.locator(".bubble")).to_have_count(0)
    assert playground.stop() == 0


def test_a_port_in_use_stops_it_naming_the_key(playground: PlaygroundProcess) -> None:
    with held_port() as port:
        playground.settings["playground.port"] = port
        playground.write_config()
        result = subprocess.run(
            [sys.executable, "-m", "myao2", "playground", "--config", str(playground.config_path)],
            cwd=playground.tmp_path,
            env=playground.environment(),
            capture_output=True,
            text=True,
            timeout=CLI_SECONDS,
        )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"myao2: playground.port: port {port} is already in use"]


def pixel(browser: Browser, png: bytes, x: int, y: int) -> tuple[int, int, int]:
    """The colour at (x, y) of a PNG, decoded by the browser."""
    return darkest(browser, png, (x, y, 1, 1))


def darkest(browser: Browser, png: bytes, box: tuple[float, float, float, float]) -> tuple[int, int, int]:
    """The darkest colour within `box` (x, y, width, height) of a PNG, decoded by the browser."""
    page = browser.new_page()
    try:
        return tuple(
            page.evaluate(
                """async ([data, [x, y, w, h]]) => {
                    const image = new Image();
                    image.src = 'data:image/png;base64,' + data;
                    await image.decode();
                    const canvas = document.createElement('canvas');
                    canvas.width = image.width; canvas.height = image.height;
                    const ctx = canvas.getContext('2d');
                    ctx.drawImage(image, 0, 0);
                    const d = ctx.getImageData(Math.floor(x), Math.floor(y), Math.max(1, Math.floor(w)),
                                               Math.max(1, Math.floor(h))).data;
                    let best = [255, 255, 255], sum = 765;
                    for (let i = 0; i < d.length; i += 4) {
                        const s = d[i] + d[i + 1] + d[i + 2];
                        if (s < sum) { sum = s; best = [d[i], d[i + 1], d[i + 2]]; }
                    }
                    return best;
                }""",
                [base64.b64encode(png).decode(), list(box)],
            )
        )
    finally:
        page.close()


def close_to(colour: tuple[int, ...], expected: tuple[int, int, int], tolerance: int = 3) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(colour, expected))


@pytest.mark.parametrize(("width", "height", "narrow"), [(1280, 800, False), (390, 844, True)])
def test_the_layout_at_laptop_and_phone_widths(
    playground, llm, browser: Browser, tmp_path: Path, width: int, height: int, narrow: bool
) -> None:
    playground.start()
    llm.script(add_memo("alice-tea", "Alice likes green tea"), Text("Green tea it is."))
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    try:
        open_chat(page, playground, "play-general")
        say(page, "I like green tea")
        expect(memo_item(page, "alice-tea")).to_be_visible()
        expect(page.locator("#avatar")).to_have_js_property("complete", True)
        shot = page.screenshot(path=str(tmp_path / f"playground-{width}.png"), full_page=True)

        chat = page.locator(".chat").bounding_box()
        composer = page.locator("#composer").bounding_box()
        messages = page.locator("#messages").bounding_box()
        panel = page.locator("#panel").bounding_box()
        avatar = page.locator("#avatar").bounding_box()
        assert chat and composer and messages and panel and avatar
        # The input is at the bottom of the chat, under the conversation, and fills the viewport's bottom.
        assert composer["y"] >= messages["y"] + messages["height"]
        assert composer["y"] + composer["height"] == pytest.approx(chat["y"] + chat["height"], abs=1)
        assert chat["y"] + chat["height"] <= height + 1
        if narrow:  # the panel moves below the chat
            assert panel["y"] >= chat["y"] + chat["height"]
        else:  # the picture is on the right, beside the chat
            assert panel["x"] >= chat["x"] + chat["width"]
            assert avatar["x"] >= chat["x"] + chat["width"]
            assert panel["y"] < chat["y"] + chat["height"]
        assert avatar["y"] <= page.locator("#memos").bounding_box()["y"]  # the picture above the memos

        assert close_to(pixel(browser, shot, 3, 3), BACKGROUND), "the page background is #A1C1E6"
        name = page.locator("#bot-name").bounding_box()
        assert name is not None
        ink = darkest(browser, shot, (name["x"], name["y"], name["width"], name["height"]))
        assert close_to(ink, TEXT, tolerance=4), f"the text is #101010, not {ink}"
    finally:
        context.close()
    assert (tmp_path / f"playground-{width}.png").stat().st_size > 0
    assert playground.stop() == 0
