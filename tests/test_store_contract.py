"""One set of store tests, run against both backends (SQLite and PostgreSQL), so that the two
implementations of :class:`gateway.store.Store` cannot drift apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.base.errors import BadRequest, Conflict, NotFound
from gateway.store import (
    ChannelMessage,
    Charge,
    InboxEntry,
    NewMessage,
    Store,
    SummaryCommit,
    ThreadRef,
    TurnCommit,
)
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SQLiteStore
from tests.helpers import Clock

REF = ThreadRef("alice", "t1", "alice--t1", "dashboard")
BOB_REF = ThreadRef("bob", "t1", "bob--t1", "dashboard")


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path,
                clock: Clock) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        opened: Any = SQLiteStore(tmp_path / "gateway.sqlite3", clock)
    else:
        opened = PostgresStore(request.getfixturevalue("postgres_url"), clock)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def clock() -> Clock:
    return Clock(1_767_225_600.0)  # 2026-01-01T00:00:00Z


async def users(store: Store) -> None:
    await store.create_user("alice", "free", 1000, 30, "2026-01")
    await store.create_user("bob", "pro", 500, 0, "2026-01")


def turn(ref: ThreadRef, text: str, reply: str, credits: int = 3,
         inbound: ChannelMessage | None = None) -> TurnCommit:
    return TurnCommit(ref=ref, billed_user=ref.user_id,
                      messages=[NewMessage("user", text, 2), NewMessage("assistant", reply, 3)],
                      charges=[Charge("chat", "m", 10, 5, credits)], inbound=inbound)


# --- accounts ----------------------------------------------------------------------------
async def test_accounts_grants_tokens_and_periods(store: Store) -> None:
    await users(store)
    with pytest.raises(BadRequest):
        await store.create_user("alice", "free", 1, 0)
    user, created = await store.ensure_user("alice", "free", 5, 0)
    assert (user.credits, user.browser_minutes, created) == (1000, 30, False)
    assert (await store.grant_credits("alice", 25)).credits == 1025
    with pytest.raises(NotFound):
        await store.grant_credits("nobody", 1)
    await store.replace_token("alice", "hash-1")
    await store.replace_token("alice", "hash-2")
    assert await store.user_for_token("hash-1") is None
    assert (await store.user_for_token("hash-2")).user_id == "alice"  # type: ignore[union-attr]
    # a monthly grant applies once, however many callers race for it
    rolled = await asyncio.gather(*(store.roll_period("alice", "2026-01", "2026-02", 2000, 60)
                                    for _ in range(5)))
    assert {user.credits for user in rolled} == {2000}
    assert [c.kind for c in await store.ledger("alice")].count("monthly_grant") == 1
    moved = await store.set_plan("bob", "team", 5000, 100)
    assert (moved.plan, moved.credits, moved.browser_minutes) == ("team", 5000, 100)
    charged = await store.charge_minutes("bob", "bob--t1", 3)
    assert charged.browser_minutes == 97
    assert await store.get_user("nobody") is None


async def test_browser_minutes_are_taken_only_as_far_as_the_balance_holds(store: Store) -> None:
    await users(store)
    await store.set_plan("bob", "team", 5000, 3)
    assert await store.take_minutes("bob", "bob--t1", 2) == 2
    assert await store.take_minutes("bob", "bob--t1", 2) == 1  # only one was left
    assert await store.take_minutes("bob", "bob--t1", 1) == 0
    user = await store.get_user("bob")
    assert user is not None and user.browser_minutes == 0
    rows = [c for c in await store.ledger("bob") if c.kind == "browser"]
    assert [row.minutes for row in rows] == [2, 1]  # nothing written for the refusal
    results = await asyncio.gather(*(store.take_minutes("alice", None, 1) for _ in range(40)))
    alice = await store.get_user("alice")
    assert alice is not None and alice.browser_minutes == 0 and sum(results) == 30


async def test_the_ledger_in_pages_totals_and_days(store: Store, clock: Clock) -> None:
    await users(store)
    for index in range(5):
        await store.commit_turn(turn(REF, f"q{index}", f"a{index}", credits=index + 1))
        clock.advance(86400)
    page, cursor = await store.ledger_page("alice", 3, None)
    assert [e.charge.credits for e in page] == [5, 4, 3]
    rest, last = await store.ledger_page("alice", 3, cursor)
    assert [e.charge.credits for e in rest] == [2, 1, -1000] and last is None
    totals = await store.ledger_totals("alice", "2026-01-01")
    assert (totals["chat"].credits, totals["chat"].model) == (15, "5")
    daily = await store.ledger_daily("alice", "2026-01-02")
    assert daily == [(f"2026-01-0{day}", "chat", day, 0) for day in range(2, 6)]


# --- threads and memory ----------------------------------------------------------------
async def test_a_turn_is_written_and_read_back_whole(store: Store) -> None:
    await users(store)
    await store.put_pinned(REF, "name", "Ada", 10)
    await store.put_specialist("alice", "chef", "Cook.")
    await store.put_credential("alice", "example.com", b"\x00sealed")
    written = await store.commit_turn(turn(REF, "hello", "hi there"))
    assert len(written.message_ids) == 2 and written.message_ids[0] < written.message_ids[1]
    state = await store.load_turn(REF, "alice", "chef")
    assert (state.user.credits, state.pinned, state.specialist_instructions) == (
        997, {"name": "Ada"}, "Cook.")
    assert [(m.role, m.content, m.tokens) for m in state.messages] == [
        ("user", "hello", 2), ("assistant", "hi there", 3)]
    assert [(c.site, c.blob) for c in state.credentials] == [("example.com", b"\x00sealed")]
    thread, messages = await store.rolling_memory("alice--t1")
    assert thread is not None and thread.ref == REF and len(messages) == 2
    # read whoever asks (the agent decides who may use it), with its stored owner
    read = await store.load_turn(ThreadRef("bob", "t1", "alice--t1", "dashboard"), "bob", None)
    assert read.thread is not None and read.thread.ref.user_id == "alice"
    with pytest.raises(NotFound):
        await store.commit_turn(turn(ThreadRef("bob", "x", "alice--t1", "dashboard"), "a", "b"))


async def test_display_pages_and_thread_lists_page_by_cursor(store: Store,
                                                             clock: Clock) -> None:
    await users(store)
    for index in range(7):
        await store.commit_turn(turn(REF, f"q{index}", f"a{index}"))
    page = await store.display_page("alice--t1", 4, None)
    assert [m.content for m in page.messages] == ["q5", "a5", "q6", "a6"]
    older = await store.display_page("alice--t1", 100, page.next_before)
    assert older.messages[0].content == "q0" and older.next_before is None
    for index in range(5):
        clock.advance(1)
        await store.put_pinned(ThreadRef("alice", f"l{index}", f"alice--l{index}", "dashboard"),
                               "k", "v", 10)
    first, cursor = await store.list_threads("alice", 3)
    assert [t.ref.thread_id for t in first] == ["l4", "l3", "l2"]
    second, end = await store.list_threads("alice", 3, cursor)
    assert [t.ref.thread_id for t in second] == ["l1", "l0", "t1"] and end is None


async def test_pinned_keys_clear_and_delete(store: Store) -> None:
    await users(store)
    assert await store.get_pinned(REF) == {}
    for index in range(3):
        await store.put_pinned(REF, f"k{index}", "v", 3)
    with pytest.raises(BadRequest):
        await store.put_pinned(REF, "k9", "v", 3)
    assert await store.put_pinned(REF, "k0", "new", 3) == {"k0": "new", "k1": "v", "k2": "v"}
    assert await store.delete_pinned(REF, "k1") == {"k0": "new", "k2": "v"}
    with pytest.raises(NotFound):
        await store.get_pinned(ThreadRef("bob", "t1", "alice--t1", "dashboard"))
    await store.commit_turn(turn(REF, "q", "a"))
    assert await store.clear_thread("alice--t1")
    thread, messages = await store.rolling_memory("alice--t1")
    assert messages == [] and thread is not None and thread.summary_version == 1
    assert len((await store.display_page("alice--t1", 10, None)).messages) == 2
    assert await store.delete_thread("alice--t1")
    assert not await store.delete_thread("alice--t1")
    assert await store.get_thread("alice--t1") is None
    assert await store.delete_pinned(REF, None) == {}


async def test_a_summary_applies_only_at_the_version_it_read(store: Store) -> None:
    await users(store)
    ids = []
    for index in range(3):
        ids += (await store.commit_turn(turn(REF, f"q{index}", f"a{index}"))).message_ids
    commit = SummaryCommit("alice--t1", "alice", 0, "the summary", 4, ids[1],
                           Charge("summarize", "m", 30, 10, 7))
    assert await store.commit_summary(commit)
    assert not await store.commit_summary(commit)  # version 0 is gone
    thread, messages = await store.rolling_memory("alice--t1")
    assert thread is not None and (thread.summary, thread.summary_version) == ("the summary", 1)
    assert [m.content for m in messages] == ["q1", "a1", "q2", "a2"]
    assert [c.kind for c in await store.ledger("alice")][-1] == "summarize"


# --- channels ----------------------------------------------------------------------------
async def next_run(store: Store) -> None:
    await store.close()
    await store.open()


async def test_the_inbox_answers_once_and_the_outbox_keeps_failures(store: Store) -> None:
    await users(store)
    entry = InboxEntry("telegram", "m1", "alice--t1", '{"chat": 1}', 4096, b"sealed")
    assert await store.inbox_add(entry) is not None
    assert await store.inbox_add(entry) is None  # a redelivery
    await next_run(store)  # the messages and replies of a run that stopped are the next's
    assert [(e.message_id, e.payload) for e in await store.inbox_pending()] == [("m1", b"sealed")]
    await store.commit_turn(turn(REF, "q", "the reply", inbound=ChannelMessage("telegram", "m1")))
    assert await store.inbox_pending() == []
    with pytest.raises(Conflict):
        await store.commit_turn(turn(REF, "q", "again",
                                     inbound=ChannelMessage("telegram", "m1")))
    await next_run(store)
    [delivery] = await store.pending_deliveries()
    assert (delivery.text, delivery.address, delivery.max_chars) == (
        "the reply", '{"chat": 1}', 4096)
    await store.delivery_progress("telegram", "m1", 1)
    await store.delivery_retry("telegram", "m1", 2, 99.5, "HTTP 502")
    [retried] = await store.deliveries("alice--t1")
    assert (retried.chunks_sent, retried.attempts, retried.next_attempt, retried.last_error) == (
        1, 2, 99.5, "HTTP 502")
    await store.delivery_finished("telegram", "m1", "chat not found")
    assert await store.pending_deliveries() == []
    assert [d.state for d in await store.deliveries()] == ["failed"]
    await store.inbox_add(InboxEntry("telegram", "m2", "c", "{}", 10, b"x"))
    assert await store.answer_inbox("telegram", "m2", "ok")
    assert not await store.answer_inbox("telegram", "m2", "ok")
    await store.delivery_finished("telegram", "m2")
    await store.inbox_add(InboxEntry("telegram", "m3", "c", "{}", 10, b"x"))
    await store.drop_inbox("telegram", "m3")
    assert await store.inbox_pending() == []
    assert await store.inbox_add(InboxEntry("slack", "s1", "c", "{}", 10, b"x"),
                                 answered=True) is not None
    # four answered inbox rows, one failure
    assert await store.prune_inbound("9999-12-31T00:00:00Z") == 5


# --- specialists, credentials, sign-in, retention ----------------------------------------
async def test_specialists_credentials_and_dashboard_sessions(store: Store,
                                                              clock: Clock) -> None:
    await users(store)
    await store.put_specialist("alice", "chef", "Cook.")
    await store.put_specialist("alice", "chef", "Cook well.")
    assert await store.list_specialists("alice") == {"chef": "Cook well."}
    assert await store.get_specialist("alice", "chef") == "Cook well."
    assert await store.delete_specialist("alice", "chef")
    assert not await store.delete_specialist("alice", "chef")
    await store.put_credential("alice", "b.com", b"2")
    assert [c.site for c in await store.put_credential("alice", "a.com", b"1")] == [
        "a.com", "b.com"]
    assert [c.site for c in await store.delete_credential("alice", "a.com")] == ["b.com"]
    await store.create_web_session("s-hash", "alice", "csrf", clock() + 60)
    session = await store.web_session("s-hash")
    assert session is not None and (session.user.user_id, session.csrf) == ("alice", "csrf")
    clock.advance(61)
    assert await store.web_session("s-hash") is None
    await store.create_login_link("c-hash", "alice", clock() + 900)
    with pytest.raises(NotFound):
        await store.create_login_link("c2", "nobody", clock() + 900)
    spent = await asyncio.gather(*(store.use_login_link("c-hash") for _ in range(4)))
    assert spent.count("alice") == 1 and spent.count(None) == 3


async def test_expired_threads_by_plan_cutoff(store: Store, clock: Clock) -> None:
    await users(store)
    await store.commit_turn(turn(REF, "old", "a"))
    await store.commit_turn(turn(BOB_REF, "old", "b"))
    clock.advance(40 * 86400)
    await store.commit_turn(turn(ThreadRef("alice", "t2", "alice--t2", "dashboard"), "new", "c"))
    expired = await store.expired_threads({"free": "2026-01-15T00:00:00Z"})
    assert [(e.session_key, e.plan) for e in expired] == [("alice--t1", "free")]
