"""The webhook channel through a real gateway, with the fixtures of the ``cloudybot`` pytest
plugin (``cloudybot_start``, ``cloudybot_fake_llm``)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from cloudybot_webhook import signature, signed_headers

from gateway.testing.plugin import GatewayHarness

SECRET = "example-secret"


class Callback:
    """The external system's side: receives replies on 127.0.0.1 and checks their signature."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.bad_signatures = 0
        self.fail_first = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        stamp = request.headers["X-Webhook-Timestamp"]
        if request.headers["X-Webhook-Signature"] != signature(SECRET, stamp, body):
            self.bad_signatures += 1
            return web.Response(status=401)
        if self.fail_first:
            self.fail_first -= 1
            return web.Response(status=503)
        self.replies.append(json.loads(body))
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/replies", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/replies"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def callback() -> AsyncIterator[Callback]:
    server = Callback()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def harness(callback: Callback,
                  cloudybot_start: Callable[..., Awaitable[GatewayHarness]]) -> GatewayHarness:
    return await cloudybot_start(env={"CLOUDYBOT_WEBHOOK_SECRET": SECRET,
                                      "CLOUDYBOT_WEBHOOK_CALLBACK_URL": callback.url})


def inbound(message_id: str, text: str, conversation: str = "ticket-42") -> bytes:
    return json.dumps({"id": message_id, "conversation": conversation, "sender": "jane",
                       "text": text}).encode()


async def post(harness: GatewayHarness, body: bytes, headers: dict[str, str] | None = None) -> Any:
    return await harness.client.post("/webhook/messages", data=body,
                                     headers=headers or signed_headers(SECRET, body))


async def test_plugin_is_discovered_through_its_entry_point(harness: GatewayHarness) -> None:
    assert "webhook" in harness.gateway.channels
    assert harness.gateway.pm.get_plugin("webhook") is not None


async def test_message_is_answered_at_the_callback(harness: GatewayHarness,
                                                   callback: Callback) -> None:
    body = inbound("m-1", "Hello from the ticket system")
    reply = await harness.exchange(lambda: post(harness, body), channel="webhook",
                                   message_id="m-1")
    assert reply == "echo: Hello from the ticket system"
    assert callback.replies == [{"inReplyTo": "m-1", "conversation": "ticket-42",
                                 "text": "echo: Hello from the ticket system"}]
    session = harness.gateway.settings.sessions_dir / "webhook%3Aticket-42.jsonl"
    assert json.loads(session.read_text().splitlines()[0])["key"] == "webhook:ticket-42"


async def test_conversation_keeps_its_memory(harness: GatewayHarness,
                                             cloudybot_fake_llm: Any) -> None:
    await harness.exchange(lambda: post(harness, inbound("m-1", "my name is Jane")),
                           channel="webhook", message_id="m-1")
    await harness.exchange(lambda: post(harness, inbound("m-2", "what is my name?")),
                           channel="webhook", message_id="m-2")
    sent = cloudybot_fake_llm.requests[-1].messages
    assert [m["content"] for m in sent[1:]] == ["my name is Jane", "echo: my name is Jane",
                                                "what is my name?"]


async def test_bad_and_stale_signatures_are_refused(harness: GatewayHarness,
                                                    cloudybot_fake_llm: Any) -> None:
    body = inbound("m-1", "hi")
    forged = {**signed_headers(SECRET, body), "X-Webhook-Signature": "sha256=" + "0" * 64}
    stale = signed_headers(SECRET, body, int(time.time()) - 301)
    odd_stamp = {**signed_headers(SECRET, body), "X-Webhook-Timestamp": "²"}
    odd_digest = {**signed_headers(SECRET, body), "X-Webhook-Signature": "sha256=é"}
    for headers in (forged, stale, {"Content-Type": "application/json"}, odd_stamp,
                    odd_digest):
        response = await post(harness, body, headers)
        assert response.status == 401
    await harness.gateway.drain()
    assert cloudybot_fake_llm.requests == []


@pytest.mark.parametrize("body", [b"{oops", b"[]", b'{"id": "../x", "conversation": "c", '
                                  b'"sender": "s", "text": "t"}', b'{"id": "m", "text": ""}'])
async def test_malformed_bodies_are_400(harness: GatewayHarness, body: bytes) -> None:
    response = await post(harness, body)
    assert response.status == 400
    assert "error" in await response.json()


async def test_redelivery_is_answered_once(harness: GatewayHarness, callback: Callback,
                                           cloudybot_fake_llm: Any) -> None:
    body = inbound("m-1", "hi")
    await harness.exchange(lambda: post(harness, body), channel="webhook", message_id="m-1")
    assert (await post(harness, body)).status == 202
    await harness.gateway.drain()
    assert len(callback.replies) == 1
    assert len(cloudybot_fake_llm.requests) == 1


async def test_failed_callback_is_retried_without_rerunning_the_agent(
        harness: GatewayHarness, callback: Callback, cloudybot_fake_llm: Any) -> None:
    harness.gateway.outbox.backoff_seconds = 0.01
    callback.fail_first = 2
    reply = await harness.exchange(lambda: post(harness, inbound("m-1", "hi")),
                                   channel="webhook", message_id="m-1")
    assert reply == "echo: hi"
    assert len(callback.replies) == 1
    assert len(cloudybot_fake_llm.requests) == 1


async def test_two_messages_sent_together_are_answered_in_order(
        harness: GatewayHarness, callback: Callback) -> None:
    # the second arrives while the first is still being answered
    for message_id, text in (("m-1", "first"), ("m-2", "second")):
        assert (await post(harness, inbound(message_id, text))).status == 202
    await harness.recorder.wait("webhook", "m-2", 10)
    assert [r["text"] for r in callback.replies] == ["echo: first", "echo: second"]


async def test_stopping_the_gateway_still_delivers_accepted_messages(
        harness: GatewayHarness, callback: Callback, cloudybot_fake_llm: Any) -> None:
    from gateway.testing.fake_llm import Scripted, completion

    cloudybot_fake_llm.script = [Scripted(body=completion("echo: first"), delay=0.3)]
    for message_id, text in (("m-1", "first"), ("m-2", "second")):
        assert (await post(harness, inbound(message_id, text))).status == 202
    await harness.client.close()  # stops the gateway while m-1 is answered and m-2 waits
    assert [r["text"] for r in callback.replies] == ["echo: first", "echo: second"]
