"""One set of store tests, run against both backends (SQLite and PostgreSQL), so that the two
implementations of :class:`gateway.store.Store` cannot drift apart.

Every method of the protocol has a test here: each test says which methods it exercises
(:func:`covers`), the fixture checks that it did call each of them (directly, not through
another method), and :func:`test_every_store_method_has_a_contract_test` fails for a method
no test covers. The account rules (:mod:`gateway.store.policy`) are held to here too, through
the store and the quotas each backend is used with (:func:`gateway.billing.quotas_for`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import random
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest

from gateway.base.errors import BadRequest, Conflict, NotFound, PaymentRequired, RateLimited
from gateway.base.times import iso_utc
from gateway.billing import quotas_for
from gateway.billing.credits import (
    CallUsage,
    CreditsBusy,
    DailyCapReached,
    UsageBounds,
    worst_case,
)
from gateway.billing.quotas import Admission, Quotas, TurnBill
from gateway.config.settings import Plan, Settings, load_settings
from gateway.store import (
    AuditEntry,
    AuditQuery,
    ChannelMessage,
    Charge,
    InboxEntry,
    Job,
    JobOutcome,
    NewMessage,
    Spend,
    Store,
    SummaryCommit,
    ThreadRef,
    TurnCommit,
    UsageQuery,
    UsageReport,
    UserQuery,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    policy,
)
from gateway.store import events as webhook_events
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SQLiteStore
from tests.helpers import Clock

REF = ThreadRef("alice", "t1", "alice--t1", "dashboard")
BOB_REF = ThreadRef("bob", "t1", "bob--t1", "dashboard")
Test = TypeVar("Test", bound=Callable[..., Awaitable[None]])


def store_methods() -> set[str]:
    """The methods of the Store protocol."""
    return {name for name, _ in inspect.getmembers(Store, inspect.isfunction)
            if not name.startswith("_")}


COVERED: dict[str, list[str]] = {}  # Store method -> the contract tests exercising it


def covers(*methods: str) -> Callable[[Test], Test]:
    """Declare the Store methods a contract test (taking the ``store`` fixture) exercises: the
    test fails if it did not call one of them itself, and the meta-test fails for a method no
    test declares."""
    unknown = set(methods) - store_methods()
    assert not unknown, f"not methods of the Store protocol: {sorted(unknown)}"

    def mark(test: Test) -> Test:
        for method in methods:
            COVERED.setdefault(method, []).append(test.__name__)

        @functools.wraps(test)
        async def checked(*args: Any, **kwargs: Any) -> None:
            await test(*args, **kwargs)
            uncalled = set(methods) - kwargs["store"].contract_calls
            assert not uncalled, f"{test.__name__} declares {sorted(uncalled)}, never calls them"
        return checked  # type: ignore[return-value]
    return mark


# How deep in store calls the running task is: a method another one calls is not the test's.
_DEPTH: ContextVar[int] = ContextVar("store_call_depth", default=0)


def record_calls(store: Any, called: set[str]) -> None:
    """Make ``store`` note in ``called`` each protocol method the test itself calls."""
    for name in store_methods():
        method = getattr(store, name)

        async def recorded(*args: Any, _name: str = name, _method: Any = method,
                           **kwargs: Any) -> Any:
            depth = _DEPTH.get()
            if depth == 0:
                called.add(_name)
            token = _DEPTH.set(depth + 1)
            try:
                return await _method(*args, **kwargs)
            finally:
                _DEPTH.reset(token)
        setattr(store, name, recorded)


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path,
                clock: Clock) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        opened: Any = SQLiteStore(tmp_path / "gateway.sqlite3", clock)
    else:
        opened = PostgresStore(request.getfixturevalue("postgres_url"), clock)
    await opened.open()
    opened.contract_calls = set()
    record_calls(opened, opened.contract_calls)
    try:
        yield opened
    finally:
        await opened.close()


async def another_process(store: Store, clock: Clock) -> Store | None:
    """The same database opened as another gateway process would: None for SQLite (one
    process only)."""
    if not isinstance(store, PostgresStore):
        return None
    other = PostgresStore(store.url, clock)
    await other.open()
    return other


def test_every_store_method_has_a_contract_test() -> None:
    missing = sorted(store_methods() - COVERED.keys())
    assert not missing, f"Store methods no contract test covers: {missing}"


@pytest.mark.parametrize("backend", [SQLiteStore, PostgresStore])
def test_both_backends_implement_the_protocol_as_declared(backend: type) -> None:
    for name in sorted(store_methods()):
        declared = inspect.signature(getattr(Store, name)).parameters
        implemented = inspect.signature(getattr(backend, name)).parameters
        # the protocol's parameters, in order, with its defaults; more only if optional
        assert [(p.name, p.default) for p in declared.values()] == [
            (p.name, p.default) for p in list(implemented.values())[:len(declared)]], name
        assert all(p.default is not inspect.Parameter.empty
                   for p in list(implemented.values())[len(declared):]), name
        assert inspect.iscoroutinefunction(getattr(backend, name)), name


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
@covers("create_user", "ensure_user", "grant_credits", "replace_token", "user_for_token",
        "roll_period", "ledger", "set_plan", "charge_minutes", "get_user")
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
    # a new account opens in the month of its creation unless told otherwise
    assert (await store.create_user("carol", "free", 0, 0)).period == "2026-01"
    assert [c.kind for c in await store.ledger("carol")] == []  # nothing granted: no row
    moved = await store.set_plan("bob", "team", 5000, 100)
    assert (moved.plan, moved.credits, moved.browser_minutes) == ("team", 5000, 100)
    charged = await store.charge_minutes("bob", "bob--t1", 3)
    assert charged.browser_minutes == 97
    # a grant tops up to the plan's amounts, never down to them
    moved = await store.set_plan("bob", "free", 1000, 200)
    assert (moved.plan, moved.credits, moved.browser_minutes) == ("free", 5000, 200)
    assert (await store.roll_period("bob", "2026-01", "2026-02", 1000, 30)).credits == 5000
    assert await store.get_user("nobody") is None


@covers("take_minutes", "charge_minutes")
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
    # metered time may take a balance below zero; nothing more is taken from it
    assert (await store.charge_minutes("alice", None, 5)).browser_minutes == -5
    assert await store.take_minutes("alice", None, 3) == 0
    alice = await store.get_user("alice")
    assert alice is not None and alice.browser_minutes == -5


@covers("ledger_page", "ledger_totals", "ledger_daily")
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
@covers("put_pinned", "put_specialist", "put_credential", "commit_turn", "load_turn",
        "rolling_memory")
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


@covers("display_page", "list_threads")
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


@covers("set_title", "get_thread", "list_threads")
async def test_a_thread_is_titled_by_its_first_message_until_the_user_names_it(
        store: Store, clock: Clock) -> None:
    await users(store)
    await store.put_pinned(REF, "k", "v", 10)  # a thread with no message yet
    assert (await store.get_thread("alice--t1")) is not None
    assert await title_of(store, "alice--t1") == ("", False)
    first = "  Plan a trip\nto Lisbon in May: flights, a hotel near Alfama and the trams " * 3
    await store.commit_turn(turn(REF, first, "Sure."))
    clock.advance(1)
    await store.commit_turn(turn(REF, "And the weather?", "Sunny."))
    derived = ("Plan a trip to Lisbon in May: flights, a hotel near Alfama and the trams Plan"
               " a…")
    assert await title_of(store, "alice--t1") == (derived, False)
    updated = (await store.get_thread("alice--t1")).updated_at  # type: ignore[union-attr]
    clock.advance(1)
    assert await store.set_title("alice--t1", "Lisbon in May")
    assert await title_of(store, "alice--t1") == ("Lisbon in May", True)
    listed, _ = await store.list_threads("alice")
    assert [(t.title, t.named, t.updated_at) for t in listed] == [
        ("Lisbon in May", True, updated)]  # naming it does not move it in the list
    assert await store.set_title("alice--t1", None)
    assert await title_of(store, "alice--t1") == (derived, False)
    assert not await store.set_title("alice--nothing", "x")


async def title_of(store: Store, session_key: str) -> tuple[str, bool]:
    thread = await store.get_thread(session_key)
    assert thread is not None
    return thread.title, thread.named


@covers("search_threads", "set_title", "commit_turn", "delete_thread", "delete_user")
async def test_search_finds_words_in_ones_own_titles_and_messages_newest_thread_first(
        store: Store, clock: Clock) -> None:
    await users(store)

    def ref(user: str, thread: str) -> ThreadRef:
        return ThreadRef(user, thread, f"{user}--{thread}", "dashboard")

    async def found(terms: tuple[str, ...], user: str = "alice",
                    limit: int = 10) -> list[tuple[str, str]]:
        hits, _ = await store.search_threads(user, terms, limit)
        return [(h.thread.ref.thread_id, h.text) for h in hits]

    written = await store.commit_turn(turn(ref("alice", "trip"), "Booking the Lisbon flight",
                                           "Flights to LISBON leave at 9."))
    clock.advance(1)
    await store.commit_turn(turn(ref("alice", "food"), "pasta_carbonara at www.example.com",
                                 "Café crème, then 3.14 kg of pasta."))
    clock.advance(1)
    await store.commit_turn(turn(ref("alice", "named"), "nothing here", "nor here"))
    await store.set_title("alice--named", "Lisbon ideas")
    await store.commit_turn(turn(ref("bob", "trip"), "Lisbon for bob", "ok"))

    # a word's start, any case; the newest matching message; a title the user set
    assert await found(("lisb",)) == [("named", ""), ("trip", "Flights to LISBON leave at 9.")]
    hits, _ = await store.search_threads("alice", ("lisb",), 10)
    assert hits[1].message_id == written.message_ids[1] and hits[0].message_id is None
    assert hits[0].thread.title == "Lisbon ideas" and hits[1].thread.title == (
        "Booking the Lisbon flight")
    # every word, in one message; punctuation and _ separate words; accents are kept
    assert await found(("lisbon", "booking")) == [("trip", "Booking the Lisbon flight")]
    assert await found(("lisbon", "pasta")) == []
    for terms in (("carbonara",), ("example", "com"), ("14",), ("café",), ("crème",)):
        assert [t for t, _ in await found(terms)] == ["food"], terms
    assert await found(("cafe",)) == [] and await found(("isbon",)) == []
    # never another user's threads
    assert await found(("lisbon",), "bob") == [("trip", "Lisbon for bob")]
    assert await found(("ideas",), "bob") == []
    # pages in the list's order, by its cursor
    first, cursor = await store.search_threads("alice", ("lisbon",), 1)
    assert [h.thread.ref.thread_id for h in first] == ["named"] and cursor is not None
    second, end = await store.search_threads("alice", ("lisbon",), 1, cursor)
    assert [h.thread.ref.thread_id for h in second] == ["trip"] and end is None
    # a title replaced or taken back is searched as it is now
    await store.set_title("alice--named", "Porto")
    assert await found(("ideas",)) == [] and await found(("porto",)) == [("named", "")]
    await store.set_title("alice--named", None)
    assert await found(("porto",)) == []
    # deleted threads and accounts are gone from the index
    assert await store.delete_thread("alice--trip")
    assert await found(("lisbon",)) == []
    assert await store.delete_user("bob")
    assert await found(("lisbon",), "bob") == []
    await store.commit_turn(turn(ref("alice", "trip"), "Lisbon again", "ok"))
    assert await found(("lisbon",)) == [("trip", "Lisbon again")]


@covers("get_pinned", "put_pinned", "delete_pinned", "clear_thread", "delete_thread",
        "get_thread")
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


@covers("commit_summary")
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


@covers("open", "close", "inbox_add", "inbox_pending", "answer_inbox", "drop_inbox",
        "pending_deliveries", "deliveries", "delivery_progress", "delivery_retry",
        "delivery_finished", "prune_inbound")
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


@covers("inbox_take_earlier")
async def test_the_messages_before_one_are_those_of_its_conversation_pending_oldest_first(
        store: Store) -> None:
    def message(message_id: str, conversation: str = "loop:c1") -> InboxEntry:
        return InboxEntry("loop", message_id, conversation, "{}", 50, b"sealed")

    for message_id in ("m1", "m2"):
        intake = await store.inbox_add(message(message_id))
        assert intake is not None and not intake.behind_others  # its own process's: in order
    await store.inbox_add(message("other", "loop:c2"))
    await store.inbox_add(message("m3"))
    assert await store.answer_inbox("loop", "m2", "answered")
    last = await store.inbox_add(message("m4"))
    assert last is not None
    earlier = await store.inbox_take_earlier(dataclasses.replace(message("m4"), id=last.id))
    assert [entry.message_id for entry in earlier.taken] == ["m1", "m3"]
    assert earlier.elsewhere == 0


@covers("queue_message")
async def test_a_plugins_own_message_is_queued_once_and_survives_a_restart(
        store: Store) -> None:
    own = InboxEntry("loop", "out-1", "loop:c1", '{"to": 1}', 50, b"")
    assert await store.queue_message(own, "your reminder")
    assert not await store.queue_message(own, "your reminder")  # its id is taken: once only
    await next_run(store)
    [delivery] = await store.pending_deliveries()
    assert (delivery.channel, delivery.message_id, delivery.conversation, delivery.address,
            delivery.text, delivery.max_chars) == (
        "loop", "out-1", "loop:c1", '{"to": 1}', "your reminder", 50)
    assert await store.inbox_pending() == []  # nothing for the inbox to answer
    # an inbound message's id is never taken over: its pending row stays pending
    await store.inbox_add(InboxEntry("loop", "m1", "loop:c1", "{}", 50, b"sealed"))
    assert not await store.queue_message(InboxEntry("loop", "m1", "loop:c1", "{}", 50, b""),
                                         "not an answer")
    await next_run(store)
    assert [e.message_id for e in await store.inbox_pending()] == ["m1"]


# --- specialists, credentials, sign-in, retention ----------------------------------------
@covers("put_specialist", "list_specialists", "get_specialist", "delete_specialist",
        "put_credential", "delete_credential", "create_web_session", "web_session",
        "create_login_link", "use_login_link")
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


@covers("expired_threads")
async def test_expired_threads_by_plan_cutoff(store: Store, clock: Clock) -> None:
    await users(store)
    await store.commit_turn(turn(REF, "old", "a"))
    await store.commit_turn(turn(BOB_REF, "old", "b"))
    clock.advance(40 * 86400)
    await store.commit_turn(turn(ThreadRef("alice", "t2", "alice--t2", "dashboard"), "new", "c"))
    expired = await store.expired_threads({"free": "2026-01-15T00:00:00Z"})
    assert [(e.session_key, e.plan) for e in expired] == [("alice--t1", "free")]


# --- accounts as a whole -----------------------------------------------------------------
@covers("list_users", "user_counts", "revoke_access", "delete_user", "list_credentials",
        "delete_web_session", "list_jobs")
async def test_accounts_are_listed_counted_revoked_and_deleted_whole(store: Store,
                                                                      clock: Clock) -> None:
    await users(store)
    await store.create_user("carol", "free", 0, 0, "2026-01")
    first = await store.list_users(2)
    assert [u.user_id for u in first] == ["alice", "bob"]
    assert [u.user_id for u in await store.list_users(2, "bob")] == ["carol"]
    await store.commit_turn(turn(REF, "q", "a"))
    await store.replace_token("alice", "token-hash")
    await store.create_web_session("s1", "alice", "csrf", clock() + 60)
    await store.create_web_session("s2", "alice", "csrf", clock() + 60)
    await store.delete_web_session("s2")
    assert await store.web_session("s2") is None and await store.web_session("s1") is not None
    await store.put_specialist("alice", "chef", "Cook.")
    await store.put_credential("alice", "example.com", b"sealed")
    assert [c.site for c in await store.list_credentials("alice")] == ["example.com"]
    await store.create_webhook(webhook("alice"))
    await store.create_job(job("alice"), 10)
    assert await store.user_counts("alice") == {"threads": 1, "tokens": 1, "sessions": 1,
                                                 "specialists": 1, "logins": 1, "webhooks": 1,
                                                 "jobs": 1}
    await store.create_login_link("code", "alice", clock() + 60)
    assert await store.revoke_access("alice") == 3  # the token, the session, the link
    assert await store.user_for_token("token-hash") is None
    assert await store.use_login_link("code") is None
    await store.inbox_add(InboxEntry("telegram", "m1", "alice--t1", "{}", 10, b"x"))
    assert await store.delete_user("alice")
    assert not await store.delete_user("alice")
    assert await store.get_user("alice") is None and await store.ledger("alice") == []
    assert await store.get_thread("alice--t1") is None and await store.inbox_pending() == []
    assert await store.list_webhooks("alice") == [] and await store.list_jobs("alice") == []
    assert (await store.get_user("bob")) is not None  # nobody else's rows


@covers("access_epoch", "replace_token", "revoke_access", "delete_user", "commit_turn",
        "grant_credits")
async def test_the_access_epoch_moves_whenever_a_token_stops_working(store: Store) -> None:
    await users(store)
    await store.replace_token("alice", "h1")
    await store.replace_token("bob", "h2")
    epoch = await store.access_epoch()
    await store.commit_turn(turn(REF, "q", "a"))
    await store.grant_credits("alice", 5)
    assert await store.access_epoch() == epoch  # no token ended: cached tokens stay good
    for ends_one in (lambda: store.replace_token("alice", "h3"),
                     lambda: store.revoke_access("alice"),
                     lambda: store.delete_user("bob")):  # its token goes with it
        await ends_one()
        assert await store.access_epoch() != epoch
        epoch = await store.access_epoch()


async def epoch_moves(store: Store, epoch: int) -> None:
    """Wait (5 s at most) until ``store`` tells of a revocation another process made."""
    async def poll() -> None:
        while await store.access_epoch() == epoch:
            await asyncio.sleep(0.002)  # a bounded poll of a notification in flight
    await asyncio.wait_for(poll(), 5.0)


@covers("access_epoch")
async def test_a_revocation_by_another_process_moves_the_access_epoch(
        store: Store, clock: Clock) -> None:
    await users(store)
    await store.replace_token("alice", "h1")
    await store.replace_token("bob", "h2")
    other = await another_process(store, clock)
    if other is None:  # SQLite: the CLI, say, opens the same file
        assert isinstance(store, SQLiteStore)
        other = SQLiteStore(store.path, clock)
        await other.open()
    try:
        for revoke in (lambda: other.revoke_access("alice"), lambda: other.delete_user("bob")):
            epoch = await store.access_epoch()
            await revoke()
            if isinstance(store, SQLiteStore):
                assert await store.access_epoch() != epoch  # read, not told: at once
            else:
                await epoch_moves(store, epoch)  # told by NOTIFY when it committed
    finally:
        await other.close()


# --- billing: the rules of gateway.store.policy, through the store and its quotas ----------
def settings_with(*plans: Plan) -> Settings:
    """The default settings, with ``plans`` added."""
    defaults = load_settings(env={})
    return dataclasses.replace(defaults, plans={**defaults.plans,
                                                **{plan.name: plan for plan in plans}})


async def run_turn(store: Store, quotas: Quotas, settings: Settings, ref: ThreadRef,
                   prompts: list[int], pause: Callable[[], Awaitable[None]]) -> int:
    """A turn as the gateway runs one, billing-wise (gateway.turn.agent): admitted before its
    read, checked, then before each call a hold for its worst case (a call per prompt size
    in ``prompts``: the first, then tool rounds), each call charged its worst case, the
    charges committed with the hold's release, or recorded so if the turn fails after a call.
    What it was charged; raises what refused it."""
    async with quotas.admit(ref.user_id) as admission:
        state = await store.load_turn(ref, ref.user_id, None, admission.claim)
        plan = settings.plans[state.user.plan]
        await admission.check(state.user, plan.requests_per_minute, state.claimed)
        bill = TurnBill(settings, admission, state.user.credits)
        try:
            for prompt in prompts:
                await bill.reserve(prompt)
                await pause()  # the provider answers
                bounds = UsageBounds.of(prompt, settings.llm_max_tokens)
                model = settings.llm_model
                bill.charge("chat", CallUsage(model, model, bounds.prompt, bounds.completion))
            await store.commit_turn(TurnCommit(
                ref=ref, billed_user=ref.user_id, charges=bill.charges, hold=bill.hold,
                messages=[NewMessage("user", "q", 1), NewMessage("assistant", "a", 1)]))
        except BaseException:
            if bill.charges:
                await store.record_charges(ref.user_id, ref.session_key, bill.charges,
                                           bill.hold)
                bill.settle()
            raise
        return bill.settle()


async def _nothing() -> None:
    """A provider that answers at once."""


def alice_ref(thread: str) -> ThreadRef:
    return ThreadRef("alice", thread, f"alice--{thread}", "dashboard")


@covers("load_turn", "commit_turn", "record_charges")
async def test_a_turn_refused_a_tool_round_keeps_its_hold_until_its_charge_is_stored(
        store: Store, clock: Clock) -> None:
    """The PostgreSQL-only overspend: a turn refused a tool round let go of its first call's
    hold before that call was charged, and another turn spent those credits meanwhile."""
    settings = settings_with()
    most = worst_case(settings, settings.max_context, settings.llm_max_tokens)
    bounds = UsageBounds.of(settings.max_context, settings.llm_max_tokens)
    await store.create_user("alice", "team", 2 * most, 0, "2026-01")
    quotas = quotas_for(store, settings, clock)

    async def started(admission: Admission, ref: ThreadRef) -> TurnBill:
        state = await store.load_turn(ref, "alice", None, admission.claim)
        await admission.check(state.user, 0, state.claimed)
        bill = TurnBill(settings, admission, state.user.credits)
        await bill.reserve(settings.max_context)  # its first call is held
        return bill

    async with quotas.admit("alice") as a:
        a_bill = await started(a, alice_ref("a"))
        async with quotas.admit("alice") as b:
            b_bill = await started(b, alice_ref("b"))  # all the credits are held now
            # a's call answered
            a_bill.charge("chat", CallUsage("m", "m", bounds.prompt, bounds.completion))
            with pytest.raises(CreditsBusy):  # a's tool round does not fit beside b's call
                await a_bill.reserve(settings.max_context)
            # a's first call is charged only when a ends: until then nobody else may start
            with pytest.raises(CreditsBusy):
                await run_turn(store, quotas, settings, alice_ref("c"),
                               [settings.max_context], _nothing)
            b_bill.charge("chat", CallUsage("m", "m", bounds.prompt, bounds.completion))
            await store.commit_turn(TurnCommit(alice_ref("b"), "alice", [], b_bill.charges,
                                               hold=b_bill.hold))
            b_bill.settle()
        await store.record_charges("alice", "alice--a", a_bill.charges, a_bill.hold)
        a_bill.settle()
    alice = await store.get_user("alice")
    assert alice is not None and alice.credits == 0
    assert [c.credits for c in await store.ledger("alice")] == [-2 * most, most, most]
    with pytest.raises(PaymentRequired):
        await run_turn(store, quotas, settings, alice_ref("d"), [100], _nothing)


@covers("load_turn", "get_user", "ledger")
async def test_concurrent_turns_of_one_user_overspend_by_one_call_at_most(
        store: Store, clock: Clock) -> None:
    """Many turns of one user at once, with tool rounds, half of them through another process
    on PostgreSQL: the charges never exceed the balance by a call's worst case. (With the
    refused claim's hold dropped, they overspent by several calls, most runs.)"""
    settings = settings_with()
    most = worst_case(settings, settings.max_context, settings.llm_max_tokens)
    await store.create_user("alice", "team", 40 * most + 5, 0, "2026-01")
    other = await another_process(store, clock)
    stores = [store] if other is None else [store, other]
    quotas = [quotas_for(s, settings, clock) for s in stores]
    rng = random.Random(7)

    async def pause() -> None:
        await asyncio.sleep(rng.uniform(0, 0.004))

    async def turn_after_turn(worker: int) -> tuple[int, int]:
        charged = refused = 0
        for n in range(6):
            which = (worker + n) % len(stores)
            prompts = [settings.max_context] * (2 + (worker + n) % 2)  # 1 or 2 tool rounds
            try:
                charged += await run_turn(stores[which], quotas[which], settings,
                                          alice_ref(f"w{worker}-{n}"), prompts, pause)
            except (CreditsBusy, PaymentRequired):
                refused += 1
            await pause()
        return charged, refused

    try:
        results = await asyncio.gather(*(turn_after_turn(worker) for worker in range(16)))
    finally:
        if other is not None:
            await other.close()
    alice = await store.get_user("alice")
    assert alice is not None
    # the last call let start may find less than its worst case left: never nothing
    assert alice.credits > -most, f"overspent by {-alice.credits}"
    assert sum(row.credits for row in await store.ledger("alice")) == -alice.credits
    assert sum(refused for _, refused in results) > 0  # the credits did run out


@covers("load_turn")
async def test_the_rate_window_counts_a_minute_of_admitted_requests(store: Store,
                                                                    clock: Clock) -> None:
    settings = settings_with(Plan("limited", 1000, 0, 30, requests_per_minute=2))
    await store.create_user("alice", "limited", 1000, 0, "2026-01")
    await store.create_user("bob", "team", 1000, 0, "2026-01")  # no limit
    await store.create_user("carol", "limited", 1000, 0, "2026-01")
    quotas = quotas_for(store, settings, clock)

    async def request(user: str = "alice", thread: str = "t", via: Store = store,
                      through: Quotas = quotas) -> float | None:
        """None if admitted, else the seconds to wait."""
        try:
            await run_turn(via, through, settings,
                           ThreadRef(user, thread, f"{user}--{thread}", "api"), [], _nothing)
        except RateLimited as exc:
            assert not isinstance(exc, CreditsBusy)
            return exc.retry_after
        return None

    assert await request() is None  # t=0
    clock.advance(10)
    assert await request() is None  # t=10
    clock.advance(10)
    assert await request() == pytest.approx(40)  # t=20: full until t=0 leaves, at 60
    clock.advance(31)
    assert await request() == pytest.approx(9)  # t=51; refusals are not counted...
    clock.advance(10)
    assert await request() is None  # t=61: ...so only t=10 is left in the window
    clock.advance(4)
    assert await request() == pytest.approx(5)  # t=65: t=10 and t=61 fill it
    assert [await request("bob") for _ in range(30)] == [None] * 30
    # ten at once, half through another process where there can be one: two are let in
    other = await another_process(store, clock)
    try:
        ways = [(store, quotas)] if other is None else [
            (store, quotas), (other, quotas_for(other, settings, clock))]
        answers = await asyncio.gather(*(
            request("carol", f"c{n}", *ways[n % len(ways)]) for n in range(10)))
    finally:
        if other is not None:
            await other.close()
    assert answers.count(None) == 2


# --- credits.low -------------------------------------------------------------------------
def webhook(user_id: str, events: tuple[str, ...] = (webhook_events.CREDITS_LOW,),
            webhook_id: str = "") -> Webhook:
    return Webhook(webhook_id or f"wh_{user_id}", user_id, "https://example.com/hook", events,
                   b"sealed", "2026-01-01T00:00:00Z")


@covers("commit_turn", "commit_summary", "grant_credits", "create_webhook",
        "webhook_deliveries")
async def test_credits_low_is_told_once_per_crossing(store: Store, clock: Clock) -> None:
    await users(store)  # alice: the free plan's 1,000 credits
    await store.create_webhook(webhook("alice"))
    low = policy.low_credits_threshold(1000)
    assert low == 100

    def spend(credits: int, thread: str = "t1") -> TurnCommit:
        return dataclasses.replace(turn(alice_ref(thread), "q", "a", credits=credits),
                                   low_credits=low)

    async def told() -> list[int]:
        deliveries = await store.webhook_deliveries("alice", "wh_alice", 100)
        return [json.loads(d.body)["data"]["credits"] for d in reversed(deliveries)]

    await store.grant_credits("alice", -890)  # 110
    await store.commit_turn(spend(5))  # 105
    await store.commit_turn(spend(5))  # 100: at the threshold is not under it
    assert await told() == []
    await store.commit_turn(spend(1))  # 99: fell under
    await store.commit_turn(spend(5))  # 94: still under, no second event
    assert await told() == [99]
    await store.grant_credits("alice", 56)  # 150
    ids = [m.id for m in (await store.rolling_memory("alice--t1"))[1]]
    await store.commit_summary(SummaryCommit("alice--t1", "alice", 0, "s", 1, ids[0],
                                             Charge("summarize", "m", 1, 1, 60),
                                             low_credits=low))  # 90: fell under again
    assert await told() == [99, 90]
    await store.grant_credits("alice", 110)  # 200
    await asyncio.gather(*(store.commit_turn(spend(15, f"c{n}")) for n in range(10)))  # 50
    assert len(await told()) == 3  # one of the ten crossed; the others were under already
    # the same body from both stores, as gateway.store.events writes it
    [last] = await store.webhook_deliveries("alice", "wh_alice", 1)
    data = json.loads(last.body)["data"]
    assert last.body == webhook_events.body(webhook_events.CREDITS_LOW, iso_utc(clock()), data)
    assert data["threshold"] == 100 and 50 <= data["credits"] < 100
    alice = await store.get_user("alice")
    assert alice is not None and alice.credits == 50


# --- outbound webhooks -------------------------------------------------------------------
@covers("create_webhook", "list_webhooks", "get_webhook", "delete_webhook", "emit",
        "webhook_deliveries", "webhook_pending", "webhook_delivery", "webhook_attempts",
        "clear_thread", "delete_thread")
async def test_webhooks_queue_with_the_changes_they_report(store: Store, clock: Clock) -> None:
    await users(store)
    told: list[WebhookDelivery] = []
    store.webhooks_queued = told.extend
    await store.create_webhook(webhook("alice", ("thread.cleared", "thread.deleted"), "wh_a"))
    clock.advance(1)
    await store.create_webhook(webhook("alice", ("message.created",), "wh_b"))
    assert [w.id for w in await store.list_webhooks("alice")] == ["wh_a", "wh_b"]
    found = await store.get_webhook("wh_a")
    assert found is not None and found.events == ("thread.cleared", "thread.deleted")
    assert await store.get_webhook("nope") is None
    ref = webhook_events.thread_cleared(REF)
    assert await store.emit("alice", [ref]) == 1  # only wh_a subscribes
    assert await store.emit("alice", [webhook_events.webhook_test("wh_b")], only="wh_b") == 1
    assert await store.emit("bob", [ref]) == 0
    await store.commit_turn(turn(REF, "q", "a"))
    assert await store.clear_thread("alice--t1", [webhook_events.thread_cleared(REF)])
    assert await store.delete_thread("alice--t1", [webhook_events.thread_deleted(REF)])
    assert not await store.delete_thread("alice--t1", [webhook_events.thread_deleted(REF)])
    assert [d.event for d in told] == ["thread.cleared", "webhook.test", "thread.cleared",
                                       "thread.deleted"]
    log = await store.webhook_deliveries("alice", "wh_a", 10)
    assert [d.event for d in log] == ["thread.deleted", "thread.cleared", "thread.cleared"]
    assert all(d.state == "pending" for d in log)
    await next_run(store)  # what a run left pending is the next's
    due = await store.webhook_pending()
    assert sorted(d.id for d in due) == sorted(d.id for d in told)
    first = log[-1]
    await store.webhook_attempts([
        WebhookAttempt(first.id, "pending", 1, 503, clock() + 30, "HTTP 503"),
        WebhookAttempt(first.id, "delivered", 2, 200, clock() + 30, None)])
    delivered = await store.webhook_delivery(first.id)
    assert delivered is not None and (delivered.state, delivered.attempts,
                                      delivered.last_status) == ("delivered", 2, 200)
    assert delivered.body == first.body
    assert await store.delete_webhook("alice", "wh_a")
    assert not await store.delete_webhook("bob", "wh_b")  # not bob's
    assert await store.webhook_delivery(first.id) is None  # its deliveries went with it


# --- queues and records of calls -----------------------------------------------------------
@covers("queue_depths", "record_charges")
async def test_queue_depths_and_charges_of_a_turn_not_stored(store: Store) -> None:
    await users(store)
    for n in range(3):
        await store.inbox_add(InboxEntry("telegram", f"m{n}", "alice--t1", "{}", 10, b"x"))
    await store.inbox_add(InboxEntry("slack", "s1", "alice--t1", "{}", 10, b"x"))
    await store.answer_inbox("telegram", "m0", "reply")
    assert await store.queue_depths() == {"telegram": (2, 1), "slack": (1, 0)}
    await store.record_charges("alice", "alice--t1", [Charge("chat", "m", 10, 5, 4),
                                                      Charge("chat", "m", 20, 5, 6)])
    alice = await store.get_user("alice")
    assert alice is not None and alice.credits == 990
    assert [c.credits for c in await store.ledger("alice")][-2:] == [4, 6]
    assert await store.get_thread("alice--t1") is None  # the turn itself was not stored


# --- several processes ---------------------------------------------------------------------
@covers("lock_thread", "try_lead")
async def test_turn_locks_and_roles_exclude_other_processes(store: Store,
                                                            clock: Clock) -> None:
    lock = await store.lock_thread("alice--t1")
    leader = await store.try_lead("poller")
    assert leader is not None and await leader.alive()
    other = await another_process(store, clock)
    if other is None:  # SQLite: one process, its in-process locks are the whole story
        assert lock is None and not store.shared
        assert await store.try_lead("poller") is not None
        return
    assert lock is not None and store.shared
    try:
        assert await other.try_lead("poller") is None
        waiting = asyncio.ensure_future(other.lock_thread("alice--t1"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the other process's turn waits for this one's
        await lock.release()
        theirs = await asyncio.wait_for(waiting, 5)
        assert theirs is not None
        await theirs.release()
        await leader.release()
        assert not await leader.alive()
        taken = await other.try_lead("poller")
        assert taken is not None
        await taken.release()
    finally:
        await other.close()


# --- scheduled jobs ----------------------------------------------------------------------
TG_REF = ThreadRef("alice", "telegram:42", "telegram:42", "telegram")


def job(user_id: str, ref: ThreadRef | None = None, next_run: float = 1_767_229_200.0,
        job_id: str = "") -> Job:
    """A daily 01:00 UTC message job, first due at 2026-01-01T01:00Z."""
    return Job(job_id or f"job_{user_id}", user_id, ref or ThreadRef(
        user_id, "t1", f"{user_id}--t1", "dashboard"), "", 100, "cron", "0 1 * * *", "UTC",
        "message", "Stand up!", "run_once", "active", next_run,
        created_at="2026-01-01T00:00:00Z")


@covers("create_job", "list_jobs", "get_job", "set_job_state", "delete_job", "time_zone",
        "set_time_zone")
async def test_jobs_are_made_under_a_limit_listed_paused_and_deleted(store: Store) -> None:
    await users(store)
    address = json.dumps({"chat_id": 42, "topic": 7})
    await store.inbox_add(InboxEntry("telegram", "m1", "telegram:42", "{}", 10, b"x"))
    await store.inbox_add(InboxEntry("telegram", "m2", "telegram:42", address, 4096, b"x"))
    made = await store.create_job(job("alice", TG_REF, job_id="job_a"), 2)
    # a job takes the address of its conversation's latest channel message
    assert made is not None and (made.address, made.max_chars) == (address, 4096)
    assert await store.create_job(job("alice", job_id="job_b"), 2) is not None
    assert await store.create_job(job("alice", job_id="job_c"), 2) is None  # at the limit
    assert [j.id for j in await store.list_jobs("alice")] == ["job_a", "job_b"]
    assert await store.get_job("job_a") == made and await store.get_job("job_z") is None
    paused = await store.set_job_state("alice", "job_a", "paused", None)
    assert paused is not None and (paused.state, paused.next_run) == ("paused", None)
    assert await store.set_job_state("bob", "job_a", "active", 1.0) is None  # not bob's
    resumed = await store.set_job_state("alice", "job_a", "active", 1_767_315_600.0)
    assert resumed is not None and (resumed.state, resumed.next_run) == ("active",
                                                                         1_767_315_600.0)
    assert not await store.delete_job("bob", "job_a")
    assert await store.delete_job("alice", "job_a") and await store.get_job("job_a") is None
    assert await store.time_zone("alice") is None
    assert await store.set_time_zone("alice", "Europe/Paris")
    assert await store.time_zone("alice") == "Europe/Paris"
    assert not await store.set_time_zone("nobody", "UTC")


@covers("claim_jobs", "next_job_wake", "finish_job", "job_runs", "commit_turn", "deliveries")
async def test_a_run_is_claimed_with_a_lease_and_committed_once(store: Store,
                                                                clock: Clock) -> None:
    await users(store)
    await store.inbox_add(InboxEntry("telegram", "m1", "telegram:42", '{"chat_id": 42}', 99,
                                     b"x"), answered=True)
    assert await store.next_job_wake() is None
    await store.create_job(job("alice", TG_REF), 10)
    due = 1_767_229_200.0
    assert await store.next_job_wake() == due
    assert await store.claim_jobs(due - 1, 30, 10) == []  # not due yet
    first = await store.claim_jobs(due, 30, 10)
    assert [(lease.job.id, lease.due) for lease in first] == [("job_alice", due)]
    assert await store.claim_jobs(due + 29, 30, 10) == []  # leased
    assert await store.next_job_wake() == due + 30  # the lease's end
    # its process died: once the lease ends another claim takes the run, with a new token
    clock.advance(3600 + 40)
    second = await store.claim_jobs(due + 40, 30, 10)
    assert [lease.due for lease in second] == [due] and second[0].token != first[0].token
    outcome = JobOutcome("job_alice", second[0].token, due, "sent", "", (), due + 86400,
                         deliver=True)
    reply = TurnCommit(ref=TG_REF, billed_user="alice",
                       messages=[NewMessage("assistant", "Stand up!", 3)], charges=[], job=outcome)
    # the first claim's late result writes nothing, neither as a turn nor as a skip, even
    # before the claim that took it over commits
    with pytest.raises(Conflict):
        await store.commit_turn(dataclasses.replace(
            reply, job=dataclasses.replace(outcome, token=first[0].token)))
    assert not await store.finish_job(dataclasses.replace(outcome, token=first[0].token,
                                                          status="skipped"))
    await store.commit_turn(reply)
    with pytest.raises(Conflict):  # nor does the same claim twice
        await store.commit_turn(reply)
    _, messages = await store.rolling_memory("telegram:42")
    assert [m.content for m in messages] == ["Stand up!"]
    deliveries = await store.deliveries("telegram:42")
    assert [(d.message_id, d.address, d.max_chars, d.text) for d in deliveries] == [
        (outcome.message_id, '{"chat_id": 42}', 99, "Stand up!")]
    ran = await store.get_job("job_alice")
    assert ran is not None and (ran.next_run, ran.runs, ran.last_status) == (
        due + 86400, 1, "sent")
    assert await store.next_job_wake() == due + 86400
    # a late run skipped records itself and every time it missed
    (late,) = await store.claim_jobs(due + 3 * 86400, 30, 10)
    assert await store.finish_job(JobOutcome(
        "job_alice", late.token, late.due, "skipped", "missed", (due + 2 * 86400,),
        due + 4 * 86400))
    runs = await store.job_runs("job_alice", 10)
    assert [(r.due, r.status) for r in runs] == [
        (due + 2 * 86400, "missed"), (due + 86400, "skipped"), (due, "sent")]
    skipped = await store.get_job("job_alice")
    assert skipped is not None and (skipped.runs, skipped.misses) == (1, 2)
    # a one-time job's last run leaves it done, and nothing to wake for
    (once,) = await store.claim_jobs(due + 4 * 86400, 30, 10)
    assert await store.finish_job(JobOutcome("job_alice", once.token, once.due, "skipped"))
    done = await store.get_job("job_alice")
    assert done is not None and (done.state, done.next_run) == ("done", None)
    assert await store.next_job_wake() is None


@covers("claim_jobs")
async def test_processes_claiming_at_once_share_the_due_runs(store: Store,
                                                             clock: Clock) -> None:
    await users(store)
    for number in range(60):
        await store.create_job(job("bob", job_id=f"job_{number:02}", next_run=100.0), 100)
    other = await another_process(store, clock) or store
    try:
        claims = await asyncio.gather(*(process.claim_jobs(200.0, 60, 7)
                                        for process in [store, other] * 6))
        claimed = [lease.job.id for leases in claims for lease in leases]
        assert len(claimed) == len(set(claimed)) == 60
    finally:
        if other is not store:
            await other.close()


# --- administration and budgets ----------------------------------------------------------
def by(actor: str, action: str, target: str | None, source: str = "127.0.0.1",
       **details: object) -> AuditEntry:
    return AuditEntry(actor, action, target, dict(details), source)


@covers("set_flag", "set_daily_credits", "find_users", "audit_log", "user_for_token",
        "access_epoch")
async def test_roles_blocks_and_daily_caps_are_changed_with_their_audit_rows(
        store: Store, clock: Clock) -> None:
    await users(store)
    await store.create_user("carol", "free", 0, 0, "2026-01")
    await store.replace_token("bob", "bob-hash")
    epoch = await store.access_epoch()
    promoted = by("root", "user.promote", "alice", "cli")
    alice = await store.set_flag("alice", "admin", True, promoted)
    assert alice.admin and not alice.blocked
    assert await store.access_epoch() != epoch  # token caches forget what they hold
    bob = await store.set_flag("bob", "blocked", True, by("alice", "user.block", "bob"))
    assert bob.blocked and not bob.admin
    found = await store.user_for_token("bob-hash")
    assert found is not None and found.blocked  # authentication sees the block
    with pytest.raises(NotFound):
        await store.set_flag("nobody", "blocked", True, by("alice", "user.block", "nobody"))
    with pytest.raises(ValueError):
        await store.set_flag("bob", "plan", True, by("alice", "user.plan", "bob"))
    clock.advance(60)
    capped = await store.set_daily_credits("carol", 50, by("alice", "budget.set", "carol",
                                                           dailyCredits=50))
    assert capped.daily_credits == 50
    assert (await store.set_daily_credits("carol", None, by(
        "alice", "budget.set", "carol", dailyCredits=None))).daily_credits is None

    async def ids(query: UserQuery) -> list[str]:
        return [user.user_id for user in await store.find_users(query)]
    assert await ids(UserQuery(10)) == ["alice", "bob", "carol"]
    assert await ids(UserQuery(10, search="O")) == ["bob", "carol"]  # any case
    assert await ids(UserQuery(1, after="alice")) == ["bob"]
    assert await ids(UserQuery(10, blocked=True)) == ["bob"]
    assert await ids(UserQuery(10, admin=True)) == ["alice"]
    assert await ids(UserQuery(10, admin=False, plan="free")) == ["carol"]

    log = await store.audit_log(AuditQuery(10))  # newest first; nothing of what was refused
    assert [(r.entry.action, r.entry.target) for r in log] == [
        ("budget.set", "carol"), ("budget.set", "carol"), ("user.block", "bob"),
        ("user.promote", "alice")]
    assert log[-1].entry == promoted and log[0].entry.details == {"dailyCredits": None}
    assert log[0].at == iso_utc(clock()) and log[-1].at == iso_utc(clock() - 60)
    assert [r.entry.action for r in await store.audit_log(AuditQuery(10, actor="root"))] == [
        "user.promote"]
    assert [r.entry.target for r in await store.audit_log(
        AuditQuery(10, action="user.block"))] == ["bob"]
    assert await store.audit_log(AuditQuery(2, before=log[1].id)) == log[2:]
    assert await store.audit_log(AuditQuery(10, since=iso_utc(clock()))) == log[:2]


@covers("append_audit", "audit_log")
async def test_the_audit_log_is_append_only(store: Store) -> None:
    await store.append_audit(by("root", "audit.export", None, "cli", rows=0))
    [record] = await store.audit_log(AuditQuery(5))
    assert (record.entry.target, record.entry.details) == (None, {"rows": 0})
    # no method changes or removes a row...
    assert sorted(name for name in store_methods() if "audit" in name) == [
        "append_audit", "audit_log"]
    # ...and the schema refuses a change made behind the store's back
    statements = ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log")
    if isinstance(store, SQLiteStore):
        conn = sqlite3.connect(store.path)
        try:
            for statement in statements:
                with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                    conn.execute(statement)
        finally:
            conn.close()
    else:
        assert isinstance(store, PostgresStore)
        connection = await asyncpg.connect(store.url)
        try:
            for statement in statements:
                with pytest.raises(asyncpg.exceptions.RaiseError, match="append-only"):
                    await connection.execute(statement)
        finally:
            await connection.close()
    assert await store.audit_log(AuditQuery(5)) == [record]


def spend(calls: int, credits: int, minutes: int = 0, tokens: tuple[int, int] = (0, 0)
          ) -> Spend:
    return Spend(calls, tokens[0], tokens[1], credits, minutes)


def report_of(report: UsageReport) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {(row.bucket, row.group): (row.spend.calls, row.spend.credits, row.spend.minutes)
            for row in report.rows}


async def seed_usage(store: Store, clock: Clock) -> None:
    """Two days of alice's and bob's spending, every way it is booked: turns on two channels
    with a tool round, a turn's calls recorded without it, browser minutes, a summary; a
    grant (not usage). Starts at 2026-01-01T00:00Z."""
    await users(store)  # alice: free, bob: pro
    tg = ThreadRef("alice", "telegram:1", "telegram:1", "telegram")
    await store.commit_turn(TurnCommit(REF, "alice", [NewMessage("user", "q", 1),
                                                      NewMessage("assistant", "a", 1)],
                                       [Charge("chat", "m1", 10, 5, 3),
                                        Charge("tool_round", "m1", 20, 5, 4, tool="calc")]))
    clock.advance(3600)  # 01:00
    await store.commit_turn(dataclasses.replace(turn(tg, "q", "a", credits=7), charges=[
        Charge("chat", "m2", 10, 5, 7)]))
    await store.commit_turn(turn(BOB_REF, "q", "a", credits=2))  # model m
    await store.record_charges("alice", "alice--t1", [Charge("chat", "m2", 10, 5, 5)])
    assert await store.take_minutes("alice", "telegram:1", 3) == 3
    ids = [m.id for m in (await store.rolling_memory("alice--t1"))[1]]
    assert await store.commit_summary(SummaryCommit("alice--t1", "alice", 0, "s", 1, ids[0],
                                                    Charge("summarize", "m1", 1, 1, 1)))
    await store.grant_credits("alice", 100)
    clock.advance(86_400)  # 2026-01-02T01:00
    await store.commit_turn(turn(BOB_REF, "q", "a", credits=6))


@covers("usage_report", "commit_turn", "commit_summary", "record_charges", "take_minutes")
async def test_the_usage_rollups_hold_what_the_ledger_holds(store: Store, clock: Clock) -> None:
    await seed_usage(store, clock)

    async def report(group_by: str, bucket: str = "day", top: int = 10) -> UsageReport:
        start, end = ("2026-01-01", "2026-01-03") if bucket == "day" else (
            "2026-01-01T00", "2026-01-03T00")
        return await store.usage_report(UsageQuery(start, end, bucket, group_by, top))

    by_model = await report("model")
    assert report_of(by_model) == {
        ("2026-01-01", "m1"): (3, 8, 0), ("2026-01-01", "m2"): (2, 12, 0),
        ("2026-01-01", "m"): (1, 2, 0), ("2026-01-01", ""): (0, 0, 3),
        ("2026-01-02", "m"): (1, 6, 0)}
    assert by_model.total == spend(7, 28, 3, (71, 31))
    assert report_of(await report("channel")) == {
        ("2026-01-01", "dashboard"): (5, 15, 0), ("2026-01-01", "telegram"): (1, 7, 3),
        ("2026-01-02", "dashboard"): (1, 6, 0)}
    assert report_of(await report("tool")) == {
        ("2026-01-01", ""): (5, 18, 0), ("2026-01-01", "calc"): (1, 4, 0),
        ("2026-01-01", "browser"): (0, 0, 3), ("2026-01-02", ""): (1, 6, 0)}
    assert report_of(await report("plan")) == {
        ("2026-01-01", "free"): (5, 20, 3), ("2026-01-01", "pro"): (1, 2, 0),
        ("2026-01-02", "pro"): (1, 6, 0)}
    assert report_of(await report("plan", "hour")) == {
        ("2026-01-01T00", "free"): (2, 7, 0), ("2026-01-01T01", "free"): (3, 13, 3),
        ("2026-01-01T01", "pro"): (1, 2, 0), ("2026-01-02T01", "pro"): (1, 6, 0)}
    by_user = await report("user", top=1)
    assert [(user, s.credits, s.minutes) for user, s in by_user.spenders] == [("alice", 20, 3)]
    assert report_of(by_user) == {("2026-01-01", "alice"): (5, 20, 3)}
    both = await report("user")
    assert [(user, s.credits) for user, s in both.spenders] == [("alice", 20), ("bob", 8)]
    narrow = await store.usage_report(UsageQuery("2026-01-02", "2026-01-03", "day", "plan", 5))
    assert narrow.total.credits == 6 and [u for u, _ in narrow.spenders] == ["bob"]
    # a deleted account's own rows go with it; the totals keep its spending, nameless
    assert await store.delete_user("bob")
    after = await report("plan")
    assert after.total == by_model.total and [u for u, _ in after.spenders] == ["alice"]


@covers("usage_report", "delete_user", "set_plan", "commit_turn")
async def test_the_rollups_count_each_booking_once_at_the_plan_it_was_booked_on(
        store: Store, clock: Clock) -> None:
    """No report in between: SQLite folds the ledger into the rollups later, so an account
    deleted with the newest ledger rows, and a plan changed after a booking, must not change
    what the report counts (nor miss a booking that reuses a deleted row's id)."""
    await users(store)  # alice: free, bob: pro
    await store.commit_turn(turn(REF, "q", "a", credits=5))
    await store.set_plan("alice", "pro", 1000, 30)
    await store.commit_turn(turn(REF, "q", "a", credits=7))
    await store.commit_turn(turn(BOB_REF, "q", "a", credits=11))  # the newest ledger rows
    assert await store.delete_user("bob")
    await store.commit_turn(turn(REF, "q", "a", credits=13))
    report = await store.usage_report(UsageQuery("2026-01-01", "2026-01-02", "day", "plan", 5))
    assert report_of(report) == {("2026-01-01", "free"): (1, 5, 0),
                                 ("2026-01-01", "pro"): (3, 31, 0)}
    assert [(user, s.credits) for user, s in report.spenders] == [("alice", 25)]
    await store.commit_turn(turn(REF, "q", "a", credits=17))
    again = await store.usage_report(UsageQuery("2026-01-01", "2026-01-02", "day", "plan", 5))
    assert again.total.credits == 53 and again.spenders[0][1].credits == 42


@covers("health", "inbox_add", "answer_inbox", "delivery_finished", "emit",
        "webhook_attempts", "create_job", "set_job_state")
async def test_health_counts_the_queues_failing_endpoints_and_jobs(store: Store,
                                                                   clock: Clock) -> None:
    await users(store)
    for n in range(3):
        await store.inbox_add(InboxEntry("telegram", f"m{n}", "telegram:1", "{}", 10, b"x"))
    await store.answer_inbox("telegram", "m0", "first")
    clock.advance(5)
    await store.answer_inbox("telegram", "m1", "second")
    await store.inbox_add(InboxEntry("slack", "s1", "slack:1", "{}", 10, b"x"))
    await store.answer_inbox("slack", "s1", "gone")
    await store.delivery_finished("slack", "s1", "channel_not_found")
    await store.create_webhook(dataclasses.replace(
        webhook("alice", ("thread.cleared",), "wh_a"), url="https://hooks.example.com/x?k=1"))
    await store.create_webhook(webhook("bob", ("thread.cleared",), "wh_b"))
    told: list[WebhookDelivery] = []
    store.webhooks_queued = told.extend
    for user in ("alice", "alice", "bob"):
        await store.emit(user, [webhook_events.thread_cleared(REF)])
    first, second, healthy = told
    await store.webhook_attempts([
        WebhookAttempt(first.id, "failed", 8, 500, 0.0, "HTTP 500"),
        WebhookAttempt(second.id, "pending", 2, None, clock() + 60, "timed out"),
        WebhookAttempt(healthy.id, "delivered", 1, 204, 0.0, None)])
    await store.create_job(job("alice"), 10)
    await store.create_job(job("bob"), 10)
    await store.set_job_state("bob", "job_bob", "paused", None)

    health = await store.health(clock() - 3600)
    assert [(c.channel, c.inbox_pending, c.outbox_pending, c.failed)
            for c in health.channels] == [("slack", 0, 0, 1), ("telegram", 1, 2, 0)]
    assert health.channels[1].oldest_pending == pytest.approx(clock() - 5)
    [failing] = health.webhooks
    assert (failing.webhook_id, failing.user_id, failing.retrying, failing.failed) == (
        "wh_a", "alice", 1, 1)
    assert (failing.last_status, failing.last_error) == (None, "timed out")  # the latest
    assert health.jobs == {"active": 1, "paused": 1}
    later = await store.health(clock() + 1)  # the failure is older than that
    assert [(w.retrying, w.failed) for w in later.webhooks] == [(1, 0)]


@covers("commit_turn", "get_user", "webhook_deliveries")
async def test_credits_low_is_told_once_a_day_near_the_daily_cap(store: Store,
                                                                 clock: Clock) -> None:
    await users(store)  # alice: 1,000 credits
    await store.create_webhook(webhook("alice"))

    def spend_today(credits: int, thread: str = "t1") -> TurnCommit:
        return dataclasses.replace(turn(alice_ref(thread), "q", "a", credits=credits),
                                   daily_cap=100)

    async def told() -> list[dict[str, Any]]:
        deliveries = await store.webhook_deliveries("alice", "wh_alice", 100)
        return [json.loads(d.body)["data"] for d in reversed(deliveries)]

    for credits in (50, 29):
        await store.commit_turn(spend_today(credits))  # 79: under 80% of 100
    assert await told() == []
    await store.commit_turn(spend_today(1))  # 80: reached
    await store.commit_turn(spend_today(30))  # 110: past the cap (one turn may overshoot)
    [data] = await told()
    assert data == {"reason": "daily_cap", "spentToday": 80, "threshold": 80,
                    "dailyCredits": 100, "day": "2026-01-01",
                    "resetsAt": "2026-01-02T00:00:00Z"}
    [last] = await store.webhook_deliveries("alice", "wh_alice", 1)
    assert last.body == webhook_events.body(webhook_events.CREDITS_LOW, iso_utc(clock()), data)
    alice = await store.get_user("alice")
    assert alice is not None and (alice.spent_day, alice.spent_today) == ("2026-01-01", 110)
    clock.advance(86_400)  # a new day: counted afresh, told again
    await store.commit_turn(spend_today(85))
    assert [d["spentToday"] for d in await told()] == [80, 85]
    alice = await store.get_user("alice")
    assert alice is not None and (alice.spent_day, alice.spent_today) == ("2026-01-02", 85)
    assert alice.active_at == iso_utc(clock())


@covers("load_turn", "get_user", "set_daily_credits")
async def test_concurrent_turns_overshoot_the_daily_cap_by_one_call_at_most(
        store: Store, clock: Clock) -> None:
    """As the balance's: many turns of one user at once, with tool rounds, half through
    another process on PostgreSQL; the day's spending never passes the cap by a call's worst
    case, refusals say it is the daily cap, and the next day has the whole allowance again."""
    settings = settings_with()
    most = worst_case(settings, settings.max_context, settings.llm_max_tokens)
    cap = 12 * most + 5
    await store.create_user("alice", "team", 10**9, 0, "2026-01")
    await store.set_daily_credits("alice", cap, by("root", "budget.set", "alice", "cli"))
    other = await another_process(store, clock)
    stores = [store] if other is None else [store, other]
    quotas = [quotas_for(s, settings, clock) for s in stores]
    rng = random.Random(11)
    capped: list[DailyCapReached] = []

    async def pause() -> None:
        await asyncio.sleep(rng.uniform(0, 0.004))

    async def turn_after_turn(worker: int) -> None:
        for n in range(5):
            which = (worker + n) % len(stores)
            try:
                await run_turn(stores[which], quotas[which], settings,
                               alice_ref(f"w{worker}-{n}"),
                               [settings.max_context] * (2 + (worker + n) % 2), pause)
            except DailyCapReached as exc:
                capped.append(exc)
            except CreditsBusy:
                pass
            await pause()

    try:
        await asyncio.gather(*(turn_after_turn(worker) for worker in range(12)))
    finally:
        if other is not None:
            await other.close()
    alice = await store.get_user("alice")
    assert alice is not None and alice.spent_day == "2026-01-01"
    assert cap - most < alice.spent_today < cap + most, f"spent {alice.spent_today} of {cap}"
    assert alice.credits == 10**9 - alice.spent_today  # the balance itself was never short
    assert capped and capped[0].resets_at == "2026-01-02T00:00:00Z"
    clock.advance(86_400)
    assert await run_turn(store, quotas[0], settings, alice_ref("next-day"),
                          [settings.max_context], _nothing) > 0


@covers("compact_usage", "usage_report")
async def test_compacting_the_rollups_keeps_every_figure(store: Store, clock: Clock) -> None:
    await seed_usage(store, clock)
    query = UsageQuery("2026-01-01T00", "2026-01-03T00", "hour", "channel", 10)
    before = await store.usage_report(query)
    if isinstance(store, PostgresStore):  # the hours' rows are in their accounts' shards
        connection = await asyncpg.connect(store.url)
        try:
            sharded = "SELECT count(*) FROM usage_hours WHERE shard <> 0"
            assert await connection.fetchval(sharded) > 0
            assert await store.compact_usage("2026-01-01T00", "2026-01-03T00") > 0
            assert await connection.fetchval(sharded) == 0
        finally:
            await connection.close()
    else:
        assert await store.compact_usage("2026-01-01T00", "2026-01-03T00") == 0
    assert await store.usage_report(query) == before
    assert await store.compact_usage("2026-01-01T00", "2026-01-03T00") == 0  # done already
