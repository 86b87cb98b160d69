"""Rate limits and credit holds on PostgreSQL hold across processes (SPEC §18): two gateways on
one database admit a user's turns as one would. (Real ``cloudybot serve`` processes hammering
both are in test_postgres_processes.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

from gateway.billing.quotas import HOLD_SECONDS
from gateway.config.settings import Plan
from gateway.store import Claim
from gateway.store.postgres import PostgresStore
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error
from tests.test_billing import assert_ledger_matches_balances, with_plans

StartClocked = Callable[..., Awaitable[Harness]]
LIMITED = Plan("limited", credits=1000, browser_minutes=0, retention_days=30,
               requests_per_minute=2)


async def two_gateways(start_clocked: StartClocked, postgres_url: str,
                       **settings: object) -> tuple[Harness, Harness]:
    first = await start_clocked(database_url=postgres_url, **settings)
    second = await start_clocked(database_url=postgres_url, **settings)
    return first, second


async def holds(postgres_url: str, user_id: str = "alice") -> str:
    conn = await asyncpg.connect(postgres_url)
    try:
        held: str = await conn.fetchval("SELECT holds::text FROM users WHERE user_id = $1",
                                        user_id)
        return held
    finally:
        await conn.close()


async def test_a_turn_in_flight_in_one_process_holds_credits_the_other_sees(
        start_clocked: StartClocked, postgres_url: str, fake_llm: FakeLLM) -> None:
    first, second = await two_gateways(start_clocked, postgres_url)
    auth = await first.user("alice", credits=5)
    answer = asyncio.Event()
    fake_llm.script = [Scripted(body=completion("first", 10, 5), release=answer)]
    in_flight = asyncio.ensure_future(first.chat(auth, "one", thread="a"))
    while not fake_llm.chat_requests:  # the first turn holds its worst case now
        await asyncio.sleep(0.01)
    assert (await holds(postgres_url)) != "{}"

    # Its hold (a call at MAX_CONTEXT) is more than the 5 credits: the other process's turn
    # must wait, as another turn of the same process would.
    await assert_json_error(await second.chat(auth, "two", thread="b"), 429, "credits_busy")
    answer.set()
    assert (await in_flight).status == 200
    assert (await holds(postgres_url)) == "{}"  # released by the turn's commit
    assert (await second.chat(auth, "three", thread="b")).status == 200
    await assert_ledger_matches_balances(second.gateway, "alice")


async def test_the_rate_limit_counts_the_requests_of_every_process(
        start_clocked: StartClocked, postgres_url: str, clock: Clock) -> None:
    first, second = await two_gateways(start_clocked, postgres_url, plans=with_plans(LIMITED))
    auth = await first.user("alice", plan="limited")
    assert (await first.chat(auth, "one")).status == 200
    assert (await second.chat(auth, "two")).status == 200
    response = await first.chat(auth, "three")
    await assert_json_error(response, 429, "rate_limited")
    assert 59 <= int(response.headers["Retry-After"]) <= 60
    await assert_json_error(await second.chat(auth, "four"), 429, "rate_limited")
    clock.advance(61)
    assert (await second.chat(auth, "five")).status == 200


async def test_the_hold_of_a_process_that_died_expires(
        start_clocked: StartClocked, postgres_url: str, clock: Clock) -> None:
    first, _ = await two_gateways(start_clocked, postgres_url)
    auth = await first.user("alice", credits=5)
    store = first.gateway.store
    assert isinstance(store, PostgresStore)
    # What a process killed mid-turn leaves: a hold nobody will release.
    dead = Claim("dead-process-hold", 50, clock(), clock() + HOLD_SECONDS, None)
    assert (await store.hold_credits("alice", dead, 0)).held
    await assert_json_error(await first.chat(auth, "blocked"), 429, "credits_busy")
    clock.advance(HOLD_SECONDS + 1)
    assert (await first.chat(auth, "free again")).status == 200
    assert (await holds(postgres_url)) == "{}"


async def test_a_failed_turn_releases_its_hold(
        start_clocked: StartClocked, postgres_url: str, fake_llm: FakeLLM) -> None:
    first, _ = await two_gateways(start_clocked, postgres_url, llm_max_retries=0)
    auth = await first.user("alice", credits=5)
    fake_llm.script = [Scripted(status=500, body={"error": {"message": "down"}})]
    response = await first.chat(auth, "fails")
    assert response.status >= 500
    assert (await holds(postgres_url)) == "{}"
    assert (await first.chat(auth, "works")).status == 200


async def test_a_refused_claim_keeps_the_hold_its_turn_already_had(
        start_clocked: StartClocked, postgres_url: str, clock: Clock) -> None:
    """A turn refused a tool round still owes its first call (charged at its commit): until
    then that call's hold stays, so no other turn can spend those credits meanwhile."""
    harness = await start_clocked(database_url=postgres_url)
    await harness.user("alice", credits=100)
    store = harness.gateway.store
    assert isinstance(store, PostgresStore)

    def claim(hold: str, credits: int) -> Claim:
        return Claim(hold, credits, clock(), clock() + HOLD_SECONDS, None)

    for hold in ("a", "b", "c", "d"):  # 100 - 99 > 0: the fourth is still admitted
        assert (await store.hold_credits("alice", claim(hold, 33), 0)).held
    # turn a spent 20 on its first call; its tool round (20 + 33) does not fit: refused...
    assert not (await store.hold_credits("alice", claim("a", 53), 20)).held
    # ...but a's 33 stay held, so a new turn finds nothing free (100 - 132 <= 0)
    assert not (await store.hold_credits("alice", claim("e", 33), 0)).held
    assert '"a": [33' in await holds(postgres_url)
