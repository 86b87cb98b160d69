"""A hostile channel plugin: whatever it asks of its host, it stays inside its own keys.

It may receive, send and read pinned memory only in ``evil:…`` conversations: alice's dashboard
thread (``alice--t1``), another channel's chats and ``--`` keys are refused with a 403 it can
read, nothing is stored or charged, no turn runs, and the refusal is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import (
    Channel,
    Forbidden,
    Gateway,
    InboundMessage,
    OutboundMessage,
    PluginError,
    PluginHost,
    hookimpl,
)
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]


class EvilChannel(Channel):
    """A channel whose plugin tries to reach conversations that are not its own."""

    name = "evil"

    def __init__(self) -> None:
        self.host: PluginHost | None = None

    async def send(self, address: Any, text: str) -> None:
        """Replies go nowhere: the tests look at what was refused."""


class EvilPlugin:
    def __init__(self, channel: EvilChannel) -> None:
        self.channel = channel

    @hookimpl
    def register_channels(self, host: PluginHost) -> list[Channel]:
        self.channel.host = host
        return [self.channel]


@pytest.fixture
def evil(pm: PluginManager) -> EvilChannel:
    channel = EvilChannel()
    pm.register(EvilPlugin(channel), name="evil-plugin")
    return channel


def message(channel: str, conversation: str, text: str = "show me alice's thread",
            message_id: str = "m1") -> InboundMessage:
    return InboundMessage(channel=channel, conversation=conversation, sender="evil:mallory",
                          message_id=message_id, text=text)


async def alice_with_history(harness: Harness) -> dict[str, str]:
    auth = await harness.user("alice")
    response = await harness.chat(auth, "my secret plan is to sail on Tuesday")
    assert response.status == 200, await response.text()
    return auth


@pytest.mark.parametrize(("channel", "conversation", "code"), [
    ("dashboard", "alice--t1", "not_your_channel"),
    ("evil", "alice--t1", "not_your_conversation"),
    ("evil", "evil:alice--t1", "not_your_conversation"),
    ("evil", "evilx:1", "not_your_conversation"),
    ("telegram", "telegram:42", "not_your_channel"),
    ("nobody", "nobody:1", "not_your_channel"),
])
async def test_a_hostile_channel_cannot_run_a_turn_in_another_conversation(
        start_gateway: StartGateway, evil: EvilChannel, fake_llm: FakeLLM, channel: str,
        conversation: str, code: str) -> None:
    harness = await start_gateway()
    await alice_with_history(harness)
    asked = len(fake_llm.requests)
    before = await harness.gateway.store.get_user("alice")
    assert evil.host is not None
    with pytest.raises(Forbidden) as refused:
        await evil.host.receive(message(channel, conversation))
    assert refused.value.code == code and refused.value.status == 403
    with pytest.raises(Forbidden):
        await evil.host.answer_now(message(channel, conversation))
    await harness.gateway.drain()
    assert len(fake_llm.requests) == asked  # no turn ran: alice's history reached no prompt
    assert await harness.gateway.store.get_user("alice") == before  # nothing charged
    assert await harness.gateway.store.inbox_pending() == []


async def test_a_hostile_channel_cannot_send_to_or_read_another_conversation(
        start_gateway: StartGateway, evil: EvilChannel) -> None:
    harness = await start_gateway()
    auth = await harness.user("alice")
    await harness.client.put("/api/user/memory?threadId=t1", headers=auth,
                             json={"key": "door", "value": "1234"})
    assert evil.host is not None
    for conversation in ("alice--t1", "telegram:42", "evil:alice--t1"):
        with pytest.raises(Forbidden):
            await evil.host.send(OutboundMessage("evil", conversation, {}, "hello"))
        with pytest.raises(Forbidden):
            await evil.host.pinned(conversation)
    assert await harness.gateway.store.pending_deliveries() == []


async def test_each_kind_of_refusal_is_logged_once_naming_the_plugin(
        start_gateway: StartGateway, evil: EvilChannel,
        caplog: pytest.LogCaptureFixture) -> None:
    await start_gateway()
    assert evil.host is not None
    with caplog.at_level(logging.WARNING, logger="gateway.kit.host"):
        for n in range(3):
            with pytest.raises(Forbidden):
                await evil.host.receive(message("evil", "alice--t1", message_id=f"m{n}"))
    lines = [r.getMessage() for r in caplog.records if "evil-plugin" in r.getMessage()]
    assert len(lines) == 1 and "alice--t1" in lines[0]


async def test_the_gateway_itself_refuses_a_channel_nobody_registered(
        start_gateway: StartGateway) -> None:
    harness = await start_gateway()
    gateway: Gateway = harness.gateway
    with pytest.raises(Forbidden):
        await gateway.receive(message("ghost", "ghost:1"))
    with pytest.raises(Forbidden):  # the dashboard's turns come from the HTTP API only
        await gateway.receive(message("dashboard", "alice--t1"))
    assert await gateway.store.inbox_pending() == []


@pytest.mark.parametrize("name", ["alice--t1", "evil:x", "Evil", "", "x" * 33, "9lives"])
async def test_a_channel_name_that_could_reach_other_keys_stops_start_up(
        start_gateway: StartGateway, pm: PluginManager, name: str) -> None:
    class Named(Channel):
        async def send(self, address: Any, text: str) -> None:
            """Never called."""

    channel = Named()
    channel.name = name

    class Plugin:
        @hookimpl
        def register_channels(self, host: PluginHost) -> list[Channel]:
            return [channel]

    pm.register(Plugin(), name="badly-named")
    with pytest.raises(PluginError, match="badly-named"):
        await start_gateway()
