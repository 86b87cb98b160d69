"""The embedded SQLite backend of :class:`gateway.store.Store` (the ``sqlite3`` module, WAL).

Writes: each public method is one atomic function, however many statements it needs, and
concurrent writes share one COMMIT (:class:`_GroupCommit`). They run on the event loop's thread
while SQLite's write lock is free, otherwise (and when they may touch many rows) on the store's
worker thread (:class:`~gateway.store.worker.WorkerThread`). Reads: small indexed reads run
inline on a read-only connection of the event loop's thread (a WAL snapshot), which costs less
than a hand-off; a turn thus makes one read and one write, and no thread hand-off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from gateway.base.errors import BadRequest, Conflict, GatewayError, NotFound
from gateway.base.files import private_dir, private_file
from gateway.base.locks import Alone
from gateway.base.times import epoch_of, iso_utc
from gateway.store import events as webhook_events
from gateway.store import policy, usage
from gateway.store.columns import (
    DELIVERY_COLUMNS,
    THREAD_COLUMNS,
    USER_COLUMNS,
    WEBHOOK_COLUMNS,
    WEBHOOK_DELIVERY_COLUMNS,
    prefixed,
    title_columns,
    titled,
    user_of,
)
from gateway.store.in_use import FolderLock, try_lock
from gateway.store.migrations import MIGRATIONS
from gateway.store.records import (
    AuditEntry,
    Billing,
    ChannelMessage,
    Charge,
    Claim,
    Delivery,
    DisplayMessage,
    DueDelivery,
    Earlier,
    ExpiredThread,
    InboxEntry,
    Intake,
    LedgerEntry,
    Moment,
    SecretRecord,
    StoredMessage,
    SummaryCommit,
    Thread,
    ThreadHit,
    ThreadPage,
    ThreadRef,
    TurnCommit,
    TurnState,
    TurnWritten,
    User,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
    WebSession,
)
from gateway.store.sqlite_admin import SQLiteAdmin, append_audit
from gateway.store.sqlite_jobs import SQLiteJobs, finish_in
from gateway.store.sqlite_rollups import FOLD_BATCH, fold_usage, forget_folded
from gateway.store.worker import WorkerThread

log = logging.getLogger(__name__)
T = TypeVar("T")



def _user(row: sqlite3.Row | tuple[Any, ...]) -> User:
    return user_of(row)


def _thread(row: sqlite3.Row | tuple[Any, ...]) -> Thread:
    user_id, thread_id, key, channel, summary, tokens, version, created, updated = row
    return Thread(ThreadRef(user_id, thread_id, key, channel), summary, tokens, version,
                  created, updated)


def _titled(row: sqlite3.Row | tuple[Any, ...]) -> Thread:
    """A thread from ``THREAD_COLUMNS`` and then its :func:`title_columns`."""
    return titled(_thread(row[:9]), row[9], row[10])


def _fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching text that holds a word starting with each of ``terms`` (letters
    and digits only: nothing in them is FTS5 syntax)."""
    return " ".join(f'"{term}"*' for term in terms)


# A page of the user's threads whose title, or one of whose display messages, holds every
# term, newest first from the cursor (?3, ?4), each with its newest matching message. The
# messages come from the full-text index (all users' matches, narrowed to the user's threads).
_SEARCH = f"""
WITH hit (thread, message) AS (
    SELECT d.thread, max(d.id) FROM display_search s JOIN display_messages d ON d.id = s.rowid
    WHERE display_search MATCH ?1 AND d.thread IN (SELECT id FROM threads WHERE user_id = ?2)
    GROUP BY d.thread)
SELECT t.id, {THREAD_COLUMNS}, {title_columns("t")}, h.message
FROM threads t LEFT JOIN hit h ON h.thread = t.id
WHERE t.user_id = ?2 AND (t.updated_at, t.id) < (?3, ?4)
  AND (h.message IS NOT NULL
       OR t.id IN (SELECT rowid FROM title_search WHERE title_search MATCH ?1))
ORDER BY t.updated_at DESC, t.id DESC LIMIT ?5"""


def _thread_pk(conn: sqlite3.Connection, session_key: str) -> int | None:
    row = conn.execute("SELECT id FROM threads WHERE session_key = ?", (session_key,)).fetchone()
    return row[0] if row else None


def _owned_pk(conn: sqlite3.Connection, ref: ThreadRef) -> int | None:
    """The thread's row id, None if it does not exist; NotFound if someone else owns it."""
    row = conn.execute("SELECT id, user_id FROM threads WHERE session_key = ?",
                       (ref.session_key,)).fetchone()
    if row is None:
        return None
    if row[1] != ref.user_id:
        raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
    return int(row[0])


# Display messages written past the search index's watermark before they are indexed in one
# transaction (besides before every search).
SEARCH_INDEX_BATCH = 512


def _index_search(conn: sqlite3.Connection) -> None:
    """Index the display messages past the watermark for search and move it to the newest,
    in the open transaction (SQLite migration 16)."""
    conn.execute("INSERT INTO display_search (rowid, content) SELECT id, content"
                 " FROM display_messages WHERE id > (SELECT through FROM display_search_indexed)")
    conn.execute("UPDATE display_search_indexed"
                 " SET through = (SELECT coalesce(max(id), 0) FROM display_messages)")


def _drop_last_exchange(conn: sqlite3.Connection, pk: int,
                        message_ids: tuple[int, ...]) -> None:
    """Delete the thread's last exchange (a turn replaces it): its rolling messages by id and
    as many of the newest display messages; Conflict if they are not there any more."""
    marks = ", ".join("?" * len(message_ids))
    dropped = conn.execute(f"DELETE FROM messages WHERE thread = ? AND id IN ({marks})",
                           (pk, *message_ids)).rowcount
    if dropped != len(message_ids):
        raise Conflict("the thread's last exchange changed meanwhile", code="nothing_to_replace")
    conn.execute("DELETE FROM display_messages WHERE id IN (SELECT id FROM display_messages"
                 " WHERE thread = ? ORDER BY id DESC LIMIT ?)", (pk, len(message_ids)))


def _touch_thread(conn: sqlite3.Connection, ref: ThreadRef, now: str) -> int:
    """Create the thread or mark it updated, in one statement; NotFound if someone else's."""
    pk, owner = conn.execute(
        "INSERT INTO threads (session_key, user_id, thread_id, channel, created_at, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET"
        " updated_at = excluded.updated_at RETURNING id, user_id",
        (ref.session_key, ref.user_id, ref.thread_id, ref.channel, now, now),
    ).fetchone()
    if owner != ref.user_id:
        raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
    return int(pk)


def _pinned(conn: sqlite3.Connection, pk: int | None) -> dict[str, str]:
    if pk is None:
        return {}
    rows = conn.execute("SELECT key, value FROM pinned WHERE thread = ? ORDER BY key", (pk,))
    return dict(rows.fetchall())


def _charge(conn: sqlite3.Connection, user_id: str, thread_key: str | None, charge: Charge,
            now: str) -> int:
    """A ledger row and the balance it changes (a grant: no usage, no spending today); the
    credits left."""
    conn.execute(
        "INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
        " completion_tokens, credits, minutes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (user_id, thread_key, charge.kind, charge.model, charge.prompt_tokens,
         charge.completion_tokens, charge.credits, charge.minutes, now),
    )
    row = conn.execute(
        "UPDATE users SET credits = credits - ?, browser_minutes = browser_minutes - ?"
        " WHERE user_id = ? RETURNING credits", (charge.credits, charge.minutes, user_id)
    ).fetchone()
    return int(row[0]) if row else 0


# A ledger row of usage: with what the rollups group it by (gateway.store.sqlite_rollups).
_LEDGER_ROW = ("INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
               " completion_tokens, credits, minutes, created_at, plan, channel, tool)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
# What charges change on the account: its balances, what it spent today (counted afresh on a
# new day) and when it was last active; the plan is its ledger rows'.
_SPEND = ("UPDATE users SET credits = credits - ?1, browser_minutes = browser_minutes - ?2,"
          " spent_today = CASE WHEN spent_day = ?3 THEN spent_today ELSE 0 END + ?1,"
          " spent_day = ?3, active_at = ?4 WHERE user_id = ?5"
          " RETURNING credits, plan, spent_today")


def _book(conn: sqlite3.Connection, billing: Billing, at: Moment) -> tuple[int, int] | None:
    """Book usage: the account's balances and spending today (one update), and the ledger
    rows, which the usage rollups are folded from later (:mod:`~.sqlite_rollups`). The
    balance and today's spending after, or None if there was nothing to book (or no
    account)."""
    charges = billing.charges
    if not charges:
        return None
    spend = usage.spend_of(charges)
    row = conn.execute(_SPEND, (spend.credits, spend.minutes, at.iso[:10], at.iso,
                                billing.user_id)).fetchone()
    if row is None:
        return None
    balance, plan, spent_today = row
    channel = billing.channel
    if channel is None:
        found = conn.execute("SELECT channel FROM threads WHERE session_key = ?",
                             (billing.thread_key,)).fetchone()
        channel = found[0] if found else ""
    rows = [(billing.user_id, billing.thread_key, c.kind, c.model, c.prompt_tokens,
             c.completion_tokens, c.credits, c.minutes, at.iso, plan, channel, c.tool)
            for c in charges]
    if len(rows) == 1:  # most turns: one call (executemany costs more for one row)
        conn.execute(_LEDGER_ROW, rows[0])
    else:
        conn.executemany(_LEDGER_ROW, rows)
    return int(balance), int(spent_today)


def _charge_all(conn: sqlite3.Connection, billing: Billing,
                at: Moment) -> list[WebhookDelivery]:
    """Book the charges (:func:`_book`); ``credits.low`` queued (and returned) if they take
    the balance under the billing's threshold (:func:`policy.fell_under`), or today's
    spending to 80% of the daily cap (:func:`policy.reached`)."""
    booked = _book(conn, billing, at)
    if booked is None:
        return []
    balance, spent_today = booked
    spent = sum(charge.credits for charge in billing.charges)
    low, cap = billing.low_credits, billing.daily_cap
    events = []
    if low is not None and policy.fell_under(low, balance, spent):
        events.append(webhook_events.credits_low(balance, low))
    if cap is not None and policy.reached(policy.daily_low_threshold(cap), spent_today, spent):
        events.append(webhook_events.daily_credits_low(spent_today, cap, at.iso[:10]))
    return _emit(conn, billing.user_id, events, at)


def _webhook(row: sqlite3.Row | tuple[Any, ...]) -> Webhook:
    return Webhook(row[0], row[1], row[2], tuple(json.loads(row[3])), row[4], row[5])


def _emit(conn: sqlite3.Connection, user_id: str, events: Sequence[WebhookEvent],
          at: Moment, only: str | None = None) -> list[WebhookDelivery]:
    """Queue ``events`` in the webhook outbox for each of the user's endpoints subscribed to
    them (``only``: for that endpoint alone, whatever it subscribed to). A user without
    endpoints costs one indexed read."""
    if not events:
        return []
    endpoints = conn.execute("SELECT id, events FROM webhooks WHERE user_id = ?",
                             (user_id,)).fetchall()
    rows = []
    for event in events:
        targets = [webhook_id for webhook_id, subscribed in endpoints
                   if webhook_id == only or (only is None and f'"{event.type}"' in subscribed)]
        if targets:
            body = webhook_events.body(event.type, at.iso, event.data)
            rows += [(webhook_events.new_message_id(), webhook_id, user_id, event.type, body,
                      at.epoch, at.epoch) for webhook_id in targets]
    if not rows:
        return []
    # One statement for them all; rowids are given in the order of the VALUES.
    ids = sorted(row_id for (row_id,) in conn.execute(
        "INSERT INTO webhook_deliveries (message_id, webhook, user_id, event, body, state,"
        " next_attempt, created) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?, 'pending', ?, ?)"] * len(rows)) + " RETURNING id",
        [value for row in rows for value in row]).fetchall())
    return [WebhookDelivery(row_id, message_id, webhook_id, event_type, body, "pending", 0,
                            None, due, created, None)
            for row_id, (message_id, webhook_id, _, event_type, body, due, created)
            in zip(ids, rows, strict=True)]


def _thread_owner(conn: sqlite3.Connection, session_key: str) -> tuple[int, str] | None:
    row = conn.execute("SELECT id, user_id FROM threads WHERE session_key = ?",
                       (session_key,)).fetchone()
    return (row[0], row[1]) if row else None


def _get_user(conn: sqlite3.Connection, user_id: str) -> User:
    row = conn.execute(f"SELECT {USER_COLUMNS} FROM users WHERE user_id = ?",
                       (user_id,)).fetchone()
    if row is None:
        raise NotFound(f"no user {user_id!r}", code="user_not_found")
    return _user(row)


def _grant(conn: sqlite3.Connection, user_id: str, grant: Charge | None, now: str) -> None:
    """Book ``grant`` (from :func:`policy.top_up`: None when nothing is granted)."""
    if grant is not None:
        _charge(conn, user_id, None, grant, now)


# Rows the event loop's connection changes between WAL checkpoints (a turn changes about 7,
# so a checkpoint every ~250 turns; the WAL stays under ~15 MB). Each checkpoint copies the
# hot pages back and syncs: every 500 rows, that was 3-5% of a turn's CPU.
CHECKPOINT_ROWS = 2000
# Both writing connections (the worker's and the event loop's) are set up alike.
_WRITER_PRAGMAS = ("PRAGMA synchronous = NORMAL", "PRAGMA foreign_keys = ON",
                   "PRAGMA cache_size = -16000")  # 16 MB of pages kept hot


def _answer_inbox(conn: sqlite3.Connection, inbound: ChannelMessage, reply: str,
                  at: Moment, trace: str | None) -> bool:
    """Mark a pending inbox message answered and put its reply in the outbox (with the
    ``trace`` context of what wrote it), together; False if the message is not pending
    (unknown, or answered already)."""
    row = conn.execute(
        "UPDATE inbox SET state = 'done', payload = NULL"
        " WHERE channel = ? AND message_id = ? AND state = 'pending'"
        " RETURNING conversation, address, max_chars", inbound).fetchone()
    if row is None:
        return False
    conn.execute(
        "INSERT INTO outbox (channel, message_id, conversation, address, text, max_chars, state,"
        " next_attempt, created, updated_at, trace)"
        " VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
        (*inbound, row[0], row[1], reply, row[2], at.epoch, at.epoch, at.iso, trace))
    return True


def _queue_own(conn: sqlite3.Connection, entry: InboxEntry, text: str, at: Moment) -> bool:
    """Put a message that answers no inbound one in the outbox (with ``entry.trace``),
    recorded in the inbox under ``entry``'s channel and id so that it is queued once; False
    if that id was taken."""
    taken = conn.execute(
        "INSERT INTO inbox (channel, message_id, conversation, state, address, max_chars,"
        " received_at) VALUES (?, ?, ?, 'pending', ?, ?, ?)"
        " ON CONFLICT (channel, message_id) DO NOTHING RETURNING id",
        (entry.channel, entry.message_id, entry.conversation, entry.address,
         entry.max_chars, at.iso)).fetchone()
    return taken is not None and _answer_inbox(
        conn, ChannelMessage(entry.channel, entry.message_id), text, at, entry.trace)


class _GroupCommit:
    """Runs store writes in transactions, many operations per transaction when busy.

    Operations queue up until the event loop runs the flush (or while a batch is away on the
    worker thread); the next batch takes them all into one transaction, each inside its own
    SAVEPOINT, so a failing operation rolls back alone and the others commit together.

    A batch runs right here, on the event loop's thread, on a connection of its own that
    never waits for SQLite's write lock: a turn's write takes tens of microseconds, less than
    handing it to a thread and back (the hand-off, not SQLite, was a fifth of a turn's CPU).
    When the lock is held elsewhere (another process, or a long write on the worker) the
    batch goes to the worker thread, which waits for it (``busy_timeout``), and so do
    operations submitted ``off_loop`` (those that may touch many rows). This connection never
    checkpoints the WAL itself (that copies megabytes and syncs): once it has changed
    ``CHECKPOINT_ROWS`` rows since the last checkpoint, the next batch goes to the worker and
    a checkpoint follows it there, while later writes wait in the queue, so the next write
    starts the WAL over (like SQLite's own automatic checkpoint, off the event loop).
    """

    def __init__(self, worker: WorkerThread, inline: sqlite3.Connection) -> None:
        self._worker = worker
        self._inline = inline
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._flushing = False
        self._task: asyncio.Task[None] | None = None
        self._checkpointed = 0  # the event loop connection's total_changes at the last one

    @property
    def connection(self) -> sqlite3.Connection:
        """The event loop's writing connection (free whenever the event loop runs: a batch
        runs on it from BEGIN to COMMIT without yielding)."""
        return self._inline

    async def submit(self, fn: Callable[[sqlite3.Connection], T], off_loop: bool = False) -> T:
        """Queue ``fn`` and wait for its result (or its exception); ``off_loop``: run it on
        the worker thread, in a transaction of its own."""
        if off_loop:
            [(ok, value)] = await self._on_worker([fn])
            if ok:
                return cast(T, value)
            raise value
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append((fn, future))
        if not self._flushing:
            self._flushing = True
            self._task = loop.create_task(self._flush())
        return await future

    async def close(self) -> None:
        """After every queued operation has run, close the event loop's
        connection (the caller closes the worker's)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        self._inline.close()

    async def _on_worker(self, operations: list[Callable[[sqlite3.Connection], Any]],
                         checkpoint: bool = False) -> list[tuple[bool, Any]]:
        return await self._worker.call(_run_batch, operations, checkpoint)

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                operations = [fn for fn, _ in batch]
                checkpoint = self._inline.total_changes - self._checkpointed >= CHECKPOINT_ROWS
                try:
                    outcomes = None if checkpoint else _run_batch_now(self._inline, operations)
                    if outcomes is None:  # the write lock is held elsewhere: wait for it there
                        outcomes = await self._on_worker(operations, checkpoint)
                        if checkpoint:
                            self._checkpointed = self._inline.total_changes
                except BaseException as exc:
                    # The batch failed as a whole (its COMMIT, or we were cancelled while
                    # waiting, in which case the worker may still have committed it).
                    outcomes = [(False, exc)] * len(batch)
                for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._flushing = False

def _run_batch_now(conn: sqlite3.Connection, operations: list[Callable[[sqlite3.Connection], Any]],
                   ) -> list[tuple[bool, Any]] | None:
    """:func:`_run_batch` if the write lock is free this instant; None if it is not."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return None
        raise
    return _apply_batch(conn, operations)


def _run_batch(conn: sqlite3.Connection, operations: list[Callable[[sqlite3.Connection], Any]],
               checkpoint: bool = False) -> list[tuple[bool, Any]]:
    """One transaction of ``operations`` (waiting for the write lock: the worker thread),
    then, if asked, a checkpoint that lets the next write start the WAL over."""
    conn.execute("BEGIN IMMEDIATE")
    outcomes = _apply_batch(conn, operations)
    if checkpoint:
        try:
            conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except sqlite3.Error as exc:  # the batch is committed: a checkpoint can wait
            log.warning("WAL checkpoint failed: %s", exc)
    return outcomes


def _apply_batch(conn: sqlite3.Connection,
                 operations: list[Callable[[sqlite3.Connection], Any]],
                 ) -> list[tuple[bool, Any]]:
    """Run ``operations`` in the open transaction, each in a savepoint of its own (a lone one
    needs none: the transaction is its savepoint), and commit."""
    outcomes: list[tuple[bool, Any]] = []
    alone = len(operations) == 1
    try:
        for operation in operations:
            if not alone:
                conn.execute("SAVEPOINT op")
            try:
                value = operation(conn)
            except Exception as exc:
                conn.execute("ROLLBACK" if alone else "ROLLBACK TO op")
                if not alone:
                    conn.execute("RELEASE op")
                outcomes.append((False, exc))
            else:
                if not alone:
                    conn.execute("RELEASE op")
                outcomes.append((True, value))
        if conn.in_transaction:
            conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _read_on(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` in a read transaction of its own on ``conn``."""
    conn.execute("BEGIN")
    try:
        return fn(conn)
    finally:
        conn.execute("COMMIT")


def _revoked(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT revoked FROM access_revocations").fetchone()[0])


def _statements(script: str) -> list[str]:
    """The statements of a migration script, in order: split at each ``;`` that ends one (a
    trigger's body holds statements of its own)."""
    statements, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                statements.append(pending)
            pending = ""
    return statements


def _ignore(queued: list[WebhookDelivery]) -> None:
    """No dispatcher listens."""


class SQLiteStore(SQLiteJobs, SQLiteAdmin):
    """SQLite implementation of the Store protocol."""

    shared = False  # one process per database file

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._worker: WorkerThread | None = None
        self._group: _GroupCommit
        self._reader: sqlite3.Connection | None = None
        self._in_use: FolderLock | None = None  # tells `cloudybot migrate` the folder is live
        self._search_worker: WorkerThread | None = None
        self._search_opening = asyncio.Lock()  # two first searches at once open one thread
        self._unindexed = 0  # display messages this process wrote since it indexed for search
        self._unfolded = 0  # charges this process booked since it folded the usage rollups
        # Told of the webhook deliveries each commit queued (the gateway's dispatcher).
        self.webhooks_queued: Callable[[list[WebhookDelivery]], None] = _ignore

    def _now(self) -> str:
        return iso_utc(self.clock())

    def _moment(self) -> Moment:
        epoch = self.clock()
        return Moment(epoch, iso_utc(epoch))

    # --- plumbing ---------------------------------------------------------------
    async def open(self) -> None:
        """Open the database (WAL, foreign keys on) and apply pending migrations.

        The directory is 0700 and the database 0600 before SQLite opens it: SQLite gives its
        ``-wal`` and ``-shm`` files the database's mode. Files left by an older version are
        tightened here too. The data folder is marked as in use (:mod:`~gateway.store.in_use`)
        while the store is open; one a migration is copying is refused.
        """
        private_dir(self.path.parent)
        self._in_use = try_lock(self.path.parent, exclusive=False)
        if self._in_use is None:
            raise GatewayError(f"{self.path.parent} is being copied by `cloudybot migrate`; "
                               "try again once it has finished")
        private_file(self.path, create=True)
        for suffix in ("-wal", "-shm"):
            private_file(self.path.with_name(self.path.name + suffix))
        self._worker = WorkerThread(self.path)
        await self._worker.open(["PRAGMA journal_mode = WAL", *_WRITER_PRAGMAS,
                                 "PRAGMA busy_timeout = 5000"])
        inline = sqlite3.connect(self.path, isolation_level=None)
        for pragma in _WRITER_PRAGMAS:
            inline.execute(pragma)
        inline.execute("PRAGMA busy_timeout = 0")  # on the event loop: never wait for a lock
        inline.execute("PRAGMA wal_autocheckpoint = 0")  # the worker checkpoints
        self._group = _GroupCommit(self._worker, inline)
        await self._transaction(self._migrate, off_loop=True)
        self._reader = sqlite3.connect(self.path, isolation_level=None)
        self._reader.execute("PRAGMA query_only = ON")
        self._reader.execute("PRAGMA busy_timeout = 5000")

    async def close(self) -> None:
        """Close the database (after every queued operation has run)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._search_worker is not None:
            await self._search_worker.close()
            self._search_worker = None
        if self._worker is not None:
            await self._group.close()
            await self._worker.close()
            self._worker = None
        if self._in_use is not None:
            self._in_use.release()
            self._in_use = None

    async def _transaction(self, fn: Callable[[sqlite3.Connection], T],
                           off_loop: bool = False) -> T:
        """Run ``fn`` as one atomic unit of work (see :class:`_GroupCommit`); ``off_loop``
        for work that may touch many rows, so that it never holds up the event loop."""
        if self._worker is None:
            raise RuntimeError("store is not open")
        return await self._group.submit(fn, off_loop)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a small read right here, on the event loop's thread, on the connection that
        writes there.

        A thread hand-off costs more than these indexed reads (tens of µs), and the writer
        thread stays free for writes. The writing connection's page cache stays valid across
        its own commits, where a second connection drops its whole cache at every commit (a
        read after a write cost it twice as much). If that connection cannot read this instant
        (SQLite busy: another process recovering the WAL), the read-only connection waits for
        it. WAL gives the read a consistent snapshot of everything committed; every write a
        caller awaited is committed before its await returns.
        """
        return self._reading(lambda conn: _read_on(conn, fn))

    def _reading(self, read: Callable[[sqlite3.Connection], T]) -> T:
        """``read`` on the event loop's writing connection, or on the read-only one (which
        waits for a lock) if that one is busy."""
        reader = self._reader
        if reader is None:
            raise RuntimeError("store is not open")
        try:
            return read(self._group.connection)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
        return read(reader)

    async def _announcing(self, fn: Callable[[sqlite3.Connection, list[WebhookDelivery]], T],
                          off_loop: bool = False) -> T:
        """:meth:`_transaction` for work that may queue webhook deliveries (``fn`` adds them
        to the list it is given): once committed, ``webhooks_queued`` is told of them."""
        queued: list[WebhookDelivery] = []

        def run(conn: sqlite3.Connection) -> T:
            queued.clear()
            return fn(conn, queued)
        result = await self._transaction(run, off_loop)
        if queued:
            self.webhooks_queued(queued)
        return result

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")

    # --- accounts ---------------------------------------------------------------
    async def create_user(self, user_id: str, plan: str, credits: int,
                          browser_minutes: int, period: str = "") -> User:
        """Create an account; raise ``BadRequest`` if it exists."""
        user, created = await self.ensure_user(user_id, plan, credits, browser_minutes, period)
        if not created:
            raise BadRequest(f"user {user_id!r} already exists", code="user_exists")
        return user

    async def ensure_user(self, user_id: str, plan: str, credits: int,
                          browser_minutes: int, period: str = "") -> tuple[User, bool]:
        """Return the account, creating it first if needed; the flag says it was created."""
        def run(conn: sqlite3.Connection) -> tuple[User, bool]:
            now = self._now()
            created = conn.execute(
                "INSERT INTO users (user_id, plan, credits, browser_minutes, created_at, period)"
                " VALUES (?, ?, 0, 0, ?, ?) ON CONFLICT (user_id) DO NOTHING",
                (user_id, plan, now, policy.opening_period(period, now)),
            ).rowcount == 1
            grant = policy.opening_grant(credits, browser_minutes)
            if created and grant is not None:
                _charge(conn, user_id, None, grant, now)
            return _get_user(conn, user_id), created
        return await self._transaction(run)

    async def get_user(self, user_id: str) -> User | None:
        """The account, or None."""
        def run(conn: sqlite3.Connection) -> User | None:
            row = conn.execute(f"SELECT {USER_COLUMNS} FROM users WHERE user_id = ?",
                               (user_id,)).fetchone()
            return _user(row) if row else None
        return await self._read(run)

    async def list_users(self, limit: int, after: str | None = None) -> list[User]:
        """Up to ``limit`` accounts by user id, from the first after ``after``."""
        def run(conn: sqlite3.Connection) -> list[User]:
            return [_user(row) for row in conn.execute(
                f"SELECT {USER_COLUMNS} FROM users WHERE user_id > ? ORDER BY user_id LIMIT ?",
                (after or "", limit)).fetchall()]
        return await self._read(run)

    async def user_counts(self, user_id: str) -> dict[str, int]:
        """How much an account holds (see the Store protocol)."""
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            cursor = conn.execute(
                "SELECT (SELECT count(*) FROM threads WHERE user_id = ?1) AS threads,"
                " (SELECT count(*) FROM api_tokens WHERE user_id = ?1) AS tokens,"
                " (SELECT count(*) FROM web_sessions WHERE user_id = ?1) AS sessions,"
                " (SELECT count(*) FROM specialists WHERE user_id = ?1) AS specialists,"
                " (SELECT count(*) FROM browser_credentials WHERE user_id = ?1) AS logins,"
                " (SELECT count(*) FROM webhooks WHERE user_id = ?1) AS webhooks,"
                " (SELECT count(*) FROM jobs WHERE user_id = ?1) AS jobs", (user_id,))
            names = [column[0] for column in cursor.description]
            return dict(zip(names, cursor.fetchone(), strict=True))
        return await self._read(run)

    async def revoke_access(self, user_id: str) -> int:
        """End every API token, dashboard session and sign-in link of the account."""
        def run(conn: sqlite3.Connection) -> int:
            return sum(conn.execute(f"DELETE FROM {table} WHERE user_id = ?",
                                    (user_id,)).rowcount
                       for table in ("api_tokens", "web_sessions", "login_links"))
        return await self._transaction(run)

    async def delete_user(self, user_id: str) -> bool:
        """Remove the account and all held about it; SQLite overwrites the freed content
        (``secure_delete``) and the WAL is checkpointed and truncated after, so that no byte
        of it stays in the database's files."""
        def run(conn: sqlite3.Connection) -> bool:
            conn.execute("PRAGMA secure_delete = ON")
            try:
                keys = [(key,) for (key,) in conn.execute(
                    "SELECT session_key FROM threads WHERE user_id = ?", (user_id,))]
                conn.executemany("DELETE FROM inbox WHERE conversation = ?", keys)
                conn.executemany("DELETE FROM outbox WHERE conversation = ?", keys)
                conn.execute("DELETE FROM webhook_deliveries WHERE user_id = ?", (user_id,))
                fold_usage(conn)  # the hours keep its spending, with nobody's name on it
                gone = conn.execute("DELETE FROM users WHERE user_id = ?",
                                    (user_id,)).rowcount == 1  # the rest cascades
                forget_folded(conn)
                if gone:  # a full-text index keeps deleted words until its segments merge
                    for index in ("display_search", "title_search"):
                        conn.execute(f"INSERT INTO {index} ({index}) VALUES ('optimize')")
                return gone
            finally:
                conn.execute("PRAGMA secure_delete = OFF")
        deleted = await self._transaction(run, off_loop=True)
        assert self._worker is not None
        await self._worker.call(
            lambda conn: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
        return bool(deleted)

    async def grant_credits(self, user_id: str, credits: int, audit: AuditEntry | None = None,
                            kind: str = "grant") -> User:
        """Add ``credits`` (a ledger row of ``kind``), with ``audit`` appended to the audit
        log in the same transaction; raise ``NotFound`` if no account."""
        def run(conn: sqlite3.Connection) -> User:
            _get_user(conn, user_id)
            now = self._now()
            _charge(conn, user_id, None, Charge(kind, "", 0, 0, -credits), now)
            if audit is not None:
                append_audit(conn, audit, now)
            return _get_user(conn, user_id)
        return await self._transaction(run)

    async def replace_token(self, user_id: str, token_hash: str) -> None:
        """Make ``token_hash`` the account's only API token."""
        def run(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone() is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            conn.execute("DELETE FROM api_tokens WHERE user_id = ?", (user_id,))
            conn.execute("INSERT INTO api_tokens VALUES (?, ?, ?)",
                         (token_hash, user_id, self._now()))
        await self._transaction(run)

    async def user_for_token(self, token_hash: str) -> User | None:
        """The account owning this token hash, or None."""
        def run(conn: sqlite3.Connection) -> User | None:
            row = conn.execute(
                f"SELECT {prefixed(USER_COLUMNS, 'u')}"
                " FROM api_tokens t JOIN users u USING (user_id) WHERE t.token_hash = ?",
                (token_hash,)).fetchone()
            return _user(row) if row else None
        return await self._read(run)

    async def access_epoch(self) -> int:
        """The count of API tokens that ever stopped working (a trigger keeps it, in the
        transaction that ends them). (``PRAGMA data_version`` would cost as much, and changes
        with every write of any connection: a turn's too.) One statement, its own snapshot,
        on the connection :meth:`_read` uses."""
        return self._reading(_revoked)

    async def roll_period(self, user_id: str, expected: str, period: str, credits: int,
                          minutes: int) -> User:
        """Start ``period`` for the user if still in ``expected``: top the balances up to the
        plan's ``credits`` and ``minutes`` (a ``monthly_grant`` row). Idempotent: a second call,
        from this or another process, finds the period already started and changes nothing."""
        def run(conn: sqlite3.Connection) -> User:
            moved = conn.execute("UPDATE users SET period = ? WHERE user_id = ? AND period = ?",
                                 (period, user_id, expected)).rowcount == 1
            user = _get_user(conn, user_id)
            if moved:
                _grant(conn, user_id, policy.top_up(user, credits, minutes, "monthly_grant"),
                       self._now())
                user = _get_user(conn, user_id)
            return user
        return await self._transaction(run)

    async def set_plan(self, user_id: str, plan: str, credits: int, minutes: int) -> User:
        """Move the user to ``plan``, topping the balances up to its amounts at once."""
        def run(conn: sqlite3.Connection) -> User:
            _get_user(conn, user_id)
            conn.execute("UPDATE users SET plan = ? WHERE user_id = ?", (plan, user_id))
            grant = policy.top_up(_get_user(conn, user_id), credits, minutes, "plan_grant")
            _grant(conn, user_id, grant, self._now())
            return _get_user(conn, user_id)
        return await self._transaction(run)

    async def charge_minutes(self, user_id: str, thread_key: str | None, minutes: int,
                             what: str = "browser") -> User:
        """Take metered browser minutes (a ledger row of kind ``what``)."""
        def run(conn: sqlite3.Connection) -> User:
            _get_user(conn, user_id)
            _book(conn, Billing(user_id, thread_key, [Charge(what, "", 0, 0, 0, minutes,
                                                             tool=what)]), self._moment())
            return _get_user(conn, user_id)
        user = await self._transaction(run)
        await self._booked(1)
        return user

    async def take_minutes(self, user_id: str, thread_key: str | None, minutes: int) -> int:
        """Take up to ``minutes`` browser minutes, never more than the balance holds."""
        def run(conn: sqlite3.Connection) -> int:
            taken = policy.minutes_to_take(_get_user(conn, user_id).browser_minutes, minutes)
            if taken > 0:
                _book(conn, Billing(user_id, thread_key, [
                    Charge("browser", "", 0, 0, 0, taken, tool="browser")]), self._moment())
            return taken
        taken = await self._transaction(run)
        await self._booked(1 if taken > 0 else 0)
        return taken

    async def ledger_page(self, user_id: str, limit: int, before: int | None
                          ) -> tuple[list[LedgerEntry], int | None]:
        """Up to ``limit`` ledger rows older than ``before``, newest first, and the next cursor."""
        def run(conn: sqlite3.Connection) -> tuple[list[LedgerEntry], int | None]:
            rows = conn.execute(
                "SELECT id, thread_key, kind, model, prompt_tokens, completion_tokens, credits,"
                " minutes, created_at FROM ledger WHERE user_id = ? AND id < ?"
                " ORDER BY id DESC LIMIT ?",
                (user_id, before if before is not None else 2**62, limit + 1)).fetchall()
            entries = [LedgerEntry(r[0], r[1], Charge(*r[2:8]), r[8]) for r in rows[:limit]]
            return entries, (entries[-1].id if len(rows) > limit else None)
        return await self._read(run)

    async def ledger_totals(self, user_id: str, since: str) -> dict[str, Charge]:
        """Per-kind sums of the user's ledger rows from ``since`` (ISO time) on."""
        def run(conn: sqlite3.Connection) -> dict[str, Charge]:
            rows = conn.execute(
                "SELECT kind, count(*), sum(prompt_tokens), sum(completion_tokens), sum(credits),"
                " sum(minutes) FROM ledger WHERE user_id = ? AND created_at >= ?"
                " GROUP BY kind ORDER BY kind", (user_id, since)).fetchall()
            return {r[0]: Charge(r[0], str(r[1]), r[2], r[3], r[4], r[5]) for r in rows}
        return await self._read(run)

    async def ledger_daily(self, user_id: str, since: str) -> list[tuple[str, str, int, int]]:
        """What the user spent per UTC day and kind from ``since`` (ISO time) on, grants left
        out: (``YYYY-MM-DD``, kind, credits, browser minutes), oldest day first."""
        def run(conn: sqlite3.Connection) -> list[tuple[str, str, int, int]]:
            rows = conn.execute(
                "SELECT substr(created_at, 1, 10) AS day, kind, sum(credits), sum(minutes)"
                " FROM ledger WHERE user_id = ? AND created_at >= ?"
                " AND (credits > 0 OR minutes > 0) GROUP BY day, kind ORDER BY day, kind",
                (user_id, since)).fetchall()
            return [(r[0], r[1], r[2], r[3]) for r in rows]
        return await self._read(run)

    # --- retention -----------------------------------------------------------------------
    async def expired_threads(self, cutoffs: dict[str, str]) -> list[ExpiredThread]:
        """Threads not updated since their owner's plan cutoff (``{plan: ISO time}``)."""
        def run(conn: sqlite3.Connection) -> list[ExpiredThread]:
            expired = []
            for plan, cutoff in cutoffs.items():
                rows = conn.execute(
                    "SELECT t.session_key, t.user_id, u.plan, t.updated_at FROM threads t"
                    " JOIN users u USING (user_id) WHERE u.plan = ? AND t.updated_at < ?"
                    " ORDER BY t.updated_at", (plan, cutoff)).fetchall()
                expired += [ExpiredThread(*row) for row in rows]
            return expired
        return await self._transaction(run, off_loop=True)  # may be large

    async def prune_inbound(self, before: str) -> int:
        """Forget answered channel messages received before ``before`` (their ids stop
        de-duplicating), failed deliveries recorded before it, and webhook deliveries
        (delivered or failed) queued before it; return how many."""
        def run(conn: sqlite3.Connection) -> int:
            inbox = conn.execute("DELETE FROM inbox WHERE received_at < ? AND state = 'done'",
                                 (before,)).rowcount
            outbox = conn.execute("DELETE FROM outbox WHERE updated_at < ? AND state = 'failed'",
                                  (before,)).rowcount
            hooks = conn.execute("DELETE FROM webhook_deliveries WHERE created < ?"
                                 " AND state <> 'pending'", (epoch_of(before),)).rowcount
            return int(inbox + outbox + hooks)
        return await self._transaction(run, off_loop=True)

    # --- threads and pinned memory ---------------------------------------------
    async def get_thread(self, session_key: str) -> Thread | None:
        """The thread with this session key, or None."""
        def run(conn: sqlite3.Connection) -> Thread | None:
            row = conn.execute(f"SELECT {THREAD_COLUMNS}, {title_columns('threads')}"
                               " FROM threads WHERE session_key = ?", (session_key,)).fetchone()
            return _titled(row) if row else None
        return await self._read(run)

    async def list_threads(self, user_id: str, limit: int = 50,
                           before: tuple[str, int] | None = None,
                           ) -> tuple[list[Thread], tuple[str, int] | None]:
        """Up to ``limit`` of the user's threads updated before the cursor ``before``
        ((updated_at, row id) of the last one seen), most recent first, and the next cursor
        (None on the last page). One indexed range read, whatever the number of threads."""
        def run(conn: sqlite3.Connection) -> tuple[list[Thread], tuple[str, int] | None]:
            stamp, pk = before if before is not None else ("\uffff", 2**62)
            rows = conn.execute(
                f"SELECT id, {THREAD_COLUMNS}, {title_columns('threads')} FROM threads"
                " WHERE user_id = ? AND (updated_at, id) < (?, ?)"
                " ORDER BY updated_at DESC, id DESC LIMIT ?",
                (user_id, stamp, pk, limit + 1)).fetchall()
            page = rows[:limit]
            cursor = (page[-1][9], page[-1][0]) if len(rows) > limit else None
            return [_titled(row[1:]) for row in page], cursor
        return await self._read(run)

    async def set_title(self, session_key: str, title: str | None) -> bool:
        """Name the thread (None: it takes its first message's title again); False if no
        thread. Its place in the list (``updated_at``) stays."""
        def run(conn: sqlite3.Connection) -> bool:
            return conn.execute("UPDATE threads SET title = ? WHERE session_key = ?",
                                (title, session_key)).rowcount == 1
        return await self._transaction(run)

    async def search_threads(self, user_id: str, terms: Sequence[str], limit: int,
                             before: tuple[str, int] | None = None,
                             ) -> tuple[list[ThreadHit], tuple[str, int] | None]:
        """A page of the user's threads whose title or one of whose display messages holds
        a word starting with each of ``terms``, most recently updated first (the order and
        cursor of :meth:`list_threads`), and the next cursor (None on the last page).

        Runs on a reading thread of its own: a common word matches many messages, and the
        event loop and the writer go on meanwhile."""
        stamp, pk = before if before is not None else ("\uffff", 2**62)
        await self.index_search()  # what was written before the search is found

        def run(conn: sqlite3.Connection) -> tuple[list[ThreadHit], tuple[str, int] | None]:
            conn.execute("BEGIN")
            try:
                rows = conn.execute(_SEARCH, (_fts_query(terms), user_id, stamp, pk,
                                              limit + 1)).fetchall()
                page = rows[:limit]
                ids = [row[-1] for row in page if row[-1] is not None]
                texts = dict(conn.execute(
                    "SELECT id, content FROM display_messages WHERE id IN"
                    f" ({', '.join('?' * len(ids))})", ids).fetchall()) if ids else {}
            finally:
                conn.execute("COMMIT")
            hits = [ThreadHit(_titled(row[1:12]), row[-1], texts.get(row[-1], ""))
                    for row in page]
            return hits, (page[-1][9], page[-1][0]) if len(rows) > limit else None
        return await (await self._searcher()).call(run)

    async def _searcher(self) -> WorkerThread:
        """The thread searches run on, read-only, started at the first search."""
        if self._worker is None:
            raise RuntimeError("store is not open")
        async with self._search_opening:
            if self._search_worker is None:
                worker = WorkerThread(self.path)
                await worker.open(["PRAGMA query_only = ON", "PRAGMA busy_timeout = 5000"])
                self._search_worker = worker
            return self._search_worker

    async def get_pinned(self, ref: ThreadRef) -> dict[str, str]:
        """The thread's pinned keys (empty if no thread)."""
        def run(conn: sqlite3.Connection) -> dict[str, str]:
            return _pinned(conn, _owned_pk(conn, ref))
        return await self._read(run)

    async def put_pinned(self, ref: ThreadRef, key: str, value: str,
                         max_keys: int) -> dict[str, str]:
        """Upsert one pinned key, creating the thread if needed; return all keys."""
        def run(conn: sqlite3.Connection) -> dict[str, str]:
            now = self._now()
            pk = _touch_thread(conn, ref, now)
            pinned = _pinned(conn, pk)
            if key not in pinned and len(pinned) >= max_keys:
                raise BadRequest(f"a thread holds at most {max_keys} pinned keys",
                                 code="too_many_keys")
            conn.execute(
                "INSERT INTO pinned (thread, key, value, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (thread, key) DO UPDATE SET value = excluded.value,"
                " updated_at = excluded.updated_at",
                (pk, key, value, now),
            )
            pinned[key] = value
            return dict(sorted(pinned.items()))
        return await self._transaction(run)

    async def delete_pinned(self, ref: ThreadRef, key: str | None) -> dict[str, str]:
        """Delete one pinned key, or all when ``key`` is None; return what remains."""
        def run(conn: sqlite3.Connection) -> dict[str, str]:
            pk = _owned_pk(conn, ref)
            if pk is None:
                return {}
            if key is None:
                conn.execute("DELETE FROM pinned WHERE thread = ?", (pk,))
            else:
                conn.execute("DELETE FROM pinned WHERE thread = ? AND key = ?", (pk, key))
            return _pinned(conn, pk)
        return await self._transaction(run)

    async def clear_thread(self, session_key: str,
                           events: Sequence[WebhookEvent] = ()) -> bool:
        """Empty summary and messages (pinned and display stay), queueing ``events`` for the
        owner's webhooks; False if no thread."""
        def run(conn: sqlite3.Connection, queued: list[WebhookDelivery]) -> bool:
            owner = _thread_owner(conn, session_key)
            if owner is None:
                return False
            at = self._moment()
            conn.execute("DELETE FROM messages WHERE thread = ?", (owner[0],))
            conn.execute(
                "UPDATE threads SET summary = '', summary_tokens = 0,"
                " summary_version = summary_version + 1, updated_at = ? WHERE id = ?",
                (at.iso, owner[0]),
            )
            queued += _emit(conn, owner[1], events, at)
            return True
        return await self._announcing(run)

    async def delete_thread(self, session_key: str,
                            events: Sequence[WebhookEvent] = ()) -> bool:
        """Remove the thread and all it holds, queueing ``events`` for the owner's webhooks;
        False if no thread."""
        def run(conn: sqlite3.Connection, queued: list[WebhookDelivery]) -> bool:
            owner = _thread_owner(conn, session_key)
            if owner is None:
                return False
            conn.execute("DELETE FROM threads WHERE id = ?", (owner[0],))
            queued += _emit(conn, owner[1], events, self._moment())
            return True
        return await self._announcing(run, off_loop=True)  # cascades to every message

    async def display_page(self, session_key: str, limit: int,
                           before: int | None) -> ThreadPage:
        """Up to ``limit`` display messages older than ``before``, oldest first."""
        def run(conn: sqlite3.Connection) -> ThreadPage:
            pk = _thread_pk(conn, session_key)
            if pk is None:
                return ThreadPage()
            rows = conn.execute(
                "SELECT id, role, content, created_at FROM display_messages"
                " WHERE thread = ? AND id < ? ORDER BY id DESC LIMIT ?",
                (pk, before if before is not None else 2**62, limit + 1),
            ).fetchall()
            page = [DisplayMessage(*row) for row in rows[:limit]]
            page.reverse()
            return ThreadPage(page, page[0].id if len(rows) > limit else None)
        return await self._read(run)

    async def rolling_memory(self, session_key: str) -> tuple[Thread | None, list[StoredMessage]]:
        """The thread and its rolling ``messages``, oldest first, from one snapshot."""
        return await self._read(lambda conn: self._rolling(conn, session_key))

    @staticmethod
    def _rolling(conn: sqlite3.Connection,
                 session_key: str) -> tuple[Thread | None, list[StoredMessage]]:
        row = conn.execute(f"SELECT id, {THREAD_COLUMNS} FROM threads WHERE session_key = ?",
                           (session_key,)).fetchone()
        if row is None:
            return None, []
        rows = conn.execute("SELECT id, role, content, tokens FROM messages WHERE thread = ?"
                            " ORDER BY id", (row[0],))
        return _thread(row[1:]), [StoredMessage(*r) for r in rows.fetchall()]

    # --- turns ------------------------------------------------------------------
    async def load_turn(self, ref: ThreadRef, user_id: str, specialist: str | None,
                        claim: Claim | None = None) -> TurnState:
        """Everything a turn reads, in one call; raise ``NotFound`` if no account. (Its
        quotas are the gateway's in-memory ones: it is never given a ``claim``.)"""
        def run(conn: sqlite3.Connection) -> TurnState:
            user_row = conn.execute(f"SELECT {USER_COLUMNS} FROM users WHERE user_id = ?",
                                    (user_id,)).fetchone()
            if user_row is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            row = conn.execute(f"SELECT id, {THREAD_COLUMNS} FROM threads WHERE session_key = ?",
                               (ref.session_key,)).fetchone()
            pk, thread = (row[0], _thread(row[1:])) if row else (None, None)
            messages = [] if pk is None else [
                StoredMessage(*r) for r in conn.execute(
                    "SELECT id, role, content, tokens FROM messages WHERE thread = ? ORDER BY id",
                    (pk,)).fetchall()
            ]
            instructions = None
            if specialist is not None:
                found = conn.execute(
                    "SELECT instructions FROM specialists WHERE user_id = ? AND name = ?",
                    (user_id, specialist)).fetchone()
                instructions = found[0] if found else None
            credentials = [SecretRecord(*r) for r in conn.execute(
                "SELECT site, secret FROM browser_credentials WHERE user_id = ? ORDER BY site",
                (user_id,)).fetchall()]
            return TurnState(_user(user_row), thread, _pinned(conn, pk), messages,
                             instructions, credentials)
        return await self._read(run)

    async def commit_turn(self, commit: TurnCommit) -> TurnWritten:
        """Write a turn (messages, display, ledger, balance, its webhook events); return the
        new message ids."""
        def run(conn: sqlite3.Connection, queued: list[WebhookDelivery]) -> TurnWritten:
            at = self._moment()
            now = at.iso
            pk = _touch_thread(conn, commit.ref, now)
            if commit.replaces:
                _drop_last_exchange(conn, pk, commit.replaces)
            ids = [conn.execute(
                "INSERT INTO messages (thread, role, content, tokens) VALUES (?, ?, ?, ?)",
                (pk, m.role, m.content, m.tokens)).lastrowid for m in commit.messages]
            conn.executemany(
                "INSERT INTO display_messages (thread, role, content, created_at)"
                " VALUES (?, ?, ?, ?)",
                [(pk, m.role, m.content, now) for m in commit.messages],
            )
            if commit.inbound is not None and not _answer_inbox(
                    conn, commit.inbound, commit.reply, at, commit.trace):
                raise Conflict(f"{commit.inbound[0]} message {commit.inbound[1]} was already "
                               "answered", code="duplicate_message")
            if commit.job is not None:
                job = finish_in(conn, commit.job, at.epoch)
                if commit.job.deliver and not _queue_own(conn, InboxEntry(
                        job.ref.channel, commit.job.message_id, job.ref.session_key,
                        job.address, job.max_chars, b"", trace=commit.trace),
                        commit.reply, at):
                    raise Conflict(f"the run {commit.job.message_id} was queued already",
                                   code="job_run_recorded")
            queued += _charge_all(conn, commit.billing, at)
            queued += _emit(conn, commit.ref.user_id, commit.events, at)
            return TurnWritten([i for i in ids if i is not None])
        written = await self._announcing(run)
        await self._booked(len(commit.billing.charges))
        self._unindexed += len(commit.messages)
        if self._unindexed >= SEARCH_INDEX_BATCH:
            try:
                await self.index_search()
            except sqlite3.Error as exc:  # the turn is committed; the next search indexes
                log.warning("indexing messages for search failed: %s", exc)
        return written

    async def _booked(self, charges: int) -> None:
        """Count ``charges`` this process booked; once ``FOLD_BATCH`` were, fold the usage
        rollups (:mod:`~.sqlite_rollups`) on the writer thread."""
        self._unfolded += charges
        if self._unfolded < FOLD_BATCH:
            return
        self._unfolded = 0
        try:
            await self._transaction(fold_usage, off_loop=True)
        except sqlite3.Error as exc:  # the bookings are committed; the next fold takes them
            log.warning("folding the usage rollups failed: %s", exc)

    async def index_search(self) -> None:
        """Index the display messages not yet indexed for search (done before every search,
        and once this process wrote ``SEARCH_INDEX_BATCH``)."""
        self._unindexed = 0
        await self._transaction(_index_search)

    async def record_charges(self, user_id: str, thread_key: str, charges: list[Charge],
                             hold: str | None = None) -> None:
        """Ledger rows (and balance) for calls whose turn was not stored (``hold``: only
        shared quotas have holds in the store)."""
        def run(conn: sqlite3.Connection) -> None:
            _book(conn, Billing(user_id, thread_key, charges), self._moment())
        await self._transaction(run)
        await self._booked(len(charges))

    async def commit_summary(self, commit: SummaryCommit) -> bool:
        """Apply a summary if the thread is still at the expected version (queueing its
        webhook events); False otherwise."""
        def run(conn: sqlite3.Connection, queued: list[WebhookDelivery]) -> bool:
            at = self._moment()
            cursor = conn.execute(
                "UPDATE threads SET summary = ?, summary_tokens = ?,"
                " summary_version = summary_version + 1"
                " WHERE session_key = ? AND summary_version = ? RETURNING id, user_id, channel",
                (commit.summary, commit.summary_tokens, commit.session_key,
                 commit.expected_version),
            )
            row = cursor.fetchone()
            if row is None:
                return False
            conn.execute("DELETE FROM messages WHERE thread = ? AND id <= ?",
                         (row[0], commit.folded_through_id))
            queued += _charge_all(conn, dataclasses.replace(commit.billing, channel=row[2]), at)
            queued += _emit(conn, row[1], commit.events, at)
            return True
        applied = await self._announcing(run)
        if applied:
            await self._booked(len(commit.billing.charges))
        return applied

    # --- durable inbox and outbox -------------------------------------------------------
    async def inbox_add(self, entry: InboxEntry, answered: bool = False) -> Intake | None:
        """Commit a channel message to the inbox (``answered``: as already answered, only to
        recognise a redelivery); None if it is there already. One process answers the whole
        inbox, in order: a message is never behind another process's."""
        def run(conn: sqlite3.Connection) -> Intake | None:
            row = conn.execute(
                "INSERT INTO inbox (channel, message_id, conversation, state, address, max_chars,"
                " payload, received_at, trace) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (channel, message_id) DO NOTHING RETURNING id",
                (entry.channel, entry.message_id, entry.conversation,
                 "done" if answered else "pending", entry.address, entry.max_chars,
                 None if answered else entry.payload, self._now(), entry.trace)).fetchone()
            return Intake(int(row[0])) if row else None
        return await self._transaction(run)

    async def inbox_take_earlier(self, entry: InboxEntry) -> Earlier:
        """The pending messages of ``entry``'s conversation before it, oldest first (this
        process answers them all; none is elsewhere)."""
        def run(conn: sqlite3.Connection) -> Earlier:
            rows = conn.execute(
                "SELECT channel, message_id, conversation, address, max_chars, payload, id, trace"
                " FROM inbox WHERE state = 'pending' AND channel = ? AND conversation = ?"
                " AND id < ? ORDER BY id", (entry.channel, entry.conversation, entry.id))
            return Earlier([InboxEntry(*row) for row in rows])
        return await self._read(run)

    async def inbox_pending(self) -> list[InboxEntry]:
        """Every unanswered inbox message, in arrival order."""
        def run(conn: sqlite3.Connection) -> list[InboxEntry]:
            rows = conn.execute(
                "SELECT channel, message_id, conversation, address, max_chars, payload, id, trace"
                " FROM inbox WHERE state = 'pending' ORDER BY id").fetchall()
            return [InboxEntry(*row) for row in rows]
        return await self._read(run)

    async def answer_inbox(self, channel: str, message_id: str, reply: str,
                           trace: str | None = None) -> bool:
        """Mark the message answered and queue ``reply`` in the outbox (with the ``trace``
        context of what wrote it), in one transaction; False if it was not pending."""
        return await self._transaction(lambda conn: _answer_inbox(
            conn, ChannelMessage(channel, message_id), reply, self._moment(), trace))

    async def queue_message(self, entry: InboxEntry, text: str) -> bool:
        """Put a message that answers no inbound one in the outbox, recorded in the inbox under
        ``entry``'s channel and id (so it is queued once), in one transaction; False if that
        id was taken already."""
        return await self._transaction(
            lambda conn: _queue_own(conn, entry, text, self._moment()))

    async def drop_inbox(self, channel: str, message_id: str) -> None:
        """Mark a pending message done without a reply (there is nothing to say)."""
        await self._transaction(lambda conn: conn.execute(
            "UPDATE inbox SET state = 'done', payload = NULL"
            " WHERE channel = ? AND message_id = ? AND state = 'pending'",
            (channel, message_id)))

    async def pending_deliveries(self) -> list[Delivery]:
        """Every reply still waiting for its platform, oldest first."""
        def run(conn: sqlite3.Connection) -> list[Delivery]:
            rows = conn.execute(f"SELECT {DELIVERY_COLUMNS} FROM outbox"
                                " WHERE state = 'pending' ORDER BY id").fetchall()
            return [Delivery(*row) for row in rows]
        return await self._read(run)

    async def deliveries(self, conversation: str | None = None,
                         limit: int = 100) -> list[Delivery]:
        """Pending and failed replies (delivered ones are not kept), newest first; only one
        conversation's when given."""
        def run(conn: sqlite3.Connection) -> list[Delivery]:
            rows = conn.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM outbox WHERE (? IS NULL OR conversation = ?)"
                " ORDER BY id DESC LIMIT ?", (conversation, conversation, limit)).fetchall()
            return [Delivery(*row) for row in rows]
        return await self._read(run)

    async def delivery_progress(self, channel: str, message_id: str, chunks_sent: int) -> None:
        """Record that the first ``chunks_sent`` chunks of a reply arrived."""
        await self._transaction(lambda conn: conn.execute(
            "UPDATE outbox SET chunks_sent = ?, updated_at = ? WHERE channel = ? AND"
            " message_id = ?", (chunks_sent, self._now(), channel, message_id)))

    async def delivery_retry(self, channel: str, message_id: str, attempts: int,
                             next_attempt: float, error: str) -> None:
        """Record a failed attempt and when to try again."""
        await self._transaction(lambda conn: conn.execute(
            "UPDATE outbox SET attempts = ?, next_attempt = ?, last_error = ?, updated_at = ?"
            " WHERE channel = ? AND message_id = ?",
            (attempts, next_attempt, error, self._now(), channel, message_id)))

    async def delivery_finished(self, channel: str, message_id: str,
                                error: str | None = None) -> None:
        """Delivered (the row goes), or failed for good with ``error`` (the row stays)."""
        def run(conn: sqlite3.Connection) -> None:
            if error is None:
                conn.execute("DELETE FROM outbox WHERE channel = ? AND message_id = ?",
                             (channel, message_id))
            else:
                conn.execute("UPDATE outbox SET state = 'failed', last_error = ?, updated_at = ?"
                             " WHERE channel = ? AND message_id = ?",
                             (error, self._now(), channel, message_id))
        await self._transaction(run)

    # --- specialists and credentials ---------------------------------------------
    async def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per channel: inbox messages not answered yet, outbox replies not delivered yet."""
        def run(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
            rows = conn.execute(
                "SELECT channel, sum(inbound), sum(1 - inbound) FROM ("
                " SELECT channel, 1 AS inbound FROM inbox WHERE state = 'pending'"
                " UNION ALL SELECT channel, 0 FROM outbox WHERE state = 'pending')"
                " AS pending GROUP BY channel").fetchall()
            return {channel: (int(inbox), int(outbox)) for channel, inbox, outbox in rows}
        return await self._read(run)

    async def get_specialist(self, user_id: str, name: str) -> str | None:
        """The instructions of the user's specialist, or None."""
        return (await self.list_specialists(user_id, name)).get(name)

    async def list_specialists(self, user_id: str, name: str | None = None) -> dict[str, str]:
        """All the user's specialists (or only ``name``), by name."""
        def run(conn: sqlite3.Connection) -> dict[str, str]:
            rows = conn.execute(
                "SELECT name, instructions FROM specialists WHERE user_id = ?"
                " AND (? IS NULL OR name = ?) ORDER BY name", (user_id, name, name))
            return dict(rows.fetchall())
        return await self._read(run)

    async def put_specialist(self, user_id: str, name: str, instructions: str) -> None:
        """Create or replace a specialist."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO specialists VALUES (?, ?, ?, ?) ON CONFLICT (user_id, name)"
                " DO UPDATE SET instructions = excluded.instructions,"
                " updated_at = excluded.updated_at",
                (user_id, name, instructions, self._now()),
            )
        await self._transaction(run)

    async def delete_specialist(self, user_id: str, name: str) -> bool:
        """Delete a specialist; False if there was none."""
        def run(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM specialists WHERE user_id = ? AND name = ?",
                                (user_id, name)).rowcount == 1
        return await self._transaction(run)

    @staticmethod
    def _credentials(conn: sqlite3.Connection, user_id: str) -> list[SecretRecord]:
        rows = conn.execute("SELECT site, secret FROM browser_credentials WHERE user_id = ?"
                            " ORDER BY site", (user_id,))
        return [SecretRecord(*row) for row in rows.fetchall()]

    async def put_credential(self, user_id: str, site: str, blob: bytes) -> list[SecretRecord]:
        """Create or replace a saved browser credential; return all the user's."""
        def run(conn: sqlite3.Connection) -> list[SecretRecord]:
            conn.execute(
                "INSERT INTO browser_credentials VALUES (?, ?, ?, ?) ON CONFLICT (user_id, site)"
                " DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at",
                (user_id, site, blob, self._now()),
            )
            return self._credentials(conn, user_id)
        return await self._transaction(run)

    async def list_credentials(self, user_id: str) -> list[SecretRecord]:
        """All the user's saved browser credentials (encrypted)."""
        return await self._read(lambda conn: self._credentials(conn, user_id))

    async def delete_credential(self, user_id: str, site: str) -> list[SecretRecord]:
        """Forget one saved credential; return what remains."""
        def run(conn: sqlite3.Connection) -> list[SecretRecord]:
            conn.execute("DELETE FROM browser_credentials WHERE user_id = ? AND site = ?",
                         (user_id, site))
            return self._credentials(conn, user_id)
        return await self._transaction(run)

    # --- dashboard sign-in --------------------------------------------------------------------
    async def create_web_session(self, session_hash: str, user_id: str, csrf: str,
                                 expires: float) -> None:
        """Record a signed-in session (its id only as a hash) until ``expires`` (epoch s)."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO web_sessions VALUES (?, ?, ?, ?, ?)",
                         (session_hash, user_id, csrf, expires, self._now()))
        await self._transaction(run)

    async def web_session(self, session_hash: str) -> WebSession | None:
        """The account and CSRF token of a session that has not expired, or None."""
        def run(conn: sqlite3.Connection) -> WebSession | None:
            row = conn.execute(
                f"SELECT {prefixed(USER_COLUMNS, 'u')},"
                " s.csrf FROM web_sessions s JOIN users u USING (user_id)"
                " WHERE s.session_hash = ? AND s.expires > ?",
                (session_hash, self.clock())).fetchone()
            return WebSession(_user(row), row[-1]) if row else None
        return await self._read(run)

    async def delete_web_session(self, session_hash: str) -> None:
        """End a session (sign-out); expired sessions of anybody go too."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM web_sessions WHERE session_hash = ? OR expires <= ?",
                         (session_hash, self.clock()))
        await self._transaction(run)

    async def create_login_link(self, code_hash: str, user_id: str, expires: float) -> None:
        """Record a single-use sign-in code (only its hash) valid until ``expires``."""
        def run(conn: sqlite3.Connection) -> None:
            if conn.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone() is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            conn.execute("INSERT INTO login_links VALUES (?, ?, ?, ?)",
                         (code_hash, user_id, expires, self._now()))
        await self._transaction(run)

    async def use_login_link(self, code_hash: str) -> str | None:
        """Spend a sign-in code: the account it signs in, if it was valid; it never works
        again (expired codes of anybody are forgotten too)."""
        def run(conn: sqlite3.Connection) -> str | None:
            now = self.clock()
            row = conn.execute("DELETE FROM login_links WHERE code_hash = ? RETURNING user_id,"
                               " expires", (code_hash,)).fetchone()
            conn.execute("DELETE FROM login_links WHERE expires <= ?", (now,))
            return str(row[0]) if row and row[1] > now else None
        return await self._transaction(run)

    # --- webhooks -----------------------------------------------------------------------
    async def create_webhook(self, webhook: Webhook) -> None:
        """Register an endpoint."""
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(f"INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                         (webhook.id, webhook.user_id, webhook.url,
                          json.dumps(list(webhook.events)), webhook.secret,
                          webhook.created_at))
        await self._transaction(run)

    async def list_webhooks(self, user_id: str) -> list[Webhook]:
        """The user's endpoints, oldest first."""
        def run(conn: sqlite3.Connection) -> list[Webhook]:
            return [_webhook(row) for row in conn.execute(
                f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE user_id = ? ORDER BY created_at,"
                " id", (user_id,)).fetchall()]
        return await self._read(run)

    async def get_webhook(self, webhook_id: str) -> Webhook | None:
        """An endpoint by id, or None."""
        def run(conn: sqlite3.Connection) -> Webhook | None:
            row = conn.execute(f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = ?",
                               (webhook_id,)).fetchone()
            return _webhook(row) if row else None
        return await self._read(run)

    async def delete_webhook(self, user_id: str, webhook_id: str) -> bool:
        """Remove the user's endpoint and its deliveries; False if the user has none such."""
        def run(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM webhooks WHERE id = ? AND user_id = ?",
                                (webhook_id, user_id)).rowcount == 1
        return await self._transaction(run)

    async def emit(self, user_id: str, events: Sequence[WebhookEvent],
                   only: str | None = None) -> int:
        """Queue ``events`` for the user's subscribed endpoints (``only``: for that one
        endpoint, subscribed or not), a change of its own; how many deliveries."""
        def run(conn: sqlite3.Connection, queued: list[WebhookDelivery]) -> int:
            queued += _emit(conn, user_id, events, self._moment(), only)
            return len(queued)
        return await self._announcing(run)

    async def webhook_deliveries(self, user_id: str, webhook_id: str,
                                 limit: int) -> list[WebhookDelivery]:
        """The user's endpoint's delivery log, newest first (read through the user's
        deliveries: an index per endpoint would cost every turn a page write)."""
        def run(conn: sqlite3.Connection) -> list[WebhookDelivery]:
            return [WebhookDelivery(*row) for row in conn.execute(
                f"SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE user_id = ?"
                " AND webhook = ? ORDER BY id DESC LIMIT ?", (user_id, webhook_id, limit)
            ).fetchall()]
        return await self._read(run)

    async def webhook_pending(self) -> list[DueDelivery]:
        """Every delivery still pending (those a previous run left), by when it is due."""
        def run(conn: sqlite3.Connection) -> list[DueDelivery]:
            return sorted(DueDelivery(row[0], row[1], row[2]) for row in conn.execute(
                "SELECT next_attempt, id, webhook FROM webhook_deliveries"
                " WHERE state = 'pending'").fetchall())
        return await self._read(run)

    async def webhook_delivery(self, delivery_id: int) -> WebhookDelivery | None:
        """One delivery, body included; None if it is gone (its endpoint was deleted)."""
        def run(conn: sqlite3.Connection) -> WebhookDelivery | None:
            row = conn.execute(f"SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries"
                               " WHERE id = ?", (delivery_id,)).fetchone()
            return WebhookDelivery(*row) if row else None
        return await self._read(run)

    async def webhook_attempts(self, attempts: list[WebhookAttempt]) -> None:
        """Record attempts' outcomes, in order, in one transaction."""
        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE webhook_deliveries SET state = ?, attempts = ?, last_status = ?,"
                " next_attempt = ?, last_error = ? WHERE id = ?",
                [(a.state, a.attempts, a.status, a.next_attempt, a.error, a.delivery_id)
                 for a in attempts])
        await self._transaction(run)

    async def lock_thread(self, session_key: str) -> None:
        """One process uses a SQLite database: its in-process turn lock is the whole lock."""
        return None

    async def try_lead(self, role: str) -> Alone:
        """One process uses a SQLite database: it plays every role."""
        return Alone()

    async def ledger(self, user_id: str) -> list[Charge]:
        """The user's ledger rows, oldest first."""
        def run(conn: sqlite3.Connection) -> list[Charge]:
            rows = conn.execute(
                "SELECT kind, model, prompt_tokens, completion_tokens, credits, minutes"
                " FROM ledger WHERE user_id = ? ORDER BY id", (user_id,))
            return [Charge(*row) for row in rows.fetchall()]
        return await self._read(run)
