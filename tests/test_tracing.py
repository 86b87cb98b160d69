"""Tracing (issue 32): the spans a turn makes, recorded by the OpenTelemetry SDK's in-memory
exporter. The tree (turn, prompt assembly, provider and tool calls, rotation, summarization),
the GenAI attributes, a W3C ``traceparent`` continued from ``/chat`` and
``/v1/chat/completions``, the trace carried across the durable inbox and outbox (a child in
the same process, a span link after a restart), content only when asked for, and no saved
password in any span, whatever it is encoded as."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway import ConfigError, Tool, hookimpl
from gateway.app import build_app
from gateway.config.settings import DEFAULT_PLANS, Plan
from gateway.gateway import Gateway
from gateway.interfaces import DeliveryRetry
from gateway.observe import NO_TRACER, TraceContext
from gateway.observe.otel import OtelTracer
from gateway.observe.setup import tracer_from_environment, wanted_exporters
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import (
    FakeLLM,
    Recorded,
    Scripted,
    completion,
    tool_call_completion,
)
from gateway.testing.plugin import ReplyRecorder
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock, reopened_store, until
from tests.test_redaction import QUOTED_PASSWORD, UMLAUT_PASSWORD, leaked

ROOT = Path(__file__).resolve().parent.parent
StartGateway = Callable[..., Awaitable[Harness]]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TURN = "invoke_agent cloudybot"
CHAT = "chat fake-model"


@pytest.fixture
def exported() -> InMemorySpanExporter:
    """Every span the test's gateways ended, in the order they ended."""
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exported: InMemorySpanExporter) -> Iterator[OtelTracer]:
    """An SDK tracer exporting at once to ``exported``."""
    processor = SimpleSpanProcessor(exported)
    yield OtelTracer(TracerProvider(resource=Resource({"service.name": "cloudybot-test"})),
                     processor)
    processor.shutdown()


@pytest.fixture
def start(fake_llm: FakeLLM, aiohttp_client: Any, make_settings: Callable[..., Any],
          pm: PluginManager, clock: Clock, tracer: OtelTracer,
          cloudybot_recorder: ReplyRecorder) -> StartGateway:
    """A gateway that traces into ``exported``, on the test's clock; again for a restart."""
    async def start(**overrides: Any) -> Harness:
        settings = make_settings(**{"purge_interval_minutes": 0.0, **overrides})
        gateway = Gateway(settings, pm, clock=clock, tracer=tracer)
        return Harness(gateway, await aiohttp_client(await build_app(gateway)),
                       cloudybot_recorder)
    return start


# --- reading the spans ----------------------------------------------------------------------
def named(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exported.get_finished_spans() if span.name == name]


def one(exported: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = named(exported, name)
    return span


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def is_child(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert child.context is not None and parent.context is not None
    return (child.context.trace_id == parent.context.trace_id
            and parent_of(child) == parent.context.span_id)


def traceparent_of(span: ReadableSpan) -> str:
    """The span's W3C ``traceparent``, as a row or a header carries it."""
    context = span.context
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def links_to(span: ReadableSpan, target: ReadableSpan) -> bool:
    assert target.context is not None
    return any(link.context.span_id == target.context.span_id
               and link.context.trace_id == target.context.trace_id for link in span.links)


def everything_said(exported: InMemorySpanExporter) -> list[str]:
    """Every text a span holds: names, attribute keys and values, events, links' and
    status descriptions, as strings (JSON values decoded too)."""
    texts: list[str] = []
    for span in exported.get_finished_spans():
        texts.append(span.name)
        texts.append(span.status.description or "")
        values: list[Any] = [*attributes(span).items()]
        for event in span.events:
            values += [event.name, *dict(event.attributes or {}).items()]
        for link in span.links:
            values += [*dict(link.attributes or {}).items()]
        for value in values:
            texts.append(json.dumps(value, ensure_ascii=False, default=str))
            texts.append(json.dumps(value, default=str))
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, str):
                    texts.append(item)
                    with contextlib.suppress(ValueError):
                        texts.append(json.dumps(json.loads(item), ensure_ascii=False))
    return texts


def register_tool(pm: PluginManager, name: str, run: Callable[..., Awaitable[Any]]) -> None:
    class OneTool:
        @hookimpl
        def register_tools(self, host: Any) -> list[Tool]:
            return [Tool(name=name, description=f"the {name} tool",
                         parameters={"type": "object", "properties": {}}, run=run)]
    pm.register(OneTool(), name=f"tool-{name}")


# --- the turn's tree ------------------------------------------------------------------------
async def test_a_chat_turn_is_one_trace_with_its_prompt_and_provider_call_inside(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM) -> None:
    harness = await start()
    auth = await harness.user()
    fake_llm.script.append(Scripted(body=completion("hello back", prompt_tokens=31,
                                                    completion_tokens=7)))
    response = await harness.chat(auth, "hello", specialist=None)
    assert response.status == 200
    usage = (await response.json())["usage"]

    turn, prompt, call = one(exported, TURN), one(exported, "assemble_prompt"), \
        one(exported, CHAT)
    assert turn.parent is None  # no traceparent: a trace of its own
    assert attributes(turn) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "cloudybot",
        "gen_ai.conversation.id": "alice--t1", "user.id": "alice",
        "cloudybot.thread.id": "t1", "cloudybot.channel": "dashboard",
        "cloudybot.turn.outcome": "answered", "cloudybot.turn.credits": usage["credits"],
        "cloudybot.turn.summarized": False, "cloudybot.session.rotated": False}
    assert is_child(prompt, turn) and is_child(call, turn)
    layers = attributes(prompt)
    assert layers["cloudybot.prompt.base.tokens"] > 0
    assert layers["cloudybot.prompt.message.tokens"] == 1  # "hello"
    assert layers["cloudybot.prompt.recent.kept"] == 0
    assert layers["cloudybot.prompt.tokens"] >= layers["cloudybot.prompt.base.tokens"]
    assert call.kind == SpanKind.CLIENT
    said = attributes(call)
    assert {key: said[key] for key in (
        "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.system",
        "gen_ai.request.model", "gen_ai.response.model", "gen_ai.request.max_tokens",
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
        "gen_ai.response.finish_reasons", "cloudybot.charge.kind", "cloudybot.billed")} == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai", "gen_ai.request.model": "fake-model",
        "gen_ai.response.model": "fake-model", "gen_ai.request.max_tokens": 1024,
        "gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("stop",), "cloudybot.charge.kind": "chat",
        "cloudybot.billed": True}
    assert (usage["promptTokens"], usage["completionTokens"]) == (31, 7)
    assert turn.status.status_code == StatusCode.UNSET


async def test_a_failed_turn_is_marked_with_its_error_type_and_no_message(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM) -> None:
    harness = await start(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script.append(Scripted(status=400, body={"error": {"message": "bad request"}}))
    assert (await harness.chat(auth, "hello")).status == 502
    turn, call = one(exported, TURN), one(exported, CHAT)
    assert attributes(turn)["cloudybot.turn.outcome"] == "error"
    for span in (turn, call):
        assert span.status.status_code == StatusCode.ERROR
        assert attributes(span)["error.type"] == "provider_error"
        assert span.status.description == "provider_error"  # the code, never the words


async def test_tool_calls_are_execute_tool_spans_between_two_provider_calls(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        pm: PluginManager) -> None:
    async def lookup(arguments: dict[str, Any], context: Any) -> str:
        return "found it"

    async def broken(arguments: dict[str, Any], context: Any) -> str:
        raise RuntimeError("the tool broke")

    register_tool(pm, "lookup", lookup)
    register_tool(pm, "broken", broken)
    harness = await start()
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "lookup", "{}"),
                                            ("call_2", "broken", "{}")])),
        Scripted(body=completion("done"))]
    assert (await harness.chat(auth, "look it up")).status == 200

    turn = one(exported, TURN)
    first, second = sorted(named(exported, CHAT), key=lambda span: span.start_time or 0)
    assert [attributes(call)["cloudybot.charge.kind"] for call in (first, second)] == [
        "chat", "tool_round"]
    assert attributes(first)["gen_ai.response.finish_reasons"] == ("tool_calls",)
    found, failed = one(exported, "execute_tool lookup"), one(exported, "execute_tool broken")
    for span in (first, second, found, failed):
        assert is_child(span, turn)
    assert {key: attributes(found)[key] for key in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id",
        "gen_ai.tool.type")} == {"gen_ai.operation.name": "execute_tool",
                                 "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "call_1",
                                 "gen_ai.tool.type": "function"}
    assert found.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR
    assert attributes(failed)["error.type"] == "tool_error"
    assert first.end_time is not None and found.start_time is not None
    assert first.end_time <= found.start_time and failed.end_time is not None
    assert second.start_time is not None and failed.end_time <= second.start_time


async def test_an_mcp_tool_call_says_which_server_and_tool_it_called(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        tmp_path: Path) -> None:
    from tests.test_mcp import stdio

    harness = await start(mcp_servers=json.dumps(
        {"files": stdio(tmp_path / "mcp.log", plans=["free"])}))
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "files__echo", '{"text": "hi"}')])),
        Scripted(body=completion("done"))]
    assert (await harness.chat(auth, "echo hi")).status == 200
    tool = one(exported, "execute_tool files__echo")
    assert is_child(tool, one(exported, TURN))
    assert tool.status.status_code == StatusCode.UNSET
    assert {key: attributes(tool)[key] for key in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.type", "mcp.method.name",
        "cloudybot.mcp.server", "cloudybot.mcp.tool", "network.transport")} == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "files__echo",
        "gen_ai.tool.type": "extension", "mcp.method.name": "tools/call",
        "cloudybot.mcp.server": "files", "cloudybot.mcp.tool": "echo",
        "network.transport": "pipe"}


# --- traceparent -----------------------------------------------------------------------------
async def test_chat_continues_the_callers_traceparent_and_tracestate(
        start: StartGateway, exported: InMemorySpanExporter) -> None:
    harness = await start()
    auth = await harness.user()
    response = await harness.client.post(
        "/chat", json={"threadId": "t1", "message": "hello"},
        headers={**auth, "traceparent": TRACEPARENT, "tracestate": "vendor=abc,other=1"})
    assert response.status == 200
    turn = one(exported, TURN)
    assert turn.context is not None and turn.parent is not None
    assert format(turn.context.trace_id, "032x") == TRACE_ID
    assert format(turn.parent.span_id, "016x") == PARENT_ID
    assert turn.parent.is_remote
    assert dict(turn.context.trace_state) == {"vendor": "abc", "other": "1"}
    assert all(format(span.context.trace_id, "032x") == TRACE_ID
               for span in exported.get_finished_spans() if span.context is not None)


async def test_the_openai_compatible_endpoint_continues_the_traceparent_too(
        start: StartGateway, exported: InMemorySpanExporter) -> None:
    harness = await start()
    auth = await harness.user()
    response = await harness.client.post(
        "/v1/chat/completions",
        headers={**auth, "traceparent": TRACEPARENT, "X-CloudyBot-Thread": "t1"},
        json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status == 200, await response.text()
    turn = one(exported, TURN)
    assert turn.parent is not None and format(turn.parent.span_id, "016x") == PARENT_ID


@pytest.mark.parametrize("header", [
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # an all-zero trace id
    f"00-{TRACE_ID}-0000000000000000-01",                       # an all-zero parent id
    f"ff-{TRACE_ID}-{PARENT_ID}-01",                            # the forbidden version
    f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",                       # too short
    "not a traceparent"])
async def test_a_malformed_traceparent_is_ignored_and_the_turn_starts_a_trace(
        start: StartGateway, exported: InMemorySpanExporter, header: str) -> None:
    harness = await start()
    auth = await harness.user()
    response = await harness.client.post("/chat", json={"threadId": "t1", "message": "hello"},
                                         headers={**auth, "traceparent": header})
    assert response.status == 200  # never an error: the specification says ignore it
    turn = one(exported, TURN)
    assert turn.parent is None
    assert turn.context is not None and format(turn.context.trace_id, "032x") != TRACE_ID


def test_trace_contexts_are_read_and_stored_as_the_specification_says() -> None:
    found = TraceContext.from_headers(f" {TRACEPARENT.upper()} ", "a=1")
    assert found == TraceContext(TRACEPARENT, "a=1")
    assert TraceContext.stored(found.text) == TraceContext(TRACEPARENT, "a=1", linked=True)
    assert TraceContext.stored(found.text, linked=False) == found
    assert TraceContext.from_headers(TRACEPARENT, "x" * 513) == TraceContext(TRACEPARENT)
    assert TraceContext.from_headers(TRACEPARENT, "a=\x01") == TraceContext(TRACEPARENT)
    assert TraceContext.from_headers(None, "a=1") is None
    assert TraceContext.stored(None) is None and TraceContext.stored("") is None
    assert found.headers == {"traceparent": TRACEPARENT, "tracestate": "a=1"}


# --- rotation, summarization, fallback, retries -------------------------------------------
async def test_the_rotation_a_turn_begins_with_and_the_summary_it_makes_due_are_its_children(
        start: StartGateway, exported: InMemorySpanExporter, clock: Clock) -> None:
    harness = await start(summarize_at=4, keep_recent=2, session_idle_minutes=1.0)
    auth = await harness.user()
    assert (await harness.chat(auth, "one")).status == 200
    clock.advance(120)  # the session is idle past its minute: the next turn rotates it
    assert (await harness.chat(auth, "two")).status == 200
    await harness.gateway.drain()  # the summarization the second turn made due

    first, second = sorted(named(exported, TURN), key=lambda span: span.start_time or 0)
    rotated = one(exported, "rotate_session")
    assert is_child(rotated, second)
    assert attributes(rotated) == {"cloudybot.session.reason": "idle"}
    assert attributes(second)["cloudybot.session.rotated"] is True
    assert attributes(second)["cloudybot.turn.summarized"] is True
    summary = one(exported, "summarize")
    assert is_child(summary, second)
    assert attributes(summary) == {"gen_ai.conversation.id": "alice--t1",
                                   "cloudybot.summary.folded": 2,
                                   "cloudybot.summary.applied": True}
    [summary_call] = [span for span in named(exported, CHAT) if is_child(span, summary)]
    assert attributes(summary_call)["cloudybot.charge.kind"] == "summarize"
    assert not named(exported, "rotate_session")[1:] and first.context is not None


async def test_a_fallback_and_a_retry_are_events_of_the_call_that_answered(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        backup: FakeLLM) -> None:
    from gateway.config.fallback import fallback_chain, with_secrets
    from tests.test_provider_fallback import BACKUP_KEY, PRICES, backup_entry

    entries = with_secrets(fallback_chain(json.dumps([backup_entry(backup)])),
                           {"BACKUP_KEY": BACKUP_KEY})
    harness = await start(llm_fallback=entries, prices=PRICES, llm_max_retries=1)
    auth = await harness.user()
    fake_llm.script += [Scripted(status=503, body={"error": {"message": "busy"}}),
                        Scripted(status=503, body={"error": {"message": "busy"}})]
    assert (await harness.chat(auth, "hello")).status == 200

    call = one(exported, CHAT)  # one call: its span is named for the model asked first
    said = attributes(call)
    assert said["gen_ai.request.model"] == "backup-model"  # the model that answered
    assert (said["gen_ai.usage.input_tokens"], said["gen_ai.usage.output_tokens"]) == (100, 50)
    assert said["cloudybot.provider.retries"] == 1
    assert said["cloudybot.provider.fallbacks"] == 1
    retry, fallback = call.events
    assert retry.name == "retry" and dict(retry.attributes or {})[
        "cloudybot.retry.reason"] == "HTTP 503"
    assert fallback.name == "fallback" and dict(fallback.attributes or {}) == {
        "cloudybot.fallback.from": "openai/fake-model",
        "cloudybot.fallback.to": "openai/backup-model",
        "cloudybot.fallback.reason": "503"}
    [row] = [row for row in await harness.gateway.store.ledger("alice") if row.kind == "chat"]
    assert (row.model, row.prompt_tokens, row.completion_tokens) == ("backup-model", 100, 50)


@pytest.fixture
async def backup() -> AsyncIterator[FakeLLM]:
    """A second OpenAI-compatible API (the fallback)."""
    from tests.test_provider_fallback import backup_reply
    fake = FakeLLM()
    fake.responder = backup_reply
    await fake.start()
    yield fake
    await fake.close()


# --- channels: the durable inbox and outbox ---------------------------------------------------
async def test_a_channel_message_is_one_trace_from_intake_through_the_turn_to_the_send(
        loop: LoopChannel, start: StartGateway, exported: InMemorySpanExporter) -> None:
    harness = await start()
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    await harness.gateway.drain()

    received, turn, sent = one(exported, "receive loop"), one(exported, TURN), \
        one(exported, "send loop")
    assert received.kind == SpanKind.CONSUMER and sent.kind == SpanKind.PRODUCER
    assert received.parent is None
    assert is_child(turn, received) and is_child(sent, turn)
    assert attributes(received) == {
        "cloudybot.channel": "loop", "messaging.system": "loop",
        "messaging.operation.name": "receive", "messaging.operation.type": "receive",
        "messaging.destination.name": "loop:c1", "messaging.message.id": "m1"}
    assert attributes(sent)["cloudybot.delivery.chunk"] == 1
    assert attributes(sent)["cloudybot.delivery.attempt"] == 1
    assert attributes(turn)["cloudybot.channel"] == "loop"


async def test_a_failed_send_is_marked_and_its_retry_is_another_span_of_the_same_trace(
        loop: LoopChannel, start: StartGateway, exported: InMemorySpanExporter) -> None:
    harness = await start()
    loop.failures["m1"] = [DeliveryRetry(0.01)]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    await harness.gateway.drain()
    turn = one(exported, TURN)
    failed, delivered = named(exported, "send loop")
    assert is_child(failed, turn) and is_child(delivered, turn)
    assert failed.status.status_code == StatusCode.ERROR
    assert attributes(failed)["error.type"] == "DeliveryRetry"
    assert attributes(delivered)["cloudybot.delivery.attempt"] == 2


async def test_after_a_restart_the_turn_links_to_the_intake_stored_with_its_inbox_row(
        loop: LoopChannel, start: StartGateway, exported: InMemorySpanExporter) -> None:
    harness = await start(default_plan="tiny", plans={
        **DEFAULT_PLANS, "tiny": Plan("tiny", 1000, 0, 30, 1)})
    await harness.gateway.receive(loop.message("m1", "first"))
    await harness.gateway.receive(loop.message("m2", "second"))  # over the limit: waits
    await loop.wait_for(1)
    await harness.client.close()  # the stop leaves m2 in the inbox
    intake = next(span for span in named(exported, "receive loop")
              if attributes(span)["messaging.message.id"] == "m2")
    async with reopened_store(harness.gateway.settings) as store:
        [pending] = await store.inbox_pending()
    assert TraceContext.stored(pending.trace) == TraceContext(traceparent_of(intake),
                                                              linked=True)

    exported.clear()
    again = await start()  # the default plan: no limit now
    await loop.wait_for(2)
    await again.gateway.drain()
    turn, sent = one(exported, TURN), one(exported, "send loop")
    assert turn.parent is None and links_to(turn, intake)  # a trace of its own, linked
    assert is_child(sent, turn)


async def test_a_reply_left_in_the_outbox_is_sent_after_a_restart_linked_to_its_turn(
        loop: LoopChannel, start: StartGateway, exported: InMemorySpanExporter,
        clock: Clock) -> None:
    harness = await start()
    loop.failures["m1"] = [DeliveryRetry(3600)]  # the platform says: in an hour
    await harness.gateway.receive(loop.message("m1", "hello"))
    await until(lambda: loop.attempts.get("m1") == 1)
    await harness.client.close()
    turn = one(exported, TURN)
    assert turn.context is not None
    async with reopened_store(harness.gateway.settings) as store:
        [pending] = await store.deliveries()
    stored = TraceContext.stored(pending.trace)
    assert stored is not None and stored.traceparent == traceparent_of(turn)  # the turn's

    exported.clear()
    clock.advance(3600 * 1.1)
    again = await start()
    await loop.wait_for(1)
    await again.gateway.drain()
    sent = one(exported, "send loop")
    assert sent.parent is None and links_to(sent, turn)
    assert sent.context is not None and sent.context.trace_id != turn.context.trace_id


async def test_a_webhook_delivery_is_a_child_of_the_turn_and_carries_its_traceparent(
        start: StartGateway, exported: InMemorySpanExporter) -> None:
    from tests.fakes.webhook_receiver import WebhookReceiver

    receiver = WebhookReceiver()
    url = await receiver.start()
    try:
        harness = await start(webhooks_allow_private=True)
        auth = await harness.user()
        created = await harness.client.post("/api/webhooks", headers=auth, json={
            "url": url, "events": ["message.created"]})
        assert created.status == 201
        receiver.secret = (await created.json())["secret"]
        assert (await harness.chat(auth, "hello")).status == 200
        await until(lambda: len(receiver.received) == 1)
        await until(lambda: bool(named(exported, "POST webhook")))
    finally:
        await receiver.close()
    turn, posted = one(exported, TURN), one(exported, "POST webhook")
    assert is_child(posted, turn) and posted.kind == SpanKind.CLIENT
    said = attributes(posted)
    assert (said["http.response.status_code"], said["server.address"],
            said["cloudybot.webhook.event"]) == (200, "127.0.0.1", "message.created")
    assert receiver.received[0].headers["traceparent"] == traceparent_of(posted)


# --- content and secrets ----------------------------------------------------------------------
async def test_no_message_text_reaches_a_span_unless_content_capture_is_on(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        pm: PluginManager) -> None:
    async def lookup(arguments: dict[str, Any], context: Any) -> str:
        return "the tool result text"

    register_tool(pm, "lookup", lookup)
    harness = await start()
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "lookup", '{"q": "tool argument"}')])),
        Scripted(body=completion("the model answer text"))]
    assert (await harness.chat(auth, "the user message text")).status == 200
    said = "\n".join(everything_said(exported))
    for text in ("the user message text", "the model answer text", "tool argument",
                 "the tool result text", "CloudyBot, a helpful assistant"):
        assert text not in said
    assert not [key for span in exported.get_finished_spans() for key in attributes(span)
                if key in ("gen_ai.input.messages", "gen_ai.output.messages",
                           "gen_ai.system_instructions", "gen_ai.tool.call.arguments",
                           "gen_ai.tool.call.result")]


async def test_content_capture_records_the_messages_in_the_genai_shape(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        pm: PluginManager) -> None:
    async def lookup(arguments: dict[str, Any], context: Any) -> str:
        return "the tool result text"

    register_tool(pm, "lookup", lookup)
    harness = await start(trace_content=True)
    auth = await harness.user()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "lookup", '{"q": "tool argument"}')])),
        Scripted(body=completion("the model answer text"))]
    assert (await harness.chat(auth, "the user message text")).status == 200

    first, second = sorted(named(exported, CHAT), key=lambda span: span.start_time or 0)
    system = json.loads(attributes(first)["gen_ai.system_instructions"])
    assert system[0]["type"] == "text" and "CloudyBot" in system[0]["content"]
    assert json.loads(attributes(first)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "the user message text"}]}]
    assert json.loads(attributes(first)["gen_ai.output.messages"]) == [
        {"role": "assistant", "finish_reason": "tool_calls", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "lookup",
             "arguments": {"q": "tool argument"}}]}]
    later = json.loads(attributes(second)["gen_ai.input.messages"])
    assert later[-1] == {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_1", "response": "the tool result text"}]}
    assert json.loads(attributes(second)["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "the model answer text"}]
    tool = one(exported, "execute_tool lookup")
    assert attributes(tool)["gen_ai.tool.call.arguments"] == '{"q": "tool argument"}'
    assert attributes(tool)["gen_ai.tool.call.result"] == "the tool result text"


@pytest.mark.parametrize("content", [False, True], ids=["content-off", "content-on"])
@pytest.mark.parametrize("password", [UMLAUT_PASSWORD, QUOTED_PASSWORD])
async def test_a_saved_password_is_in_no_span_in_any_encoding(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        pm: PluginManager, password: str, content: bool) -> None:
    async def echo(arguments: dict[str, Any], context: Any) -> str:
        return f"the page says {password} and {json.dumps(password)}"

    register_tool(pm, "echo", echo)
    harness = await start(trace_content=content, llm_max_retries=0, summarize_at=2,
                          keep_recent=1)
    auth = await harness.user()
    saved = await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": password})
    assert saved.status == 200
    arguments = json.dumps({"password": password})
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_1", "echo", arguments)],
                                           content=f"typing {password}", model=password)),
        Scripted(body=completion(f"your password is {password}", model=password))]
    assert (await harness.chat(auth, f"my password is {password}")).status == 200
    await harness.gateway.drain()  # the summarization it made due
    fake_llm.script.append(Scripted(status=500, body={"error": {"message": password}}))
    assert (await harness.chat(auth, f"again {password}")).status == 502
    await harness.gateway.drain()

    assert named(exported, "execute_tool echo") and named(exported, "summarize")
    assert leaked(password, *everything_said(exported)) == []


# --- tracing off ------------------------------------------------------------------------------
def test_off_by_default_and_on_only_with_the_otel_variables() -> None:
    assert wanted_exporters({}) == ()
    assert tracer_from_environment({}) is NO_TRACER
    assert wanted_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}) == (
        "otlp",)
    assert wanted_exporters({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}) == (
        "otlp",)
    assert wanted_exporters({"OTEL_TRACES_EXPORTER": "otlp, console"}) == ("otlp", "console")
    assert wanted_exporters({"OTEL_TRACES_EXPORTER": "none",
                             "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ()
    assert wanted_exporters({"OTEL_SDK_DISABLED": "true",
                             "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == ()
    assert wanted_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}) == ()


@pytest.mark.parametrize("environ, named_in_error", [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
     "grpc"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
     "http/json")])
def test_what_this_gateway_cannot_export_is_a_configuration_error(
        environ: dict[str, str], named_in_error: str) -> None:
    with pytest.raises(ConfigError, match=named_in_error):
        wanted_exporters(environ)


def test_only_the_tracing_module_imports_opentelemetry() -> None:
    importing = sorted(
        str(path.relative_to(ROOT)) for folder in ("gateway", "channels", "plugins")
        for path in (ROOT / folder).rglob("*.py")
        if any(line.lstrip().startswith(("import opentelemetry", "from opentelemetry"))
               for line in path.read_text(encoding="utf-8").splitlines()))
    assert importing == ["gateway/observe/otel.py"]


OFF_SCRIPT = """
import asyncio, sys, tempfile
from pathlib import Path
from gateway.app import build_app
from gateway.config.settings import load_settings
from gateway.gateway import Gateway

async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings = load_settings(None, env={"CLOUDYBOT_DATA_DIR": folder,
                                            "CLOUDYBOT_LLM_PROVIDER": "offline"})
        gateway = Gateway(settings)
        await build_app(gateway)
        async with gateway:
            await gateway.accounts.add_user("alice")
            ref = await gateway.resolve_thread("alice", "t1")
            result = await gateway.chat("alice", ref, "hello")
            assert result.reply and result.trace is None
    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    print("loaded:", loaded)

asyncio.run(main())
"""


def test_with_tracing_off_a_turn_runs_without_importing_opentelemetry() -> None:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("OTEL_", "CLOUDYBOT_"))}
    finished = subprocess.run([sys.executable, "-c", OFF_SCRIPT], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "loaded: []"


# --- the provider spans and the ledger --------------------------------------------------------
async def test_every_provider_span_carries_exactly_the_tokens_the_ledger_billed(
        start: StartGateway, exported: InMemorySpanExporter, fake_llm: FakeLLM,
        pm: PluginManager) -> None:
    """Many turns of every kind: reported usage, tool rounds, usage not reported or out of
    bounds (billed by the gateway's own count), streamed, an empty answer (not billed), and
    the summarizations they make due. Each billed call's span says what its ledger row says."""
    async def lookup(arguments: dict[str, Any], context: Any) -> str:
        return "found"

    register_tool(pm, "lookup", lookup)
    rng = random.Random(32)
    planned: list[Scripted] = []

    def tokens() -> tuple[int, int]:
        return rng.randint(20, 400), rng.randint(1, 200)

    def answer(request: Recorded) -> Scripted:
        if request.is_summary:
            return Scripted(body=completion("SUMMARY so far", *tokens()))
        return planned.pop(0)

    fake_llm.responder = answer
    harness = await start(summarize_at=4, keep_recent=2)
    auth = await harness.user(plan="team")
    turns, empty = 36, 0
    for number in range(turns):
        kind = number % 6
        if kind == 1:
            planned.append(Scripted(body=tool_call_completion([(f"c{number}", "lookup", "{}")],
                                                              None, *tokens())))
        text = f"reply {number} " * rng.randint(1, 30)
        planned.append(Scripted(body=completion(
            "" if kind == 5 else text,
            *((None, None) if kind == 2 else (40, 10**9) if kind == 3 else tokens()))))
        headers = {**auth, "Accept": "text/event-stream"} if kind == 4 else auth
        response = await harness.client.post("/chat", headers=headers, json={
            "threadId": f"t{number % 3}", "message": f"message {number}"})
        await response.read()
        if kind == 5:
            assert response.status == 502
            empty += 1
        else:
            assert response.status == 200
    await harness.gateway.drain()
    assert planned == []

    ledger = sorted((row.kind, row.model, row.prompt_tokens, row.completion_tokens)
                    for row in await harness.gateway.store.ledger("alice")
                    if row.kind in ("chat", "tool_round", "summarize"))
    summaries = {span.context.span_id: attributes(span)["cloudybot.summary.applied"]
                 for span in named(exported, "summarize") if span.context is not None}
    calls = named(exported, CHAT)
    billed = sorted(
        (said["cloudybot.charge.kind"], said["gen_ai.request.model"],
         said["gen_ai.usage.input_tokens"], said["gen_ai.usage.output_tokens"])
        for span in calls for said in [attributes(span)]
        if said.get("cloudybot.billed", summaries.get(parent_of(span) or 0)))
    assert len(named(exported, TURN)) == turns
    assert sum(1 for row in ledger if row[0] == "summarize") >= 10
    assert billed == ledger
    assert [attributes(span).get("cloudybot.billed") for span in calls].count(False) == empty
