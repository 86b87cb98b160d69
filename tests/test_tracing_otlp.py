"""Tracing over the wire (issue 32): a real ``cloudybot serve`` with
``OTEL_EXPORTER_OTLP_ENDPOINT`` set exports its spans with the OTLP/HTTP exporter to a
receiver on loopback that is as strict as an OpenTelemetry Collector
(:mod:`tests.fakes.otlp_collector`); a misconfigured exporter stops start-up with one line."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from gateway.testing.fake_llm import FakeLLM
from tests.fakes.otlp_collector import PROTOBUF, OtlpCollector
from tests.process import ServeProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SERVER_KIND, CLIENT_KIND, INTERNAL_KIND = 2, 3, 1  # OTLP's Span.SpanKind numbers


@pytest.fixture
async def collector() -> AsyncIterator[OtlpCollector]:
    """The OTLP/HTTP receiver on loopback."""
    receiver = OtlpCollector()
    await receiver.start()
    yield receiver
    await receiver.close()


@pytest.fixture
async def processes() -> AsyncIterator[list[ServeProcess]]:
    """Children to kill at teardown, whatever happened."""
    started: list[ServeProcess] = []
    yield started
    for process in started:
        await process.ensure_stopped()


async def test_the_receiver_refuses_what_a_collector_refuses(collector: OtlpCollector) -> None:
    url = f"{collector.url}/v1/traces"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=b"{}",
                                headers={"Content-Type": "application/json"}) as answer:
            assert answer.status == 415
        async with session.post(url, data=b"not a protobuf message",
                                headers={"Content-Type": PROTOBUF}) as answer:
            assert answer.status == 400
        async with session.get(url) as answer:
            assert answer.status == 405
        empty = ExportTraceServiceRequest().SerializeToString()
        async with session.post(url, data=empty, headers={"Content-Type": PROTOBUF}) as answer:
            assert answer.status == 200 and answer.content_type == PROTOBUF
            ExportTraceServiceResponse.FromString(await answer.read())
    assert collector.spans == [] and collector.requests == 1


def serve_env(fake_llm: FakeLLM, collector: OtlpCollector) -> dict[str, str]:
    return {"CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
            "CLOUDYBOT_LLM_MODEL": "fake-model", "CLOUDYBOT_LLM_MAX_RETRIES": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "cloudybot-otlp-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50"}  # ms: export soon after a span ends


async def add_user(server: ServeProcess) -> str:
    """Create alice with the CLI on the server's data dir; her token."""
    added = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "users", "add", "alice", env=server.env,
        stdout=asyncio.subprocess.PIPE)
    return (await added.communicate())[0].decode().split()[-1]


async def chat(server: ServeProcess, token: str, **headers: str) -> tuple[int, dict[str, Any]]:
    """One ``POST /chat`` to the server: its status and answer."""
    async with aiohttp.ClientSession() as session, session.post(
            f"{server.url}/chat", json={"threadId": "t1", "message": "hello"},
            headers={"Authorization": f"Bearer {token}", **headers}) as answer:
        return answer.status, await answer.json()


async def test_a_served_gateway_exports_the_spans_of_a_chat_turn_over_otlp_http(
        tmp_path: Path, fake_llm: FakeLLM, collector: OtlpCollector,
        processes: list[ServeProcess]) -> None:
    server = ServeProcess(tmp_path / "data", serve_env(fake_llm, collector))
    processes.append(server)
    token = await add_user(server)
    await server.start()
    status, answer = await chat(server, token, traceparent=f"00-{TRACE_ID}-{PARENT_ID}-01",
                                tracestate="vendor=abc")
    assert status == 200
    usage = answer["usage"]

    turn = await collector.wait_for("invoke_agent cloudybot")
    call = await collector.wait_for("chat fake-model")
    prompt = await collector.wait_for("assemble_prompt")
    assert (turn.trace_id, turn.parent_span_id, turn.trace_state) == (
        TRACE_ID, PARENT_ID, "vendor=abc")
    assert (turn.service, turn.scope, turn.kind) == (
        "cloudybot-otlp-test", "cloudybot.gateway", INTERNAL_KIND)
    assert turn.attributes["user.id"] == "alice"
    assert turn.attributes["gen_ai.conversation.id"] == "alice--t1"
    assert call.parent_span_id == prompt.parent_span_id == turn.span_id
    assert call.kind == CLIENT_KIND
    assert (call.attributes["gen_ai.usage.input_tokens"],
            call.attributes["gen_ai.usage.output_tokens"]) == (
        usage["promptTokens"], usage["completionTokens"])
    assert call.attributes["gen_ai.provider.name"] == "openai"
    assert call.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert "hello" not in repr(collector.spans)  # no content unless asked for
    assert await server.terminate() == 0


async def test_an_exporter_this_gateway_cannot_use_stops_serve_with_one_line(
        tmp_path: Path, fake_llm: FakeLLM, collector: OtlpCollector) -> None:
    server = ServeProcess(tmp_path / "data", {**serve_env(fake_llm, collector),
                                              "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    finished = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "serve", env=server.env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(finished.communicate(), 60)
    assert finished.returncode != 0
    lines = [line for line in err.decode().splitlines() if line.strip()]
    assert lines[-1].startswith("cloudybot: config error: OTLP protocol 'grpc'"), err.decode()
    assert "Traceback" not in err.decode()


async def test_a_collector_that_is_down_never_holds_up_the_stop(
        tmp_path: Path, fake_llm: FakeLLM, collector: OtlpCollector,
        processes: list[ServeProcess]) -> None:
    await collector.close()  # nothing listens there now: every export is refused
    server = ServeProcess(tmp_path / "data", {**serve_env(fake_llm, collector),
                                              "CLOUDYBOT_SHUTDOWN_GRACE_SECONDS": "3"})
    processes.append(server)
    token = await add_user(server)
    await server.start()
    status, _ = await chat(server, token)
    assert status == 200  # turns do not wait for the exporter
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await server.terminate(timeout=30) == 0
    assert loop.time() - began < 3  # within the grace, the exporter retrying or not
