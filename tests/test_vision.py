"""Pictures from channels go to a vision model as image input; the transcript keeps only the
text that names them."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable

from gateway.interfaces import Attachment
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import session_bytes

StartGateway = Callable[..., Awaitable[Harness]]
PNG = b"\x89PNG\r\n\x1a\n" + b"picture-bytes" * 10


def photo_message(loop: LoopChannel, message_id: str = "m1", file_id: str = "f1"):  # type: ignore[no-untyped-def]
    return loop.message(message_id, "[photo: cat.png] what is this?",
                        attachments=(Attachment("image", "cat.png", {"id": file_id}),))


async def test_a_picture_reaches_a_vision_model_and_only_its_name_is_stored(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_vision=True)
    loop.files["f1"] = PNG
    await harness.gateway.receive(photo_message(loop))
    await harness.gateway.drain()
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content[0] == {"type": "text", "text": "[photo: cat.png] what is this?"}
    assert content[1] == {"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    page = await harness.gateway.store.display_page("loop:c1", 10, None)
    assert [m.content for m in page.messages if m.role == "user"] == [
        "[photo: cat.png] what is this?"]
    session = await session_bytes(harness.gateway, "loop:c1")
    assert session is not None and base64.b64encode(PNG).decode()[:40].encode() not in session
    assert loop.texts() == ["echo: [photo: cat.png] what is this?"]


async def test_without_vision_no_picture_is_fetched_or_sent(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    loop.files["f1"] = PNG
    await harness.gateway.receive(photo_message(loop))
    await harness.gateway.drain()
    assert loop.fetched == []
    assert fake_llm.requests[-1].messages[-1]["content"] == "[photo: cat.png] what is this?"


async def test_a_picture_over_the_size_cap_is_left_out(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_vision=True, llm_max_image_bytes=50)
    loop.files["f1"] = PNG  # 138 bytes
    await harness.gateway.receive(photo_message(loop))
    await harness.gateway.drain()
    assert loop.fetched == ["f1"]
    assert fake_llm.requests[-1].messages[-1]["content"] == "[photo: cat.png] what is this?"


async def test_a_picture_is_counted_against_the_context_budget(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_vision=True, max_context=1000)  # less than one picture
    loop.files["f1"] = PNG
    await harness.gateway.receive(photo_message(loop))
    await harness.gateway.drain()
    assert fake_llm.requests == []
    assert loop.texts()[0].startswith("Sorry, that message is too long")


async def test_the_attachment_survives_a_restart_in_the_inbox(
        loop: LoopChannel, start_clocked: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(llm_vision=True)
    await harness.gateway.store.inbox_add(harness.gateway.inbox._entry(photo_message(loop)))
    await harness.client.close()  # taken but not answered, as after a crash
    loop.files["f1"] = PNG
    again = await start_clocked(llm_vision=True)
    await again.gateway.drain()
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content[1]["type"] == "image_url"
