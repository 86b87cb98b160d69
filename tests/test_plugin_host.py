"""The PluginHost each plugin gets: what it may do, and that it stays inside its own keys."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from gateway import (
    ChatCommand,
    Command,
    CommandContext,
    Forbidden,
    Leadership,
    NotFound,
    OutboundMessage,
    PluginHost,
    Tool,
    ToolContext,
    hookimpl,
)
from gateway.plugins.manager import PluginManager
from gateway.store import ThreadRef
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import until_async
from tests.test_agent_tools import tool_call_completion
from tests.test_metrics import scrape, value
from tests.test_redaction import save_password

StartGateway = Callable[..., Awaitable[Harness]]


def host_of(loop: LoopChannel) -> PluginHost:
    assert loop.host is not None, "the gateway has not loaded the loop channel"
    return loop.host


# --- receive -----------------------------------------------------------------------------------
async def test_a_channel_takes_messages_of_its_own_conversations(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    await start_gateway()
    host = host_of(loop)
    assert host.name == "loop-channel"
    assert await host.receive(loop.message("m1", "hello")) is True
    assert await loop.wait_for(1)
    assert await host.receive(loop.message("m1", "hello")) is False  # a redelivery


@pytest.mark.parametrize(("channel", "conversation", "code"), [
    ("dashboard", "dashboard:x", "not_your_channel"),  # a channel another plugin registered
    ("nowhere", "nowhere:x", "not_your_channel"),  # a channel nobody registered
    ("loop", "alice--t1", "not_your_conversation"),  # alice's dashboard thread
    ("loop", "telegram:42", "not_your_conversation"),  # another channel's chat
    ("loop", "loop:", "not_your_conversation"),
])
async def test_a_channel_cannot_reach_another_channels_keys(
        start_gateway: StartGateway, loop: LoopChannel, fake_llm: FakeLLM, channel: str,
        conversation: str, code: str) -> None:
    harness = await start_gateway()
    await harness.user("alice")
    message = loop.message("m1", "what did I say before?", conversation=conversation)
    message = replace(message, channel=channel)
    with pytest.raises(Forbidden) as refused:
        await host_of(loop).receive(message)
    assert refused.value.code == code
    with pytest.raises(Forbidden):
        await host_of(loop).answer_now(message)
    await harness.gateway.drain()
    assert fake_llm.requests == []  # no turn ran, nothing was charged
    assert await harness.gateway.store.inbox_pending() == []


# --- send --------------------------------------------------------------------------------------
async def test_a_plugin_sends_its_own_message_through_the_durable_outbox(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    host = host_of(loop)
    await host.send(OutboundMessage("loop", "loop:c9", {"conversation": "loop:c9", "id": "n1"},
                                    "Your reminder: stretch.", max_chars=10))
    replies = await loop.wait_for(3)  # split at the channel's max_chars
    assert "".join(text for _, text in replies).replace(" ", "") == "Yourreminder:stretch."
    # delivered, then removed (the removal follows the platform's answer to the last part)
    await until_async(lambda: no_deliveries(harness, "loop:c9"))


async def no_deliveries(harness: Harness, conversation: str) -> bool:
    return await harness.gateway.store.deliveries(conversation) == []


async def test_a_send_outside_the_plugins_conversations_is_refused_and_queues_nothing(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    with pytest.raises(Forbidden):
        await host_of(loop).send(OutboundMessage("loop", "alice--t1", {}, "hi"))
    assert await harness.gateway.store.pending_deliveries() == []


async def test_a_send_that_could_not_be_delivered_waits_for_the_next_start(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    loop.failures["n2"] = [ConnectionError("down")]
    await host_of(loop).send(OutboundMessage(
        "loop", "loop:c9", {"conversation": "loop:c9", "id": "n2"}, "later"))
    # committed before send() returned: the store holds it until the platform takes it
    assert [d.text for d in await harness.gateway.store.deliveries("loop:c9")] == ["later"]


# --- pinned memory -----------------------------------------------------------------------------
async def test_a_channel_reads_and_writes_the_pinned_memory_of_its_conversations(
        start_gateway: StartGateway, loop: LoopChannel, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    host = host_of(loop)
    with pytest.raises(NotFound):
        await host.pinned("loop:c1")  # nobody talked there yet
    await host.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    memory = await host.pinned("loop:c1")
    assert await memory.put("city", "Paris") == {"city": "Paris"}
    await host.receive(loop.message("m2", "and now?"))
    await loop.wait_for(2)
    assert "Paris" in fake_llm.requests[-1].system_text  # pinned: in every prompt
    assert await memory.delete("city") == {}
    for foreign in ("alice--t1", "telegram:1", "dashboard"):
        with pytest.raises(Forbidden):
            await host.pinned(foreign)
    assert await harness.gateway.store.get_pinned(
        ThreadRef("alice", "t1", "alice--t1", "dashboard")) == {}


async def test_pinned_memory_refuses_a_saved_password(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    auth = await harness.user("loop:ada")
    await save_password(harness, auth, "hunter2-hunter2")
    host = host_of(loop)
    await host.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    memory = await host.pinned("loop:c1")
    with pytest.raises(Exception) as refused:
        await memory.put("wifi", "it is hunter2-hunter2")
    assert getattr(refused.value, "code", None) == "contains_secret"
    assert await memory.get() == {}


# --- everything else a plugin may do -----------------------------------------------------------
async def test_each_plugin_gets_a_host_of_its_own(
        start_gateway: StartGateway, pm: PluginManager, loop: LoopChannel) -> None:
    seen: dict[str, PluginHost] = {}

    class Observer:
        @hookimpl
        def register_tools(self, host: PluginHost) -> list[Tool]:
            seen["observer"] = host
            return []

    pm.register(Observer(), name="observer")
    harness = await start_gateway()
    assert seen["observer"].name == "observer"
    assert seen["observer"] is harness.gateway.host_for("observer")  # one per plugin
    assert seen["observer"] is not host_of(loop)
    assert seen["observer"].log.name == "cloudybot.plugin.observer"
    with pytest.raises(Forbidden):  # a plugin without channels owns no conversation
        await seen["observer"].receive(loop.message("m1", "hi"))


async def test_a_plugins_counters_are_scraped(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    host = host_of(loop)
    host.metrics.count("pings")
    host.metrics.count("pings", 2)
    host.metrics.count("calls", kind="a")
    samples = await scrape(harness)
    assert value(samples, "cloudybot_plugin_loop_channel_pings_total") == 3
    assert value(samples, "cloudybot_plugin_loop_channel_calls_total", kind="a") == 1
    with pytest.raises(ValueError):
        host.metrics.count("Bad Name")


async def test_account_and_clock(start_gateway: StartGateway, loop: LoopChannel) -> None:
    harness = await start_gateway()
    await harness.user("alice")
    host = host_of(loop)
    account = await host.account("alice")
    assert account is not None and account.user_id == "alice" and account.credits > 0
    assert await host.account("nobody") is None
    harness.gateway.clock = lambda: 1234.5  # tests move the gateway's clock: so does the host's
    assert host.now() == 1234.5
    assert host.accepting is True


async def test_a_command_gets_the_host_of_the_plugin_that_registered_it(
        start_gateway: StartGateway, pm: PluginManager, loop: LoopChannel) -> None:
    hosts: list[str] = []

    async def whoami(context: CommandContext) -> str:
        hosts.append(context.host.name)
        await context.memory.put("asked", "yes")
        return "you asked"

    class Commands:
        @hookimpl
        def register_commands(self, host: PluginHost) -> list[ChatCommand]:
            return [ChatCommand("whoami", "", "who runs this", whoami, per_conversation=True)]

    pm.register(Commands(), name="whoami-commands")
    harness = await start_gateway()
    await host_of(loop).receive(loop.message("m1", "", command=Command("whoami")))
    assert await loop.wait_for(1) == [("m1", "you asked")]
    assert hosts == ["whoami-commands"]
    assert await harness.gateway.store.get_pinned(
        ThreadRef("loop:ada", "loop:c1", "loop:c1", "loop")) == {"asked": "yes"}


# --- saved logins go only to a tool that fills them --------------------------------------------
async def test_saved_logins_reach_only_tools_that_declare_they_fill_them(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    seen: dict[str, tuple[str, ...]] = {}

    def recorder(name: str) -> Callable[[dict[str, Any], ToolContext], Awaitable[str]]:
        async def run(arguments: dict[str, Any], context: ToolContext) -> str:
            seen[name] = tuple(login.site for login in context.saved_logins)
            return "ok"
        return run

    class Tools:
        @hookimpl
        def register_tools(self, host: PluginHost) -> list[Tool]:
            schema = {"type": "object", "properties": {}}
            return [Tool("filler", "fills logins", schema, recorder("filler"),
                         uses_saved_logins=True),
                    Tool("reader", "reads pages", schema, recorder("reader"))]

    pm.register(Tools(), name="login-tools")
    harness = await start_gateway()
    auth = await harness.user("alice")
    await save_password(harness, auth, "correct-horse-battery")
    fake_llm.script += [Scripted(body=tool_call_completion([("c1", "filler", "{}"),
                                                            ("c2", "reader", "{}")])),
                        Scripted(body=completion("done"))]
    response = await harness.chat(auth, "log me in")
    assert response.status == 200, await response.text()
    assert seen == {"filler": ("example.com",), "reader": ()}


async def test_play_holds_a_role_asks_again_when_lost_and_ends_with_its_work(
        start_gateway: StartGateway, loop: LoopChannel) -> None:
    await start_gateway()
    rounds = 0

    async def work(leadership: Leadership) -> bool:
        nonlocal rounds
        assert await leadership.alive()
        rounds += 1
        return rounds < 2  # the first round lost the role; the second ended its work

    await host_of(loop).play("test-role", work)
    assert rounds == 2
