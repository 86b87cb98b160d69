"""``GET /metrics`` (SPEC §17): the series a gateway exports, parsed with
``prometheus_client.parser`` as Prometheus reads them, and who may scrape them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.scrape import may_scrape
from gateway.base.metrics import Metrics
from gateway.store import Charge, InboxEntry
from gateway.testing.fake_llm import FakeLLM, Scripted
from tests.conftest import Harness
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import Clock, until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(harness: Harness) -> Samples:
    response = await harness.client.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    return parse(await response.text())


def parse(exposition: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_turns_provider_calls_tokens_credits_and_summaries_are_counted(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2)
    alice = await harness.user("alice")
    assert (await harness.chat(alice, "one")).status == 200
    streamed = await harness.client.post("/chat", json={"threadId": "t1", "message": "two"},
                                         headers={**alice, "Accept": "text/event-stream"})
    await streamed.read()
    await harness.gateway.drain()  # the summarization the second turn made due

    samples = await scrape(harness)
    assert value(samples, "cloudybot_turn_seconds_count", channel="dashboard") == 2
    assert value(samples, "cloudybot_turn_seconds_bucket", channel="dashboard", le="60.0") == 2
    assert value(samples, "cloudybot_provider_seconds_count", provider="openai") == 3
    assert value(samples, "cloudybot_tokens_total", kind="chat", direction="prompt") > 0
    assert value(samples, "cloudybot_tokens_total", kind="summarize",
                 direction="completion") > 0
    assert value(samples, "cloudybot_credits_total", kind="chat") >= 2
    assert value(samples, "cloudybot_summarizations_total", outcome="applied") == 1
    assert value(samples, "cloudybot_event_streams_open") == 0
    assert value(samples, "cloudybot_inbox_depth", channel="dashboard") == 0


async def test_provider_failures_are_counted_by_status(harness: Harness,
                                                       fake_llm: FakeLLM) -> None:
    alice = await harness.user("alice")
    fake_llm.script.extend([Scripted(status=500, body={"error": "down"})] * 3)
    assert (await harness.chat(alice, "fails")).status == 502

    samples = await scrape(harness)
    assert value(samples, "cloudybot_provider_errors_total", provider="openai",
                 status="502") == 1
    assert value(samples, "cloudybot_turn_errors_total", channel="dashboard",
                 status="502") == 1
    assert value(samples, "cloudybot_turn_seconds_count", channel="dashboard") == 0


async def test_inbox_depth_rotations_and_webhook_outcomes(
        start_clocked: Callable[..., Awaitable[Harness]], clock: Clock) -> None:
    receiver = WebhookReceiver()
    try:
        harness = await start_clocked(session_idle_minutes=30, webhooks_allow_private=True)
        alice = await harness.user("alice")
        created = await harness.client.post("/api/webhooks", headers=alice, json={
            "url": await receiver.start(), "events": ["message.created"]})
        receiver.secret = (await created.json())["secret"]
        assert (await harness.chat(alice, "before the pause")).status == 200
        clock.advance(31 * 60)
        assert (await harness.chat(alice, "after it")).status == 200
        await until(lambda: len(receiver.received) == 2)
        await until(harness.gateway.webhooks.idle)
        await harness.gateway.store.inbox_add(
            InboxEntry("telegram", "m1", "telegram:1", "{}", 4096, b"sealed"))

        samples = await scrape(harness)
    finally:
        await receiver.close()
    assert value(samples, "cloudybot_session_rotations_total", reason="idle") == 1
    assert value(samples, "cloudybot_webhook_deliveries_total", outcome="delivered") == 2
    assert value(samples, "cloudybot_inbox_depth", channel="telegram") == 1
    assert value(samples, "cloudybot_outbox_depth", channel="telegram") == 0


@pytest.mark.parametrize(("remote", "header", "token", "allowed"), [
    ("127.0.0.1", "", "", True),
    ("::1", "", "", True),
    ("127.8.9.10", "", "secret", True),
    ("10.0.0.5", "", "", False),
    ("10.0.0.5", "Bearer secret", "", False),  # no token configured: loopback only
    ("10.0.0.5", "Bearer secret", "secret", True),
    ("10.0.0.5", "bearer  secret ", "secret", True),
    ("10.0.0.5", "Bearer wrong", "secret", False),
    ("10.0.0.5", "Basic secret", "secret", False),
    (None, "", "secret", False),
])
def test_who_may_scrape(remote: str | None, header: str, token: str, allowed: bool) -> None:
    assert may_scrape(remote, header, token) is allowed


def test_the_labelled_series_count_each_set_of_label_values_apart_and_export_it() -> None:
    metrics = Metrics()
    first = metrics.tokens.labels("chat", "prompt")
    assert metrics.tokens.labels("chat", "prompt") is first
    assert metrics.tokens.labels("chat", "completion") is not first
    metrics.charged([Charge("chat", "m", 7, 3, 2), Charge("chat", "m", 5, 0, 0)])
    samples = parse(metrics.exposition().decode())
    assert value(samples, "cloudybot_tokens_total", kind="chat", direction="prompt") == 12
    assert value(samples, "cloudybot_tokens_total", kind="chat", direction="completion") == 3
    assert value(samples, "cloudybot_credits_total", kind="chat") == 2
