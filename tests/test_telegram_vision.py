"""Telegram photos to a vision model: the largest size fetched with getFile and downloaded
through the Bot API's file URL, size-capped; the transcript keeps a placeholder."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

from gateway.testing.fake_llm import FakeLLM
from gateway.testing.telegram import FakeTelegramChats
from tests.conftest import Harness
from tests.test_telegram import ADA, payload, post_update

StartTelegram = Callable[..., Awaitable[Harness]]
JPEG = b"\xff\xd8\xff\xe0" + b"telegram-photo" * 30
LARGE = "AgACAgQAAxkBAAIBQ2bLarge"


async def test_a_photo_without_caption_reaches_a_vision_model(
        start_telegram: StartTelegram, fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(llm_vision=True)
    fake_telegram.files[LARGE] = JPEG
    await post_update(tg, payload("tg_photo.json"))
    await fake_telegram.wait_for_messages(1)
    await tg.gateway.drain()
    assert fake_telegram.downloads == [LARGE]  # the largest size only
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content[0] == {"type": "text", "text": "[photo: photo-AQADlarge.jpg]"}
    assert content[1]["image_url"]["url"] == \
        "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()
    page = await tg.gateway.store.display_page(f"telegram:{ADA}", 10, None)
    assert page.messages[0].content == "[photo: photo-AQADlarge.jpg]"


async def test_a_photo_with_a_caption_is_named_before_it(
        start_telegram: StartTelegram, fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(llm_vision=True)
    fake_telegram.files[LARGE] = JPEG
    update = payload("tg_photo.json")
    update["message"]["caption"] = "what breed\nis this?"
    await post_update(tg, update)
    await fake_telegram.wait_for_messages(1)
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content[0]["text"] == "[photo: photo-AQADlarge.jpg] what breed\nis this?"


async def test_a_photo_over_the_cap_is_not_downloaded(
        start_telegram: StartTelegram, fake_telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    tg = await start_telegram(llm_vision=True, llm_max_image_bytes=100)
    fake_telegram.files[LARGE] = JPEG  # 424 bytes: getFile says so, no download
    await post_update(tg, payload("tg_photo.json"))
    await fake_telegram.wait_for_messages(1)
    assert fake_telegram.downloads == []
    assert fake_llm.requests[-1].messages[-1]["content"] == "[photo: photo-AQADlarge.jpg]"


async def test_without_vision_a_photo_still_gets_the_text_only_note(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    fake_telegram.files[LARGE] = JPEG
    await post_update(tg, payload("tg_photo.json"))
    [sent] = await fake_telegram.wait_for_messages(1)
    assert sent.params["text"].startswith("I can only read text")
    assert fake_llm.requests == [] and fake_telegram.downloads == []
