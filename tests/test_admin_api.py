"""``/api/admin/*`` (issue 32): admin accounts only (every route, by its declaration), the
same authentication and CSRF rules as the rest of the API; accounts listed, searched, blocked
and granted credits, daily caps, usage over time, health and the audit log. On SQLite, and on
PostgreSQL with ``CLOUDYBOT_TEST_BACKEND=postgresql``."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from gateway.accounts.admin import Actor
from gateway.api.operations import OPERATIONS, Operation
from gateway.config.settings import DEFAULT_PLANS
from gateway.store import UsageQuery, UserQuery, Webhook, WebhookAttempt, WebhookDelivery
from gateway.store import events as webhook_events
from gateway.store.postgres import PostgresStore
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import Clock, assert_json_error
from tests.test_dashboard_signin import session_cookie
from tests.test_webhooks import PRIVATE_OK, receiver, register

__all__ = ["receiver"]  # a fixture
StartGateway = Callable[..., Awaitable[Harness]]
ADMIN_OPERATIONS = [op for op in OPERATIONS if op.path.startswith("/api/admin/")]
TODAY = datetime.now(UTC).date().isoformat()


async def admin_of(harness: Harness, user_id: str = "root") -> dict[str, str]:
    """An admin account (promoted as ``cloudybot users promote`` does); its headers."""
    headers = await harness.user(user_id)
    await harness.gateway.admin.set_admin(user_id, True, Actor("operator", "cli"))
    return headers


def capped_plans(daily_credits: int) -> dict[str, Any]:
    """The default plans with the free plan capped at ``daily_credits`` a day."""
    return {**DEFAULT_PLANS, "free": dataclasses.replace(DEFAULT_PLANS["free"],
                                                         daily_credits=daily_credits)}


def concrete(op: Operation, user_id: str = "bob") -> str:
    return op.path.replace("{user_id}", user_id)


def example(op: Operation) -> dict[str, Any] | None:
    if op.body is None:
        return None
    assert isinstance(op.body, dict)
    body: dict[str, Any] = op.body["examples"][0]
    return body


async def call(harness: Harness, op: Operation, headers: dict[str, str],
               user_id: str = "bob") -> Any:
    return await harness.client.request(op.method, concrete(op, user_id), headers=headers,
                                        json=example(op))


# --- who may call ------------------------------------------------------------------------
def test_every_admin_route_is_declared() -> None:
    assert {(op.method, op.path) for op in ADMIN_OPERATIONS} == {
        ("GET", "/api/admin/users"), ("POST", "/api/admin/users/{user_id}/block"),
        ("POST", "/api/admin/users/{user_id}/unblock"),
        ("POST", "/api/admin/users/{user_id}/grants"),
        ("PUT", "/api/admin/users/{user_id}/budget"), ("GET", "/api/admin/usage"),
        ("GET", "/api/admin/health"), ("GET", "/api/admin/audit")}


async def test_every_admin_route_is_for_admins_only(harness: Harness) -> None:
    alice = await harness.user("alice")
    await harness.user("bob")
    root = await admin_of(harness)
    for op in ADMIN_OPERATIONS:
        await assert_json_error(await call(harness, op, alice), 403, "admin_only")
        await assert_json_error(await call(harness, op, {}), 401, "unauthorized")
        await assert_json_error(await call(harness, op, {"Authorization": "Bearer nope"}),
                                401, "unauthorized")
    bob = await harness.gateway.store.get_user("bob")
    assert bob is not None and not bob.blocked and bob.credits == 1000  # nothing was done
    for op in ADMIN_OPERATIONS:  # and an admin is answered as declared
        response = await call(harness, op, root)
        assert response.status == op.status, (op.path, await response.text())
    demoted = await harness.gateway.admin.set_admin("root", False, Actor("operator", "cli"))
    assert not demoted.admin
    await assert_json_error(await harness.client.get("/api/admin/users", headers=root), 403,
                            "admin_only")  # from its next request on: no cache answers


async def test_a_cookie_session_s_admin_change_needs_its_csrf_token(harness: Harness) -> None:
    root = await admin_of(harness)
    await harness.user("bob")
    response = await harness.client.post("/auth/session", json={
        "token": root["Authorization"].removeprefix("Bearer ")})
    assert response.status == 200
    signed_in = await response.json()
    assert signed_in["admin"] is True and session_cookie(harness)
    listed = await harness.client.get("/api/admin/users")  # a read needs no CSRF token
    assert listed.status == 200
    await assert_json_error(await harness.client.post("/api/admin/users/bob/block"), 403,
                            "csrf_failed")
    blocked = await harness.client.post("/api/admin/users/bob/block",
                                        headers={"X-CSRF-Token": signed_in["csrf"]})
    assert blocked.status == 200 and (await blocked.json())["blocked"] is True


# --- accounts ------------------------------------------------------------------------------
async def test_accounts_are_listed_searched_and_paged(harness: Harness) -> None:
    root = await admin_of(harness)
    alice = await harness.user("alice")
    for name in ("bob", "bobby", "carol"):
        await harness.user(name, plan="pro" if name == "carol" else None)
    assert (await harness.chat(alice, "hello")).status == 200
    await harness.gateway.admin.set_blocked("bobby", True, Actor("operator", "cli"))

    async def listed(**params: str) -> dict[str, Any]:
        response = await harness.client.get("/api/admin/users", params=params, headers=root)
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body

    first = await listed(limit="2")
    assert [u["userId"] for u in first["users"]] == ["alice", "bob"]
    assert first["nextAfter"] == "bob"
    rest = await listed(limit="2", after="bob")
    assert [u["userId"] for u in rest["users"]] == ["bobby", "carol"]
    assert [u["userId"] for u in (await listed(after="carol"))["users"]] == ["root"]
    assert [u["userId"] for u in (await listed(q="BOB"))["users"]] == ["bob", "bobby"]
    assert [u["userId"] for u in (await listed(plan="pro"))["users"]] == ["carol"]
    assert [u["userId"] for u in (await listed(blocked="true"))["users"]] == ["bobby"]
    assert [u["userId"] for u in (await listed(admin="true"))["users"]] == ["root"]
    [shown] = (await listed(q="alice"))["users"]
    assert shown["plan"] == "free" and shown["credits"] < 1000 and not shown["admin"]
    assert shown["lastActive"] is not None and shown["lastActive"][:10] == TODAY
    assert shown["spentToday"] == 1000 - shown["credits"] and shown["dailyCap"] is None
    assert (await listed(q="bob"))["users"][0]["lastActive"] is None  # never charged
    for params, code in (({"limit": "0"}, "invalid_limit"), ({"blocked": "yes"},
                                                             "invalid_blocked"),
                         ({"after": "a--b"}, "invalid_user_id"), ({"plan": "no plan"},
                                                                  "invalid_plan")):
        response = await harness.client.get("/api/admin/users", params=params, headers=root)
        await assert_json_error(response, 400, code)


async def test_a_blocked_account_is_refused_everywhere_and_its_data_stays(
        harness: Harness) -> None:
    root = await admin_of(harness)
    alice = await harness.user("alice")
    assert (await harness.chat(alice, "remember this")).status == 200
    assert (await harness.client.get("/api/threads", headers=alice)).status == 200  # cached

    blocked = await harness.client.post("/api/admin/users/alice/block", headers=root)
    assert blocked.status == 200 and (await blocked.json())["blocked"] is True
    error = await assert_json_error(await harness.client.get("/api/threads", headers=alice),
                                    403, "account_blocked")
    assert "blocked" in error["message"]
    await assert_json_error(await harness.chat(alice, "hello?"), 403, "account_blocked")
    completion = await harness.client.post("/v1/chat/completions", headers=alice, json={
        "messages": [{"role": "user", "content": "hi"}], "metadata": {"thread_id": "t2"}})
    assert completion.status == 403
    assert (await completion.json())["error"]["code"] == "account_blocked"
    sign_in = await harness.client.post("/auth/session", json={
        "token": alice["Authorization"].removeprefix("Bearer ")})
    await assert_json_error(sign_in, 403, "account_blocked")

    await assert_json_error(await harness.client.post("/api/admin/users/root/block",
                                                      headers=root), 409, "cannot_block_self")
    await assert_json_error(await harness.client.post("/api/admin/users/nobody/block",
                                                      headers=root), 404, "user_not_found")
    await assert_json_error(await harness.client.post("/api/admin/users/a--b/block",
                                                      headers=root), 400, "invalid_user_id")

    assert (await harness.client.post("/api/admin/users/alice/unblock",
                                      headers=root)).status == 200
    thread = await harness.client.get("/api/threads/t1", headers=alice)
    assert thread.status == 200
    first = (await thread.json())["display_messages"][0]
    assert first["content"] == "remember this"  # the data stayed
    audit = await (await harness.client.get("/api/admin/audit", headers=root)).json()
    assert [(e["action"], e["target"], e["actor"], e["source"]) for e in audit["entries"]][:2] \
        == [("user.unblock", "alice", "root", "127.0.0.1"),
            ("user.block", "alice", "root", "127.0.0.1")]


async def test_a_channel_sender_who_is_blocked_gets_a_note_and_no_turn(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    await harness.gateway.admin.set_blocked("loop:ada", True, Actor("operator", "cli"))
    await harness.gateway.receive(loop.message("m2", "are you there?"))
    replies = await loop.wait_for(2)
    assert replies[1] == ("m2", "This account is blocked, so I cannot answer. Ask the "
                                "operator if you think it should not be.")
    assert len(fake_llm.chat_requests) == 1  # no turn ran


async def test_a_grant_needs_a_reason_and_is_a_ledger_row_of_its_own_kind(
        harness: Harness) -> None:
    root = await admin_of(harness)
    bob = await harness.user("bob")
    path = "/api/admin/users/bob/grants"
    for body, status, code in (
            ({"credits": 50}, 400, "invalid_reason"), ({"credits": 50, "reason": "  "}, 400,
                                                       "invalid_reason"),
            ({"credits": 0, "reason": "r"}, 400, "invalid_credits"),
            ({"credits": "50", "reason": "r"}, 400, "invalid_credits"),
            ({"credits": True, "reason": "r"}, 400, "invalid_credits"),
            ({"credits": 50, "reason": "r" * 501}, 413, "reason_too_long")):
        await assert_json_error(await harness.client.post(path, json=body, headers=root),
                                status, code)
    await assert_json_error(await harness.client.post(
        "/api/admin/users/nobody/grants", json={"credits": 5, "reason": "r"}, headers=root),
        404, "user_not_found")
    response = await harness.client.post(path, headers=root, json={
        "credits": 250, "reason": "refund for the outage"})
    assert response.status == 201
    granted = await response.json()
    assert granted["granted"] == 250 and granted["user"]["credits"] == 1250
    usage = await (await harness.client.get("/api/user/usage", headers=bob)).json()
    assert (usage["entries"][0]["kind"], usage["entries"][0]["credits"]) == ("admin_grant",
                                                                             -250)
    [entry] = (await (await harness.client.get("/api/admin/audit", params={
        "action": "credits.grant"}, headers=root)).json())["entries"]
    assert (entry["target"], entry["details"]) == ("bob", {"credits": 250,
                                                           "reason": "refund for the outage"})


# --- budgets -------------------------------------------------------------------------------
async def test_a_turn_past_the_daily_cap_is_402_until_the_admin_lifts_it(
        harness: Harness) -> None:
    root = await admin_of(harness)
    alice = await harness.user("alice")
    path = "/api/admin/users/alice/budget"
    for body, code in (({}, "invalid_daily_credits"), ({"dailyCredits": -1},
                                                       "invalid_daily_credits"),
                       ({"dailyCredits": "5"}, "invalid_daily_credits")):
        await assert_json_error(await harness.client.put(path, json=body, headers=root), 400,
                                code)
    capped = await harness.client.put(path, json={"dailyCredits": 2}, headers=root)
    assert capped.status == 200
    assert (await capped.json())["dailyCredits"] == (await capped.json())["dailyCap"] == 2
    answers = [await harness.chat(alice, f"turn {n}") for n in range(4)]
    statuses = [a.status for a in answers]
    assert statuses[0] == 200 and 402 in statuses
    refused = answers[statuses.index(402)]
    error = await assert_json_error(refused, 402, "daily_cap_reached")
    assert re.search(r"daily limit of 2 AI credits is reached; it resets at "
                     r"\d{4}-\d\d-\d\dT00:00:00Z", error["message"])
    user = await harness.gateway.store.get_user("alice")
    assert user is not None and 2 <= user.spent_today < 2 + 2  # one turn's cost at most
    assert user.credits > 0  # the balance itself is not what refused it
    lifted = await harness.client.put(path, json={"dailyCredits": None}, headers=root)
    assert (await lifted.json())["dailyCap"] is None  # the plan's: none
    assert (await harness.chat(alice, "again")).status == 200


async def test_a_plan_s_daily_cap_refuses_a_channel_turn_with_a_note_saying_when_it_resets(
        loop: LoopChannel, start_clocked: StartGateway, clock: Clock) -> None:
    clock.to(datetime(2026, 12, 3, 21, 30, tzinfo=UTC))
    harness = await start_clocked(plans=capped_plans(1))
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    await harness.gateway.receive(loop.message("m2", "more"))
    replies = await loop.wait_for(2)
    assert replies[1] == ("m2", "You reached today's limit of 1 AI credits. It resets at "
                                "00:00 UTC, in 2 h 30 min.")
    clock.advance(2.5 * 3600)  # 00:00 UTC: the allowance is whole again
    await harness.gateway.receive(loop.message("m3", "a new day"))
    replies = await loop.wait_for(3)
    assert replies[2][1].startswith("echo: ")


async def test_credits_low_is_told_at_80_percent_of_the_daily_cap(
        start_gateway: StartGateway, receiver: WebhookReceiver) -> None:
    harness = await start_gateway(plans=capped_plans(5), **PRIVATE_OK)
    alice = await harness.user("alice")
    await register(harness, alice, receiver, events=["credits.low"])
    for n in range(6):
        if (await harness.chat(alice, f"turn {n}")).status == 402:
            break
    got = await receiver.next()
    assert got.verified and got.event is not None and got.event["type"] == "credits.low"
    data = got.event["data"]
    assert (data["reason"], data["threshold"], data["dailyCredits"]) == ("daily_cap", 4, 5)
    assert data["spentToday"] >= 4 and data["resetsAt"].endswith("T00:00:00Z")


# --- reports -------------------------------------------------------------------------------
async def test_usage_over_time_by_dimension_with_the_top_spenders(harness: Harness) -> None:
    root = await admin_of(harness)
    alice, bob = await harness.user("alice"), await harness.user("bob", plan="pro")
    for n in range(3):
        assert (await harness.chat(alice, f"alice {n}", thread=f"a{n}")).status == 200
    assert (await harness.chat(bob, "bob")).status == 200

    async def report(**params: str) -> dict[str, Any]:
        response = await harness.client.get("/api/admin/usage", params=params, headers=root)
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body

    by_user = await report(groupBy="user", top="1")
    assert [u["userId"] for u in by_user["topSpenders"]["users"]] == ["alice"]
    assert [(r["bucket"], r["group"], r["calls"]) for r in by_user["series"]] == [
        (TODAY, "alice", 3)]
    spent = {u.user_id: 1000 - u.credits if u.plan == "free" else 20000 - u.credits
             for u in await harness.gateway.store.find_users(UserQuery(10))}
    assert by_user["topSpenders"]["users"][0]["credits"] == spent["alice"]
    by_plan = await report(groupBy="plan")
    assert {r["group"]: r["credits"] for r in by_plan["series"]} == {
        "free": spent["alice"], "pro": spent["bob"]}
    assert by_plan["totals"]["credits"] == spent["alice"] + spent["bob"]
    assert by_plan["totals"]["calls"] == 4 and by_plan["bucket"] == "day"
    assert len(by_plan["from"]) == 10 and by_plan["to"] > TODAY
    by_channel = await report(groupBy="channel", bucket="hour")
    assert {r["group"] for r in by_channel["series"]} == {"dashboard"}
    assert all(len(r["bucket"]) == 13 for r in by_channel["series"])
    by_model = await report(groupBy="model", **{"from": TODAY, "to": TODAY + "T23:59:59Z"})
    assert [r["group"] for r in by_model["series"]] == [harness.gateway.settings.llm_model]
    tools = await report(groupBy="tool")
    assert [r["group"] for r in tools["series"]] == [""]  # no tool ran
    for params, code in (
            ({"bucket": "week"}, "invalid_bucket"), ({"groupBy": "colour"}, "invalid_groupBy"),
            ({"groupBy": "user", "bucket": "hour"}, "invalid_bucket"),
            ({"from": "2026-12-05", "to": "2026-12-01"}, "invalid_range"),
            ({"from": "2024-01-01", "to": "2026-01-01"}, "invalid_range"),
            ({"from": "2026-10-01T00:00", "to": "2026-12-10", "bucket": "hour"},
             "invalid_range"),
            ({"from": "last tuesday"}, "invalid_from"), ({"to": "0001-01-01"}, "invalid_to"),
            ({"top": "0"}, "invalid_top")):
        response = await harness.client.get("/api/admin/usage", params=params, headers=root)
        await assert_json_error(response, 400, code)


async def test_health_shows_queues_failing_endpoints_without_their_secrets_and_jobs(
        harness: Harness) -> None:
    root = await admin_of(harness)
    alice = await harness.user("alice")
    store = harness.gateway.store
    await store.create_webhook(Webhook("wh_" + "a" * 24, "alice",
                                       "https://user:pw@hooks.example.com/in?token=s3cret",
                                       ("thread.cleared",), b"sealed", "2026-01-01T00:00:00Z"))
    told: list[WebhookDelivery] = []
    harness.gateway.store.webhooks_queued = told.extend
    await store.emit("alice", [webhook_events.webhook_test("wh_" + "a" * 24)],
                     only="wh_" + "a" * 24)
    await store.webhook_attempts([WebhookAttempt(told[0].id, "failed", 8, 503,
                                                 harness.gateway.clock(), "HTTP 503")])
    job = await harness.client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "every", "when": "2h", "text": "stretch"})
    assert job.status == 201

    response = await harness.client.get("/api/admin/health", headers=root)
    assert response.status == 200
    health = await response.json()
    text = await response.text()
    assert "s3cret" not in text and "pw@" not in text
    assert health["webhooks"] == [{"id": "wh_" + "a" * 24, "userId": "alice",
                                   "host": "https://hooks.example.com", "retrying": 0,
                                   "failed": 1, "lastStatusCode": 503,
                                   "lastError": "HTTP 503"}]
    assert health["jobs"] == {"active": 1, "paused": 0, "done": 0}
    assert health["channels"] == []


async def test_the_audit_log_pages_newest_first_and_filters(harness: Harness) -> None:
    root = await admin_of(harness)
    for name in ("a1", "a2", "a3"):
        await harness.user(name)
        assert (await harness.client.post(f"/api/admin/users/{name}/block",
                                          headers=root)).status == 200

    async def page(**params: str) -> dict[str, Any]:
        response = await harness.client.get("/api/admin/audit", params=params, headers=root)
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body

    first = await page(limit="2")
    assert [e["target"] for e in first["entries"]] == ["a3", "a2"]
    rest = await page(limit="2", before=str(first["nextBefore"]))
    assert [e["target"] for e in rest["entries"]] == ["a1", "root"]  # the promotion
    assert rest["entries"][1]["actor"] == "operator" and rest["entries"][1]["source"] == "cli"
    assert [e["target"] for e in (await page(actor="root"))["entries"]] == ["a3", "a2", "a1"]
    assert [e["action"] for e in (await page(action="user.promote"))["entries"]] == [
        "user.promote"]
    assert (await page(since="2999-01-01"))["entries"] == []
    assert len((await page(since=TODAY))["entries"]) == 4
    await assert_json_error(await harness.client.get("/api/admin/audit", params={
        "since": "yesterday"}, headers=root), 400, "invalid_since")


@pytest.mark.parametrize("route", ["/api/admin/users", "/api/admin/usage", "/api/admin/health",
                                   "/api/admin/audit"])
async def test_a_blocked_admin_is_refused_like_anyone_blocked(harness: Harness,
                                                              route: str) -> None:
    root = await admin_of(harness)
    await admin_of(harness, "second")
    await harness.gateway.admin.set_blocked("root", True, Actor("second", "127.0.0.1"))
    await assert_json_error(await harness.client.get(route, headers=root), 403,
                            "account_blocked")


async def test_a_shared_store_s_gateway_folds_the_hours_that_are_over(
        start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked(leader_retry_seconds=0.02)
    store = harness.gateway.store
    if not isinstance(store, PostgresStore):
        pytest.skip("one process writes SQLite's rollups: one row an hour already "
                    "(tests/test_store_contract.py); this runs on PostgreSQL")
    for name in ("alice", "bob", "carol", "dave"):  # accounts in several shards
        assert (await harness.chat(await harness.user(name), "hello")).status == 200
    connection = await asyncpg.connect(store.url)
    try:
        sharded = "SELECT count(*) FROM usage_hours WHERE shard <> 0"
        assert await connection.fetchval(sharded) > 0
        before = await store.usage_report(UsageQuery(TODAY, "9000-01-01", "day", "plan", 10))
        clock.advance(3 * 3600)  # that hour is over: the periodic loop folds it

        async def folded() -> None:
            while await connection.fetchval(sharded) > 0:
                await asyncio.sleep(0.01)  # a bounded poll of the periodic loop's work
        await asyncio.wait_for(folded(), 10)
    finally:
        await connection.close()
    after = await store.usage_report(UsageQuery(TODAY, "9000-01-01", "day", "plan", 10))
    assert after == before
