"""Slack pictures to a vision model: downloaded with the bot token from Slack's file host,
capped in size, named in the transcript."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import SIGNING_SECRET, FakeSlack, event_body, sign
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]
PNG = b"\x89PNG\r\n\x1a\n" + b"slack-picture" * 20


def file_share(fake_slack: FakeSlack, text: str, ts: str, url: str | None = None,
               mimetype: str = "image/png") -> bytes:
    files: list[dict[str, Any]] = [{
        "id": "F1", "name": "chart.png", "mimetype": mimetype, "size": len(PNG),
        "url_private_download": url or fake_slack.file_url("chart.png")}]
    return event_body({"type": "message", "subtype": "file_share", "channel_type": "im",
                       "channel": "D0LAN2Q65", "user": "U061F7AUR", "text": text, "ts": ts,
                       "files": files}, f"Ev{ts}")


async def post(slack: Harness, body: bytes) -> None:
    response = await slack.client.post("/slack/events", data=body,
                                       headers=sign(SIGNING_SECRET, body))
    assert response.status == 200


async def test_a_shared_picture_reaches_a_vision_model(
        start_slack: StartGateway, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack = await start_slack(llm_vision=True)
    fake_slack.files["chart.png"] = ("image/png", PNG)
    await post(slack, file_share(fake_slack, "what does this show?", "1767226000.000100"))
    await fake_slack.wait_for("chat.postMessage", 1)
    await slack.gateway.drain()
    assert fake_slack.downloads == [("chart.png", "Bearer xoxb-test-token")]
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content[0]["text"] == "[image: chart.png] what does this show?"
    assert content[1]["image_url"]["url"] == \
        "data:image/png;base64," + base64.b64encode(PNG).decode()
    page = await slack.gateway.store.display_page("slack:T0G9PQBBK:D0LAN2Q65", 10, None)
    assert page.messages[0].content == "[image: chart.png] what does this show?"


async def test_a_picture_without_vision_is_neither_downloaded_nor_sent(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    fake_slack.files["chart.png"] = ("image/png", PNG)
    await post(slack, file_share(fake_slack, "what does this show?", "1767226000.000200"))
    await fake_slack.wait_for("chat.postMessage", 1)
    assert fake_slack.downloads == []
    assert fake_llm.requests[-1].messages[-1]["content"] == "what does this show?"


async def test_pictures_too_large_or_off_slack_are_left_out(
        start_slack: StartGateway, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack = await start_slack(llm_vision=True, llm_max_image_bytes=100)
    fake_slack.files["chart.png"] = ("image/png", PNG)  # 268 bytes
    await post(slack, file_share(fake_slack, "too big?", "1767226000.000300"))
    await post(slack, file_share(fake_slack, "elsewhere?", "1767226000.000400",
                                 url="http://169.254.169.254/latest/meta-data"))
    await fake_slack.wait_for("chat.postMessage", 2)
    await slack.gateway.drain()
    assert [name for name, _ in fake_slack.downloads] == ["chart.png"]  # never the metadata host
    assert all(isinstance(r.messages[-1]["content"], str) for r in fake_llm.requests)
