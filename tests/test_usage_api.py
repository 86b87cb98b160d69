"""``GET /api/user/usage`` and ``GET /api/user/credits`` (SPEC §7, §9; issue 5): the ledger newest
first and paged, per-kind totals of the current period, the period and its monthly grant."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import closing
from typing import Any

import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error, month_start
from tests.test_billing import credits_body

AuthHeaders = dict[str, str]
StartClocked = Callable[..., Awaitable[Harness]]
ENTRY_KEYS = {"id", "kind", "model", "thread", "createdAt", "promptTokens", "completionTokens",
              "credits", "browserMinutes"}


async def usage(harness: Harness, auth: AuthHeaders, query: str = "") -> dict[str, Any]:
    response = await harness.client.get(f"/api/user/usage{query}", headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def iso_z(moment: Any) -> str:
    return str(moment.isoformat().replace("+00:00", "Z"))


async def test_usage_lists_the_ledger_newest_first_with_every_field(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=500)
    fake_llm.script += [Scripted(body=completion("one", 1000, 0)),
                        Scripted(body=completion("two", 1500, 1000, model="fake-model-2"))]
    assert (await harness.chat(auth, "first", thread="t1")).status == 200
    assert (await harness.chat(auth, "second", thread="t2")).status == 200
    await harness.gateway.store.charge_minutes("alice", "alice--t2", 3)

    body = await usage(harness, auth)

    assert body["userId"] == "alice"
    assert body["nextBefore"] is None
    entries = body["entries"]
    assert all(set(entry) == ENTRY_KEYS for entry in entries)
    assert [e["id"] for e in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert [(e["kind"], e["model"], e["thread"], e["promptTokens"], e["completionTokens"],
             e["credits"], e["browserMinutes"]) for e in entries] == [
        ("browser", "", "alice--t2", 0, 0, 0, 3),
        ("chat", "fake-model", "alice--t2", 1500, 1000, 5, 0),  # the configured model's name
        ("chat", "fake-model", "alice--t1", 1000, 0, 1, 0),
        ("grant", "", None, 0, 0, -500, -30),
    ]
    assert entries[0]["createdAt"] >= entries[-1]["createdAt"]
    assert all(e["createdAt"].endswith("Z") for e in entries)


async def test_paging_with_limit_and_before_walks_every_row_once(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user("alice", credits=5000)
    for i in range(6):
        assert (await harness.chat(auth, f"m{i}", thread=f"t{i}")).status == 200
    everything = [e["id"] for e in (await usage(harness, auth))["entries"]]
    assert len(everything) == 7  # the opening grant and six turns

    walked: list[int] = []
    pages: list[int] = []
    query = "?limit=3"
    while True:
        page = await usage(harness, auth, query)
        walked += [e["id"] for e in page["entries"]]
        pages.append(len(page["entries"]))
        if page["nextBefore"] is None:
            break
        assert page["nextBefore"] == page["entries"][-1]["id"]
        query = f"?limit=3&before={page['nextBefore']}"
        assert len(pages) <= 7, "paging does not end"

    assert walked == everything
    assert pages == [3, 3, 1]
    exact = await usage(harness, auth, "?limit=7")
    assert exact["nextBefore"] is None and len(exact["entries"]) == 7
    beyond = await usage(harness, auth, f"?before={everything[-1]}")
    assert beyond == {**beyond, "entries": [], "nextBefore": None}


@pytest.mark.sqlite_only
async def test_totals_are_per_kind_over_the_current_period_only(
        harness: Harness, fake_llm: FakeLLM) -> None:
    gateway = harness.gateway
    auth = await harness.user("alice", credits=500)
    fake_llm.script += [Scripted(body=completion("a", 1000, 0)),
                        Scripted(body=completion("b", 1400, 300)),
                        Scripted(body=completion("c", 500, 500))]
    for message in ("a", "b", "c"):
        assert (await harness.chat(auth, message)).status == 200
    await gateway.store.grant_credits("alice", 40)
    await gateway.store.charge_minutes("alice", None, 2)
    await gateway.store.charge_minutes("alice", None, 3)
    # The first turn happened last month (written as such; the store stamps the wall clock).
    last_month = iso_z(month_start(gateway.clock(), months=-1))
    first_chat = min(e["id"] for e in (await usage(harness, auth))["entries"]
                     if e["kind"] == "chat")
    with closing(sqlite3.connect(gateway.settings.database_path, timeout=5)) as conn:
        conn.execute("UPDATE ledger SET created_at = ? WHERE id = ?", (last_month, first_chat))
        conn.commit()

    body = await usage(harness, auth)

    assert body["totals"] == {
        "browser": {"count": 2, "promptTokens": 0, "completionTokens": 0, "credits": 0,
                    "browserMinutes": 5},
        "chat": {"count": 2, "promptTokens": 1900, "completionTokens": 800, "credits": 5,
                 "browserMinutes": 0},  # 2.3 → 3 and 2.0 → 2
        "grant": {"count": 2, "promptTokens": 0, "completionTokens": 0, "credits": -540,
                  "browserMinutes": -30},
    }
    assert len(body["entries"]) == 7  # the ledger itself still shows last month's row


async def test_usage_is_each_users_own(harness: Harness) -> None:
    alice = await harness.user("alice", credits=500)
    bob = await harness.user("bob", credits=70)
    assert (await harness.chat(alice, "hi")).status == 200

    body = await usage(harness, bob)

    assert body["userId"] == "bob"
    assert [(e["kind"], e["credits"]) for e in body["entries"]] == [("grant", -70)]
    assert set(body["totals"]) == {"grant"}


@pytest.mark.parametrize("query", [
    "?limit=0", "?limit=501", "?limit=abc", "?limit=-1", "?limit=1.5", "?limit=",
    "?before=0", "?before=x", "?before=-5", "?before=99999999999999999999",
])
async def test_bad_paging_parameters_are_400(harness: Harness, query: str) -> None:
    auth = await harness.user("alice")
    response = await harness.client.get(f"/api/user/usage{query}", headers=auth)
    name = query[1:].split("=")[0]
    await assert_json_error(response, 400, f"invalid_{name}")


@pytest.mark.parametrize("path", ["/api/user/usage", "/api/user/credits"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-token"},
                                     {"Authorization": "Basic YWxpY2U6cHc="}])
async def test_usage_and_credits_need_a_valid_token(harness: Harness, path: str,
                                                   headers: dict[str, str]) -> None:
    await harness.user("alice")
    await assert_json_error(await harness.client.get(path, headers=headers), 401,
                            "unauthorized")


async def test_credits_show_the_plan_balances_and_the_current_period(
        start_clocked: StartClocked, clock: Clock) -> None:
    clock.to(month_start(clock(), months=0).replace(day=17, hour=9))
    harness = await start_clocked()
    auth = await harness.user("alice", plan="pro", credits=1234)

    body = await credits_body(harness, auth)

    start = month_start(clock())
    assert body == {"userId": "alice", "plan": "pro", "credits": 1234, "browserMinutes": 600,
                    "period": start.strftime("%Y-%m"), "periodStart": iso_z(start),
                    "periodEnd": iso_z(month_start(clock(), months=1))}


async def test_credits_in_december_end_the_period_in_january(
        start_clocked: StartClocked, clock: Clock) -> None:
    december = month_start(clock()).replace(month=12, day=31, hour=23, minute=59)
    clock.to(december)
    harness = await start_clocked()
    auth = await harness.user("alice")

    body = await credits_body(harness, auth)

    year = december.year
    assert (body["period"], body["periodStart"], body["periodEnd"]) == (
        f"{year}-12", f"{year}-12-01T00:00:00Z", f"{year + 1}-01-01T00:00:00Z")


async def test_credits_and_usage_reads_apply_a_due_monthly_grant(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    alice = await harness.user("alice", credits=25)
    bob = await harness.user("bob", credits=0)
    next_period = clock.next_month()

    body = await credits_body(harness, alice)
    bob_usage = await usage(harness, bob)

    assert (body["period"], body["credits"]) == (next_period, 1000)
    assert body["periodStart"] == iso_z(month_start(clock()))
    assert bob_usage["period"] == next_period
    assert bob_usage["entries"][0]["kind"] == "monthly_grant"
    assert bob_usage["entries"][0]["credits"] == -1000
    assert (await credits_body(harness, bob))["credits"] == 1000
