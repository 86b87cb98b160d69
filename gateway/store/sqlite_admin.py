"""Administration in SQLite (migration 13): accounts' roles, blocks and daily caps, each
change written with its audit row in one transaction; the audit log (append-only: the
schema's triggers refuse any UPDATE or DELETE, and nothing here asks for one); the usage
report from the rollups (:mod:`gateway.store.usage`) and the health report.

The reports run on the store's reading thread, not the event loop's: a month of a busy
deployment's spenders is some hundreds of thousands of rows to sum.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.base.errors import NotFound
from gateway.store import usage
from gateway.store.columns import USER_COLUMNS, user_of
from gateway.store.records import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    FailingWebhook,
    Health,
    OutboxHealth,
    Spend,
    UsageQuery,
    UsageReport,
    UsageRow,
    User,
    UserQuery,
)
from gateway.store.sqlite_rollups import fold_usage

if TYPE_CHECKING:
    from gateway.store.worker import WorkerThread

T = TypeVar("T")
_SUMS = ("sum(calls), sum(prompt_tokens), sum(completion_tokens), sum(credits),"
         " sum(minutes)")
AUDIT_COLUMNS = "id, at, actor, action, target, details, source"
FLAGS = ("admin", "blocked")


def append_audit(conn: sqlite3.Connection, entry: AuditEntry, now: str) -> None:
    """Append ``entry`` to the audit log, in the caller's transaction."""
    conn.execute("INSERT INTO audit_log (at, actor, action, target, details, source)"
                 " VALUES (?, ?, ?, ?, ?, ?)",
                 (now, entry.actor, entry.action, entry.target,
                  json.dumps(entry.details, sort_keys=True), entry.source))


def bump_access_epoch(conn: sqlite3.Connection) -> None:
    """Move the access epoch (``Store.access_epoch``), in the caller's transaction: token
    caches forget the accounts they hold, so that a block or a role takes effect from the
    next request on."""
    conn.execute("UPDATE access_revocations SET revoked = revoked + 1")


def audit_record(row: Any) -> AuditRecord:
    """An audit log row (``AUDIT_COLUMNS``) as its record."""
    return AuditRecord(row[0], row[1], AuditEntry(row[2], row[3], row[4], json.loads(row[5]),
                                                  row[6]))


def _spend(row: Any) -> Spend:
    return Spend(*(int(value or 0) for value in row))


class SQLiteAdmin:
    """The administration half of :class:`~gateway.store.sqlite.SQLiteStore` (a mixin: it
    uses the store's connections and clock)."""

    clock: Callable[[], float]

    if TYPE_CHECKING:  # the store's own
        def _now(self) -> str: ...

        async def _transaction(self, fn: Callable[[sqlite3.Connection], T],
                               off_loop: bool = False) -> T: ...

        async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _searcher(self) -> WorkerThread: ...

    async def _report(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a report's reads in one snapshot on the reading thread."""
        def run(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN")
            try:
                return fn(conn)
            finally:
                conn.execute("COMMIT")
        worker = await self._searcher()
        called: Awaitable[T] = worker.call(run)
        return await called

    # --- accounts ----------------------------------------------------------------------------
    async def find_users(self, query: UserQuery) -> list[User]:
        """A page of accounts by user id (see :class:`UserQuery`)."""
        def run(conn: sqlite3.Connection) -> list[User]:
            rows = conn.execute(
                f"SELECT {USER_COLUMNS} FROM users WHERE user_id > ?1"
                " AND (?2 IS NULL OR instr(lower(user_id), lower(?2)) > 0)"
                " AND (?3 IS NULL OR plan = ?3) AND (?4 IS NULL OR blocked = ?4)"
                " AND (?5 IS NULL OR admin = ?5) ORDER BY user_id LIMIT ?6",
                (query.after or "", query.search, query.plan, query.blocked, query.admin,
                 query.limit)).fetchall()
            return [user_of(row) for row in rows]
        return await self._read(run)

    async def set_flag(self, user_id: str, flag: str, on: bool, audit: AuditEntry) -> User:
        """Set the account's ``admin`` or ``blocked`` flag and append ``audit``, in one
        transaction that also moves the access epoch; NotFound if no account."""
        if flag not in FLAGS:
            raise ValueError(f"not an account flag: {flag!r}")

        def run(conn: sqlite3.Connection) -> User:
            row = conn.execute(f"UPDATE users SET {flag} = ? WHERE user_id = ?"
                               f" RETURNING {USER_COLUMNS}", (int(on), user_id)).fetchone()
            if row is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            bump_access_epoch(conn)
            append_audit(conn, audit, self._now())
            return user_of(row)
        return await self._transaction(run)

    async def set_daily_credits(self, user_id: str, credits: int | None,
                                audit: AuditEntry) -> User:
        """Give the account a daily cap of its own (None: its plan's again) and append
        ``audit``, in one transaction; NotFound if no account."""
        def run(conn: sqlite3.Connection) -> User:
            row = conn.execute(f"UPDATE users SET daily_credits = ? WHERE user_id = ?"
                               f" RETURNING {USER_COLUMNS}", (credits, user_id)).fetchone()
            if row is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            append_audit(conn, audit, self._now())
            return user_of(row)
        return await self._transaction(run)

    # --- the audit log -------------------------------------------------------------------------
    async def append_audit(self, entry: AuditEntry) -> None:
        """Append ``entry`` to the audit log (an act that changes nothing else)."""
        await self._transaction(lambda conn: append_audit(conn, entry, self._now()))

    async def audit_log(self, query: AuditQuery) -> list[AuditRecord]:
        """Audit rows, newest first (see :class:`AuditQuery`)."""
        def run(conn: sqlite3.Connection) -> list[AuditRecord]:
            rows = conn.execute(
                f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE id < ?1"
                " AND (?2 IS NULL OR at >= ?2) AND (?3 IS NULL OR actor = ?3)"
                " AND (?4 IS NULL OR action = ?4) ORDER BY id DESC LIMIT ?5",
                (query.before if query.before is not None else 2**62, query.since,
                 query.actor, query.action, query.limit)).fetchall()
            return [audit_record(row) for row in rows]
        return await self._read(run)

    # --- reports -------------------------------------------------------------------------------
    async def usage_report(self, query: UsageQuery) -> UsageReport:
        """Spending over time by one dimension, the totals and the top spenders, from the
        rollups (see :class:`UsageQuery`)."""
        width = 13 if query.bucket == "hour" else 10
        first, end = usage.days_of(query.start, query.end)
        months = usage.months_of(first, end)

        def run(conn: sqlite3.Connection) -> UsageReport:
            top = _top_spenders(conn, months, (first, end), query.top)
            total = _spend(conn.execute(
                f"SELECT {_SUMS} FROM usage_hours WHERE dim = 'plan' AND hour >= ?"
                " AND hour < ?", (query.start, query.end)).fetchone())
            if query.group_by == "user":
                rows = _user_rows(conn, [user for user, _ in top], (first, end), months)
            else:
                rows = [UsageRow(row[0], row[1], _spend(row[2:])) for row in conn.execute(
                    f"SELECT substr(hour, 1, ?) AS bucket, value, {_SUMS} FROM usage_hours"
                    " WHERE dim = ? AND hour >= ? AND hour < ? GROUP BY bucket, value"
                    " ORDER BY bucket, value", (width, query.group_by, query.start,
                                                query.end))]
            return UsageReport(rows, total, top)
        await self._transaction(fold_usage, off_loop=True)  # the rollups: the whole ledger
        return await self._report(run)

    async def compact_usage(self, start: str, end: str) -> int:
        """Fold the ledger rows booked since the last fold into the rollups (the gateway's
        hourly maintenance; SQLite keeps one row per hour and value already); how many
        ledger ids the fold moved over."""
        return await self._transaction(fold_usage, off_loop=True)

    async def health(self, since: float) -> Health:
        """The channels' queues, the endpoints failing (retrying deliveries, or deliveries
        failed for good since ``since``, epoch s) and the jobs by state."""
        def run(conn: sqlite3.Connection) -> Health:
            inbox = dict(conn.execute("SELECT channel, count(*) FROM inbox"
                                      " WHERE state = 'pending' GROUP BY channel").fetchall())
            outbox = {row[0]: row[1:] for row in conn.execute(
                "SELECT channel, sum(state = 'pending'),"
                " min(CASE WHEN state = 'pending' THEN created END), sum(state = 'failed')"
                " FROM outbox GROUP BY channel")}
            channels = [OutboxHealth(channel, int(inbox.get(channel, 0)),
                                     int(outbox.get(channel, (0, None, 0))[0]),
                                     outbox.get(channel, (0, None, 0))[1],
                                     int(outbox.get(channel, (0, None, 0))[2]))
                        for channel in sorted({*inbox, *outbox})]
            webhooks = [FailingWebhook(*row) for row in conn.execute(_FAILING, (since,))]
            jobs = dict(conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"))
            return Health(channels, webhooks, {state: int(n) for state, n in jobs.items()})
        return await self._report(run)


def _top_spenders(conn: sqlite3.Connection, months: list[str], days: tuple[str, str],
                  top: int) -> list[tuple[str, Spend]]:
    """The ``top`` accounts by credits spent on ``days`` (first, end: exclusive), and what
    they spent. Each month's accounts are summed as its rows are read (they are stored in
    account order), the months' sums merged and ranked, all in SQL: only the ranking's
    winners come back, then their whole spending, read by key."""
    if not months:
        return []
    month_sums = " UNION ALL ".join(
        ["SELECT user_id, sum(credits) AS credits FROM usage_days"
         " WHERE month = ? AND day >= ? AND day < ? GROUP BY user_id"] * len(months))
    users = [row[0] for row in conn.execute(
        f"SELECT user_id FROM ({month_sums}) GROUP BY user_id"
        " ORDER BY sum(credits) DESC, user_id LIMIT ?",
        [*(value for month in months for value in (month, *days)), top])]
    if not users:
        return []
    spent = {row[0]: _spend(row[1:]) for row in conn.execute(
        f"SELECT user_id, {_SUMS} FROM usage_days WHERE month IN ({_marks(months)})"
        f" AND user_id IN ({_marks(users)}) AND day >= ? AND day < ? GROUP BY user_id",
        (*months, *users, *days))}
    return [(user, spent[user]) for user in users]


def _marks(values: list[str]) -> str:
    return ", ".join("?" * len(values))


def _user_rows(conn: sqlite3.Connection, users: list[str], days: tuple[str, str],
               months: list[str]) -> list[UsageRow]:
    """The days' spending of ``users`` (the top spenders), by day."""
    if not users:
        return []
    return [UsageRow(row[0], row[1], _spend(row[2:])) for month in months
            for row in conn.execute(
                f"SELECT day, user_id, {_SUMS} FROM usage_days WHERE month = ?"
                f" AND user_id IN ({_marks(users)}) AND day >= ? AND day < ?"
                " GROUP BY day, user_id ORDER BY day, user_id",
                (month, *users, *days))]


# Endpoints with deliveries still being retried or failed for good since ?1, the most recently
# troubled first, with their latest such delivery's status and error (each part read from
# its partial index: pending deliveries, failed ones).
_FAILING = """
WITH d AS (
    SELECT webhook, state, id FROM webhook_deliveries WHERE state = 'pending' AND attempts > 0
    UNION ALL
    SELECT webhook, state, id FROM webhook_deliveries WHERE state = 'failed' AND created >= ?1),
bad AS (
    SELECT webhook, sum(state = 'pending') AS retrying, sum(state = 'failed') AS failed,
           max(id) AS latest FROM d GROUP BY webhook)
SELECT w.id, w.user_id, w.url, bad.retrying, bad.failed, x.last_status, x.last_error
FROM bad JOIN webhooks w ON w.id = bad.webhook JOIN webhook_deliveries x ON x.id = bad.latest
ORDER BY bad.latest DESC LIMIT 100"""
