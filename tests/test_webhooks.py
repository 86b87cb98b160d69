"""Outbound webhooks (SPEC §15): registration, events, signatures a ``standardwebhooks``
receiver verifies, retries with a stable ``webhook-id``, the delivery log, SSRF refusals, and
deliveries that never hold up a turn."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.webhooks.dispatcher import WebhookDispatcher
from tests.conftest import Harness
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import Clock, assert_json_error, until

PRIVATE_OK = {"webhooks_allow_private": True}
ALL_EVENTS = ["message.created", "thread.summarized", "session.rotated", "thread.cleared",
              "thread.deleted", "credits.low"]


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    await server.close()


async def register(harness: Harness, headers: dict[str, str], receiver: WebhookReceiver,
                   events: list[str] | None = None, url: str | None = None) -> dict[str, Any]:
    """Register the receiver; give it the secret."""
    response = await harness.client.post("/api/webhooks", headers=headers, json={
        "url": url or await receiver.start(), "events": events or ["message.created"]})
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    receiver.secret = created["secret"]
    return created


async def deliveries(harness: Harness, headers: dict[str, str],
                     webhook_id: str) -> list[dict[str, Any]]:
    response = await harness.client.get(f"/api/webhooks/{webhook_id}/deliveries",
                                        headers=headers)
    assert response.status == 200
    listed: list[dict[str, Any]] = (await response.json())["deliveries"]
    return listed


async def test_a_reply_is_delivered_signed_and_logged(start_gateway: Callable[..., Awaitable[
        Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(**PRIVATE_OK)
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver)
    assert created["id"].startswith("wh_") and created["secret"].startswith("whsec_")
    assert created["events"] == ["message.created"]

    assert (await harness.chat(alice, "hello hooks")).status == 200
    got = await receiver.next()

    assert got.verified and got.path == "/hooks/cloudybot"
    assert got.webhook_id.startswith("msg_")
    assert got.event is not None and got.event["type"] == "message.created"
    data = got.event["data"]
    assert (data["threadId"], data["channel"], data["reply"]) == ("t1", "dashboard",
                                                                  "echo: hello hooks")
    assert data["usage"]["promptTokens"] > 0 and data["usage"]["credits"] >= 1
    await until(harness.gateway.webhooks.idle)
    [logged] = await deliveries(harness, alice, created["id"])
    assert logged == {"id": got.webhook_id, "event": "message.created", "status": "delivered",
                      "attempts": 1, "lastStatusCode": 200, "nextAttemptAt": None,
                      "createdAt": logged["createdAt"], "lastError": None}
    # The secret is shown once: never listed again, and sealed at rest.
    listed = await (await harness.client.get("/api/webhooks", headers=alice)).json()
    assert listed == {"webhooks": [{k: v for k, v in created.items() if k != "secret"}]}
    stored = await harness.gateway.store.get_webhook(created["id"])
    assert stored is not None and created["secret"].encode() not in stored.secret


async def test_the_test_event_goes_to_that_endpoint_alone(start_gateway: Callable[
        ..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(**PRIVATE_OK)
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver, events=["thread.deleted"])
    response = await harness.client.post(f"/api/webhooks/{created['id']}/test", headers=alice)
    assert response.status == 202
    got = await receiver.next()
    assert got.verified and got.event is not None
    assert (got.event["type"], got.event["data"]) == ("webhook.test",
                                                      {"webhookId": created["id"]})


async def test_failures_are_retried_with_the_same_webhook_id(start_gateway: Callable[
        ..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(webhooks_retry_seconds=(0.01, 0.01, 0.01), **PRIVATE_OK)
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver)
    receiver.statuses = [500, 503]

    assert (await harness.chat(alice, "retry me")).status == 200
    attempts = [await receiver.next() for _ in range(3)]

    assert all(a.verified for a in attempts)
    assert len({a.webhook_id for a in attempts}) == 1
    await until(harness.gateway.webhooks.idle)
    [logged] = await deliveries(harness, alice, created["id"])
    assert (logged["status"], logged["attempts"], logged["lastStatusCode"]) == (
        "delivered", 3, 200)


async def test_a_delivery_fails_after_the_last_retry_and_redirects_are_not_followed(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(webhooks_retry_seconds=(0.01,), **PRIVATE_OK)
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver)
    receiver.statuses = [302, 302]

    assert (await harness.chat(alice, "go away")).status == 200
    await until(harness.gateway.webhooks.idle)

    assert [r.path for r in receiver.received] == ["/hooks/cloudybot"] * 2  # no /elsewhere
    [logged] = await deliveries(harness, alice, created["id"])
    assert (logged["status"], logged["attempts"], logged["lastStatusCode"]) == ("failed", 2, 302)
    assert logged["nextAttemptAt"] is None and "302" in logged["lastError"]


async def test_a_failing_endpoint_rests_and_its_backlog_waits_behind_one_probe(
        start_clocked: Callable[..., Awaitable[Harness]], clock: Clock,
        receiver: WebhookReceiver) -> None:
    harness = await start_clocked(webhooks_retry_seconds=(60.0, 60.0), **PRIVATE_OK)
    dispatcher = harness.gateway.webhooks
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver)
    receiver.statuses = [503]
    assert (await harness.chat(alice, "first")).status == 200
    await receiver.next()  # failed: the endpoint rests for a minute
    for n in range(3):
        assert (await harness.chat(alice, f"queued {n}", thread=f"q{n}")).status == 200
    endpoint = dispatcher._endpoints[created["id"]]
    await until(lambda: len(endpoint.waiting) == 3)
    assert len(receiver.received) == 1  # nobody knocked on the shut door again

    clock.advance(70)  # the probe is due: it succeeds, and the backlog follows it
    dispatcher.poke()
    await until(dispatcher.idle)
    replies = [r.event["data"]["reply"] for r in receiver.received if r.event]
    assert sorted(replies[1:]) == sorted(["echo: first", *(f"echo: queued {n}"
                                                           for n in range(3))])
    logged = await deliveries(harness, alice, created["id"])
    assert sorted(d["attempts"] for d in logged) == [1, 1, 1, 2]
    assert {d["status"] for d in logged} == {"delivered"}


def test_the_retry_schedule_is_standard_webhooks_with_jitter() -> None:
    from gateway.config.settings import Settings

    class Host:
        settings = Settings()

    dispatcher = WebhookDispatcher(Host())  # type: ignore[arg-type]
    delays = [dispatcher.backoff(n) for n in range(1, 9)]
    expected = [5, 300, 1800, 7200, 18000, 36000, 36000]
    assert delays[-1] is None
    for delay, nominal in zip(delays, expected, strict=False):
        assert delay is not None and 0.9 * nominal <= delay <= 1.1 * nominal
    assert sum(expected) >= 24 * 3600
    assert len({dispatcher.backoff(2) for _ in range(20)}) > 1  # jittered


async def test_thread_events_reach_subscribers(start_clocked: Callable[..., Awaitable[Harness]],
                                               clock: Clock,
                                               receiver: WebhookReceiver) -> None:
    harness = await start_clocked(summarize_at=4, keep_recent=2, session_idle_minutes=30,
                                  **PRIVATE_OK)
    alice = await harness.user("alice")
    await register(harness, alice, receiver, events=ALL_EVENTS[1:])  # not message.created

    for n in range(2):
        assert (await harness.chat(alice, f"message {n}")).status == 200
    clock.advance(31 * 60)
    assert (await harness.chat(alice, "after a pause")).status == 200
    assert (await harness.client.post("/api/threads/t1/clear", headers=alice)).status == 200
    assert (await harness.client.delete("/api/threads/t1", headers=alice)).status == 204
    await until(lambda: harness.gateway.webhooks.idle() and len(receiver.received) >= 4)

    assert all(r.verified and r.event is not None for r in receiver.received)
    by_type = {r.event["type"]: r.event["data"] for r in receiver.received if r.event}
    assert set(by_type) == {"thread.summarized", "session.rotated", "thread.cleared",
                            "thread.deleted"}  # and no message.created: not subscribed
    assert by_type["thread.summarized"]["summary"]
    assert by_type["thread.summarized"]["messagesFolded"] >= 2
    assert by_type["session.rotated"]["reason"] == "idle"
    assert by_type["thread.deleted"]["reason"] == "request"
    assert all(data["threadId"] == "t1" for data in by_type.values())


async def test_credits_low_is_told_once_when_the_balance_falls_under_a_tenth(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(**PRIVATE_OK)
    alice = await harness.user("alice")  # the free plan: 1,000 credits, low under 100
    await register(harness, alice, receiver, events=["credits.low"])
    await harness.gateway.store.grant_credits("alice", -899)  # 101 left

    for n in range(3):
        assert (await harness.chat(alice, f"spend {n} " + "words " * 200)).status == 200
    got = await receiver.next()

    assert got.verified and got.event is not None and got.event["type"] == "credits.low"
    user = await harness.gateway.store.get_user("alice")
    assert user is not None and user.credits < 100
    assert got.event["data"]["threshold"] == 100 and got.event["data"]["credits"] < 100
    await until(harness.gateway.webhooks.idle)
    assert len(receiver.received) == 1  # the later turns stayed under: no second event


async def test_a_user_sees_only_their_webhooks_and_events(start_gateway: Callable[
        ..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(**PRIVATE_OK)
    alice, bob = await harness.user("alice"), await harness.user("bob")
    created = await register(harness, alice, receiver)
    for method, path in [("GET", f"/api/webhooks/{created['id']}/deliveries"),
                         ("POST", f"/api/webhooks/{created['id']}/test"),
                         ("DELETE", f"/api/webhooks/{created['id']}")]:
        response = await harness.client.request(method, path, headers=bob)
        await assert_json_error(response, 404, "webhook_not_found")
    assert await (await harness.client.get("/api/webhooks", headers=bob)).json() == {
        "webhooks": []}

    assert (await harness.chat(bob, "bob's turn")).status == 200
    assert (await harness.chat(alice, "alice's turn")).status == 200
    got = await receiver.next()
    await until(harness.gateway.webhooks.idle)
    assert [r.event["data"]["reply"] for r in receiver.received if r.event] == [
        "echo: alice's turn"]
    assert got.verified


async def test_a_deleted_webhook_gets_nothing_more(start_gateway: Callable[
        ..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(webhooks_retry_seconds=(0.05,), **PRIVATE_OK)
    alice = await harness.user("alice")
    created = await register(harness, alice, receiver)
    receiver.statuses = [500]
    assert (await harness.chat(alice, "one")).status == 200
    await receiver.next()  # the first attempt failed; a retry is due

    response = await harness.client.delete(f"/api/webhooks/{created['id']}", headers=alice)
    assert response.status == 204
    await until(harness.gateway.webhooks.idle)
    assert len(receiver.received) == 1
    await assert_json_error(await harness.client.get(
        f"/api/webhooks/{created['id']}/deliveries", headers=alice), 404, "webhook_not_found")


async def test_a_slow_endpoint_holds_up_no_turn_and_gets_bounded_concurrency(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(webhooks_concurrency=2, **PRIVATE_OK)
    alice = await harness.user("alice")
    await register(harness, alice, receiver)
    receiver.hold.clear()  # the endpoint answers nothing until told

    for n in range(5):  # each returns while the endpoint still holds its deliveries
        assert (await harness.chat(alice, f"turn {n}", thread=f"t{n}")).status == 200
    await receiver.next()
    await receiver.next()
    assert receiver.in_flight == 2 and receiver.most_in_flight == 2
    receiver.hold.set()
    await until(harness.gateway.webhooks.idle)

    assert receiver.most_in_flight == 2
    assert sorted(r.event["data"]["reply"] for r in receiver.received if r.event) == [
        f"echo: turn {n}" for n in range(5)]


PRIVATE_URLS = ["http://127.0.0.1:9/x", "http://localhost:9/x", "http://[::1]:9/x",
                "http://10.1.2.3/x", "http://192.168.0.10/x", "http://172.16.5.4/x",
                "http://169.254.169.254/latest/meta-data/", "http://[::ffff:127.0.0.1]/x",
                "http://100.100.100.200/", "http://[fd00:ec2::254]/", "http://0.0.0.0/"]
# Special-purpose addresses, and private ones in the IPv6 forms that carry an IPv4 address,
# that Python's ipaddress (3.11) calls global; and hosts spelt as numbers.
SPECIAL_URLS = ["http://192.0.0.192/", "http://192.0.0.9/", "http://192.31.196.1/",
                "http://192.52.193.1/", "http://192.88.99.1/", "http://192.175.48.1/",
                "http://224.0.0.1/", "http://239.255.255.250:1900/",
                "http://[64:ff9b::127.0.0.1]:9/x", "http://[64:ff9b::a9fe:a9fe]/latest/",
                "http://[64:ff9b::10.0.0.1]/", "http://[64:ff9b:1::808:808]/",
                "http://[2002:7f00:1::]/", "http://[2002:a9fe:a9fe::1]/",
                "http://[2002:c0a8:1::]/", "http://[::127.0.0.1]/", "http://[::10.0.0.1]/",
                "http://[fec0::1]/", "http://[ff02::1]/", "http://[ff0e::1]/",
                "http://[2620:4f:8000::1]/", "http://[2001:20::1]/", "http://[3fff::1]/",
                "http://[5f00::1]/", "http://[100:0:0:1::1]/", "http://[4000::1]/",
                "http://[fe80::1%25eth0]/", "http://2130706433/", "http://0x7f.1/",
                "http://017700000001/", "http://127.0.0.1./", "http://0xa9fea9fe/",
                "http://localhost./", "http://[fe80::1%eth0]/", "http://[::ffff:7f00:1]/"]


@pytest.mark.parametrize("url", PRIVATE_URLS + SPECIAL_URLS)
async def test_private_destinations_are_refused_at_registration(harness: Harness,
                                                                url: str) -> None:
    alice = await harness.user("alice")
    response = await harness.client.post("/api/webhooks", headers=alice,
                                         json={"url": url, "events": ["message.created"]})
    await assert_json_error(response, 400, "destination_refused")
    assert await harness.gateway.store.list_webhooks("alice") == []


async def test_a_destination_whose_dns_turns_private_is_refused_at_delivery(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    harness = await start_gateway(webhooks_retry_seconds=(0.01,))
    dispatcher = harness.gateway.webhooks
    answers = {"hooks.example.com": ["93.184.216.34"]}  # public when registered...

    async def resolve(host: str, port: int) -> list[str]:
        return answers[host]
    dispatcher.resolve = resolve
    alice = await harness.user("alice")
    local = await receiver.start()
    created = await register(harness, alice, receiver,
                             url=local.replace("127.0.0.1", "hooks.example.com"))
    answers["hooks.example.com"] = ["93.184.216.34", "127.0.0.1"]  # ...private since

    assert (await harness.chat(alice, "to the metadata service?")).status == 200
    await until(dispatcher.idle)

    assert receiver.received == []
    [logged] = await deliveries(harness, alice, created["id"])
    assert logged["status"] == "failed" and "refused" in logged["lastError"]
    assert "127.0.0.1" in logged["lastError"]


@pytest.mark.parametrize("answer", ["192.0.0.192", "64:ff9b::7f00:1", "2002:7f00:1::",
                                    "::7f00:1", "::ffff:127.0.0.1", "fec0::1"])
async def test_a_destination_resolving_to_a_special_form_is_refused_at_delivery(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver,
        answer: str) -> None:
    harness = await start_gateway(webhooks_retry_seconds=())
    dispatcher = harness.gateway.webhooks
    answers = {"hooks.example.com": ["93.184.216.34"]}
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[host]
    dispatcher.resolve = resolve
    alice = await harness.user("alice")
    local = await receiver.start()
    created = await register(harness, alice, receiver,
                             url=local.replace("127.0.0.1", "hooks.example.com"))
    answers["hooks.example.com"] = [answer]

    assert (await harness.chat(alice, "where to?")).status == 200
    await until(dispatcher.idle)

    assert receiver.received == [] and asked == ["hooks.example.com"] * 2
    [logged] = await deliveries(harness, alice, created["id"])
    assert logged["status"] == "failed"
    assert logged["lastError"].startswith(f"refused: hooks.example.com is {answer}, ")


async def test_with_private_allowed_the_same_rebinding_is_delivered(
        start_gateway: Callable[..., Awaitable[Harness]], receiver: WebhookReceiver) -> None:
    """The control of the test above: the refusal, not the test's plumbing, kept it out."""
    harness = await start_gateway(**PRIVATE_OK)

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]
    harness.gateway.webhooks.resolve = resolve
    alice = await harness.user("alice")
    local = await receiver.start()
    await register(harness, alice, receiver, url=local.replace("127.0.0.1", "hooks.example.com"))
    assert (await harness.chat(alice, "hello")).status == 200
    assert (await receiver.next()).verified


@pytest.mark.parametrize(("body", "code"), [
    ({"url": "ftp://example.com/x", "events": ["message.created"]}, "invalid_url"),
    ({"url": "http://user:pw@example.com/", "events": ["message.created"]}, "invalid_url"),
    ({"url": "https://", "events": ["message.created"]}, "invalid_url"),
    ({"url": "http://example.com:99999/", "events": ["message.created"]}, "invalid_url"),
    ({"url": "http://example.com/" + "x" * 2100, "events": ["message.created"]}, "invalid_url"),
    ({"url": 7, "events": ["message.created"]}, "invalid_url"),
    ({"url": "https://example.com/", "events": []}, "invalid_events"),
    ({"url": "https://example.com/", "events": "message.created"}, "invalid_events"),
    ({"url": "https://example.com/", "events": ["message.deleted"]}, "invalid_events"),
    ({"url": "https://example.com/", "events": ["webhook.test"]}, "invalid_events"),
    ({"url": "https://example.com/"}, "invalid_events"),
])
async def test_bad_registrations_are_400(harness: Harness, body: dict[str, Any],
                                         code: str) -> None:
    alice = await harness.user("alice")
    await assert_json_error(await harness.client.post("/api/webhooks", headers=alice, json=body),
                            400, code)


async def test_bad_ids_and_limits_are_clear_errors(harness: Harness) -> None:
    alice = await harness.user("alice")
    for path in ["/api/webhooks/nope/deliveries", "/api/webhooks/wh_" + "0" * 24 + "/test",
                 "/api/webhooks/..%2F..%2Fetc/deliveries"]:
        method = "POST" if path.endswith("/test") else "GET"
        await assert_json_error(await harness.client.request(method, path, headers=alice),
                                404, "webhook_not_found")
    response = await harness.client.post("/api/webhooks", headers=alice, data=b"{not json")
    await assert_json_error(response, 400, "invalid_json")
    assert (await harness.client.get("/api/webhooks")).status == 401
