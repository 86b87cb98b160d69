"""The durable outbox: retry schedule and give-up, Retry-After, what a stop leaves behind, and
where pending and failed deliveries show (``cloudybot deliveries``, the thread API)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gateway.interfaces import DeliveryFailed, DeliveryRetry
from gateway.kit.outbox import MAX_BACKOFF_SECONDS
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock, reopened_store, until, waits_on
from tests.test_billing_cli import cloudybot, ok

StartGateway = Callable[..., Awaitable[Harness]]
HOUR = 3600.0


async def test_a_reply_is_retried_with_growing_jittered_waits_for_24_hours_then_failed(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock,
        fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    waits, harness.gateway.outbox.wait = waits_on(clock)
    loop.failures["m1"] = [ConnectionResetError("reset by peer")] * 1000
    began = clock.now
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()

    [failed] = await harness.gateway.store.deliveries()
    assert failed.state == "failed"
    assert failed.last_error is not None
    assert failed.last_error.startswith(f"gave up after {loop.attempts['m1']} attempts")
    assert "ConnectionResetError: reset by peer" in failed.last_error
    assert 24 * HOUR <= clock.now - began < 24 * HOUR + MAX_BACKOFF_SECONDS
    # doubling from 1 s, each wait jittered between half and all of it, capped at 10 minutes
    for attempt, wait in enumerate(waits, start=1):
        ceiling = min(MAX_BACKOFF_SECONDS, 2 ** (attempt - 1))
        assert ceiling / 2 <= wait <= ceiling
    assert len(set(waits)) > len(waits) // 2  # jitter: not all retries at the same moment
    assert len(fake_llm.chat_requests) == 1  # the agent ran once
    assert loop.sent == []


async def test_retry_after_is_honoured_and_the_reply_then_delivered(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked()
    waits, harness.gateway.outbox.wait = waits_on(clock)
    loop.failures["m1"] = [DeliveryRetry(30), DeliveryRetry(30)]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert loop.texts() == ["echo: hello"]
    assert len(waits) == 2 and all(30 <= wait <= 33 for wait in waits)
    assert await harness.gateway.store.deliveries() == []


async def test_a_shorter_retry_window_is_configurable(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked(delivery_retry_hours=0.5)
    _, harness.gateway.outbox.wait = waits_on(clock)
    loop.failures["m1"] = [ConnectionResetError("reset")] * 1000
    began = clock.now
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    [failed] = await harness.gateway.store.deliveries()
    assert failed.state == "failed"
    assert 0.5 * HOUR <= clock.now - began < 0.5 * HOUR + MAX_BACKOFF_SECONDS


async def test_stop_leaves_a_waiting_reply_pending_and_the_next_start_delivers_it(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock,
        fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    loop.failures["m1"] = [DeliveryRetry(3600)]  # the platform says: in an hour
    await harness.gateway.receive(loop.message("m1", "hello"))
    await until(lambda: loop.attempts.get("m1") == 1)
    await harness.client.close()  # the stop does not wait out the hour
    async with reopened_store(harness.gateway.settings) as store:
        [pending] = await store.deliveries()
    assert (pending.state, pending.attempts) == ("pending", 1)
    assert pending.next_attempt >= pending.created + 3600

    clock.advance(3600 * 1.1)  # the hour is over when the gateway starts again
    again = await start_clocked()
    await again.gateway.drain()
    assert loop.texts() == ["echo: hello"]
    assert await again.gateway.store.deliveries() == []
    assert len(fake_llm.chat_requests) == 1


async def test_a_channel_that_is_gone_keeps_its_replies_pending(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked()
    loop.failures["m1"] = [DeliveryRetry(3600)]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await until(lambda: loop.attempts.get("m1") == 1)
    await harness.client.close()
    harness.gateway.pm.unregister(name="loop-channel")  # the plugin was uninstalled

    clock.advance(3600 * 1.1)
    again = await start_clocked()
    await again.gateway.drain()
    [pending] = await again.gateway.store.deliveries()
    assert pending.state == "pending"  # kept until the channel is back


@pytest.mark.sqlite_only
async def test_pending_and_failed_deliveries_show_in_the_thread_api_and_the_cli(
        loop: LoopChannel, start_gateway: StartGateway, data_dir: Path) -> None:
    harness = await start_gateway()
    loop.failures["m1"] = [DeliveryFailed("Forbidden: bot was blocked by the user")]
    loop.failures["m2"] = [DeliveryRetry(3600)]
    await harness.gateway.receive(loop.message("m1", "first"))
    await harness.gateway.receive(loop.message("m2", "second"))
    await until(lambda: loop.attempts.get("m2") == 1)
    token = await harness.gateway.accounts.issue_token("loop:ada")

    response = await harness.client.get("/api/threads/loop:c1",
                                        headers={"Authorization": f"Bearer {token}"})
    assert response.status == 200
    deliveries = (await response.json())["deliveries"]
    assert [(d["messageId"], d["state"], d["attempts"]) for d in deliveries] == [
        ("m2", "pending", 1), ("m1", "failed", 0)]
    assert deliveries[1]["lastError"] == "DeliveryFailed: Forbidden: bot was blocked by the user"
    assert deliveries[1]["nextAttemptAt"] is None
    assert deliveries[0]["nextAttemptAt"].endswith("Z")
    await harness.client.close()

    lines = ok(await cloudybot(data_dir, "deliveries"))
    text = "\n".join(lines)
    assert "pending" in text and "failed" in text
    assert "failed: DeliveryFailed: Forbidden: bot was blocked by the user" in text
    assert "next attempt" in text and "loop:c1" in text
    failed_only = "\n".join(ok(await cloudybot(data_dir, "deliveries", "--state", "failed")))
    assert "m1" in failed_only and "m2" not in failed_only


async def test_the_cli_says_when_nothing_waits(data_dir: Path,
                                               start_gateway: StartGateway) -> None:
    harness = await start_gateway()
    await harness.client.close()
    assert ok(await cloudybot(data_dir, "deliveries")) == ["no pending or failed deliveries"]


async def test_a_recorded_delivery_error_never_holds_a_channel_secret(
        loop: LoopChannel, start_gateway: StartGateway) -> None:
    from gateway.base.logs import redact_in_logs

    redact_in_logs("123456:loop-bot-token")  # as a channel registers its bot token
    harness = await start_gateway()
    loop.failures["m1"] = [DeliveryFailed(
        "POST https://api.example/bot123456:loop-bot-token/sendMessage: chat not found")]
    await harness.gateway.receive(loop.message("m1", "hello"))
    await harness.gateway.drain()
    [failed] = await harness.gateway.store.deliveries()
    assert failed.last_error is not None
    assert "loop-bot-token" not in failed.last_error
    assert "<redacted>/sendMessage: chat not found" in failed.last_error
