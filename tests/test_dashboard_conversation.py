"""The dashboard's conversation controls in headless Chromium (the fixtures and the
``Dashboard`` steps are tests/test_dashboard_browser.py's): a failed send shown failed with
Retry, provider failures in plain words, a new thread's own top line, Stop, Regenerate, Edit,
Copy and pictures in the composer. Screenshots go to ``test-artifacts/dashboard/``."""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.api.chat import PROVIDER_FAILED
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.test_dashboard_browser import ANSWERS, REPLY, Dashboard, browser, expect

__all__ = ["browser"]  # the fixture, shared
StartGateway = Callable[..., Awaitable[Harness]]
OpenBoard = Callable[..., Awaitable[Dashboard]]


def png(width: int, height: int) -> bytes:
    """A PNG of a blue-to-orange gradient (so a thumbnail is visible in the screenshots)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    rows = b"".join(b"\x00" + bytes(channel for x in range(width) for channel in (
        40 + 200 * x // width, 90, 220 - 180 * y // height)) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = png(160, 120)


@pytest.fixture
async def open_board(browser: Any) -> AsyncIterator[OpenBoard]:
    """Open a signed-in dashboard on a harness, at a width (and colour scheme)."""
    boards: list[Dashboard] = []
    contexts: list[Any] = []

    async def open_it(harness: Harness, width: int = 1280, scheme: str = "light",
                      auth: dict[str, str] | None = None) -> Dashboard:
        context = await browser.new_context(viewport={"width": width, "height": 860},
                                            color_scheme=scheme)
        contexts.append(context)
        board = Dashboard(harness, await context.new_page())
        boards.append(board)
        await board.sign_in(auth or await harness.user(plan="team"))
        return board

    yield open_it
    for context in contexts:
        await context.close()
    assert [error for board in boards for error in board.errors] == []


async def streaming_text(board: Dashboard, text: str) -> None:
    """Until the reply being streamed shows ``text``."""
    await board.page.wait_for_function(
        f"t => {{ const m = [...document.querySelectorAll('{ANSWERS}')].at(-1);"
        " return m && m.classList.contains('streaming') && m.innerText.includes(t); }",
        arg=text)


async def test_a_failed_send_is_shown_failed_and_retry_sends_it_once(
        start_gateway: StartGateway, fake_llm: FakeLLM, open_board: OpenBoard) -> None:
    harness = await start_gateway(llm_max_retries=0)
    board = await open_board(harness)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "overloaded"}})]
    await board.send("hello there")
    failed = board.testid("send-failed")
    await expect(failed).to_contain_text(PROVIDER_FAILED)
    text = await board.page.locator("#transcript").inner_text()
    assert "HTTP" not in text and "127.0.0.1" not in text  # no internals
    await expect(board.messages("user")).to_have_class("message user failed")
    assert await board.messages("assistant").count() == 0
    await board.shot("send-failed")
    await failed.get_by_role("button", name="Retry").click()
    await board.wait_reply(1)
    await expect(board.messages("user")).to_have_count(1)  # the same entry, not a second one
    await expect(board.testid("send-failed")).to_have_count(0)
    assert "echo: hello there" in await board.messages("assistant").inner_text()
    await board.page.reload()
    await board.wait_reply(1)
    await expect(board.messages("user")).to_have_count(1)


async def test_a_stream_that_breaks_shows_a_plain_message(
        start_gateway: StartGateway, fake_llm: FakeLLM, open_board: OpenBoard) -> None:
    harness = await start_gateway(llm_max_retries=0)
    board = await open_board(harness)
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=6, break_after=3)]
    await board.send("plan my trip")
    await expect(board.testid("send-failed")).to_contain_text(PROVIDER_FAILED)
    assert await board.messages("assistant").count() == 0


async def test_a_new_thread_does_not_say_scroll_up(harness: Harness,
                                                   open_board: OpenBoard) -> None:
    auth = await harness.user("bob", plan="team")
    for number in range(30):  # 60 messages: more than the first page
        await harness.chat(auth, f"m{number}", thread="long")
    board = await open_board(harness, auth=auth)
    top = board.page.locator("#transcript-top")
    await expect(top).to_have_text("Scroll up for older messages")
    await board.testid("new-thread").click()
    await expect(top).to_have_text("No messages yet.")


async def test_stop_keeps_what_arrived_as_the_reply(harness: Harness, fake_llm: FakeLLM,
                                                    open_board: OpenBoard) -> None:
    board = await open_board(harness)
    resume = asyncio.Event()  # never set: only Stop ends this answer
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=12, pause_after=3,
                                resume=resume)]
    await board.send("Plan my trip, please")
    await streaming_text(board, "Pack")
    await expect(board.testid("send")).to_be_hidden()
    await board.shot("streaming-stop")
    await board.testid("stop").click()
    await board.wait_reply(1)
    answer = board.messages("assistant").last
    await expect(answer.get_by_test_id("stopped")).to_be_visible()
    partial = (await answer.locator(".message-body").inner_text()).strip()
    assert "Pack" in partial and "Enjoy the trip" not in partial
    await expect(board.testid("send")).to_be_visible()
    await board.page.reload()  # kept: stored as the reply
    await board.wait_reply(1)
    assert (await board.messages("assistant").last.locator(".message-body").inner_text()
            ).strip() == partial
    resume.set()


async def test_regenerate_replaces_the_last_reply(harness: Harness, fake_llm: FakeLLM,
                                                  open_board: OpenBoard) -> None:
    board = await open_board(harness)
    await board.send("hello")
    await board.wait_reply(1)
    fake_llm.script = [Scripted(body=completion("A fresh answer."))]
    await board.messages("assistant").last.get_by_test_id("regenerate").click()
    await expect(board.messages("assistant").last).to_contain_text("A fresh answer.")
    await board.wait_reply(1)
    await expect(board.messages("assistant")).to_have_count(1)
    await board.page.reload()
    await board.wait_reply(1)
    await expect(board.messages("assistant")).to_have_count(1)
    await expect(board.messages("assistant")).to_contain_text("A fresh answer.")
    assert [m["content"] for m in fake_llm.chat_requests[-1].messages[1:]] == ["hello"]


async def test_edit_and_resend_replaces_the_last_exchange(harness: Harness, fake_llm: FakeLLM,
                                                          open_board: OpenBoard) -> None:
    board = await open_board(harness)
    await board.send("first")
    await board.wait_reply(1)
    await board.send("helo")
    await board.wait_reply(2)
    # only the last message can be edited
    await expect(board.messages("user").first.get_by_test_id("edit")).to_be_hidden()
    await board.messages("user").last.get_by_test_id("edit").click()
    await board.testid("edit-box").fill("hello, edited")
    await board.shot("edit")
    await board.testid("edit-send").click()
    await expect(board.messages("assistant").last).to_contain_text("echo: hello, edited")
    await board.wait_reply(2)
    await board.page.reload()
    await board.wait_reply(2)
    users = board.page.locator('[data-role="user"] .message-body')
    assert [text.strip() for text in await users.all_inner_texts()] == ["first", "hello, edited"]


async def test_copy_puts_the_messages_markdown_on_the_clipboard(
        harness: Harness, fake_llm: FakeLLM, open_board: OpenBoard) -> None:
    board = await open_board(harness)
    await board.page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                               origin=board.url().rstrip("/"))
    fake_llm.script = [Scripted(body=completion(REPLY))]
    await board.send("Plan my trip")
    await board.wait_reply(1)
    button = board.messages("assistant").last.get_by_test_id("copy")
    await button.click()
    await expect(button).to_have_text("Copied")
    assert await board.page.evaluate("() => navigator.clipboard.readText()") == REPLY
    await board.messages("user").last.get_by_test_id("copy").click()
    await expect(board.messages("user").last.get_by_test_id("copy")).to_have_text("Copied")
    assert await board.page.evaluate("() => navigator.clipboard.readText()") == "Plan my trip"


async def test_a_picture_from_the_composer_reaches_a_vision_model(
        start_gateway: StartGateway, fake_llm: FakeLLM, open_board: OpenBoard) -> None:
    harness = await start_gateway(llm_vision=True)
    board = await open_board(harness)
    await board.testid("picture-input").set_input_files(
        {"name": "dot.png", "mimeType": "image/png", "buffer": PNG})
    await expect(board.page.locator("#composer-pictures img")).to_have_count(1)
    await board.send("what is this?")
    await board.wait_reply(1)
    thumbnail = board.messages("user").last.locator("img.thumbnail")
    await expect(thumbnail).to_have_count(1)
    assert (await thumbnail.get_attribute("src") or "").startswith("data:image/jpeg;base64,")
    await expect(board.messages("user").last).to_contain_text("not kept")
    parts = fake_llm.chat_requests[-1].messages[-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    await expect(board.page.locator("#composer-pictures img")).to_have_count(0)
    await board.shot("picture")


async def test_the_add_picture_button_is_hidden_without_vision(harness: Harness,
                                                               open_board: OpenBoard) -> None:
    board = await open_board(harness)
    await expect(board.testid("add-picture")).to_have_count(1)  # there, but not offered
    await expect(board.testid("add-picture")).to_be_hidden()


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (1280, "dark"),
                                               (390, "light"), (390, "dark")])
async def test_the_controls_fit_at_each_width_and_scheme(
        start_gateway: StartGateway, fake_llm: FakeLLM, open_board: OpenBoard, width: int,
        scheme: str) -> None:
    harness = await start_gateway(llm_vision=True, llm_max_retries=0)
    board = await open_board(harness, width, scheme)
    await board.send("Plan my trip")
    await board.wait_reply(1)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "overloaded"}})]
    await board.send("and the way back?")
    await board.testid("send-failed").wait_for()
    await board.testid("picture-input").set_input_files(
        {"name": "dot.png", "mimeType": "image/png", "buffer": PNG})
    await board.page.locator("#composer-pictures img").wait_for()
    assert await board.page.evaluate("() => document.documentElement.scrollWidth") <= width
    await board.shot(f"conversation-{width}-{scheme}")
