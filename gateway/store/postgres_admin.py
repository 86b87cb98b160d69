"""Administration in PostgreSQL (migration 12): the same operations as
:mod:`gateway.store.sqlite_admin`, read alike. A change of an account's role or block moves
the access epoch as a token's revocation does (the counter, and a notification every
process hears when it commits); the audit log's trigger refuses UPDATE and DELETE.
"""

from __future__ import annotations

import json
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
from gateway.store.sqlite_admin import AUDIT_COLUMNS, FLAGS, audit_record

if TYPE_CHECKING:
    from gateway.store.postgres_access import AccessWatch

T = TypeVar("T")
Connection = Any  # an asyncpg.Connection (asyncpg ships no type hints)
_SUMS = ("sum(calls)::bigint, sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,"
         " sum(credits)::bigint, sum(minutes)::bigint")


async def append_audit(conn: Connection, entry: AuditEntry, now: str) -> None:
    """Append ``entry`` to the audit log, in the caller's transaction."""
    await conn.execute("INSERT INTO audit_log (at, actor, action, target, details, source)"
                       " VALUES ($1, $2, $3, $4, $5, $6)", now, entry.actor, entry.action,
                       entry.target, json.dumps(entry.details, sort_keys=True), entry.source)


def _spend(row: Any) -> Spend:
    return Spend(*(int(value or 0) for value in row))


async def _top_spenders(conn: Connection, months: list[str], days: tuple[str, str],
                        top: int) -> list[tuple[str, Spend]]:
    """The ``top`` accounts by credits spent on ``days``: ranked on the credits alone, then
    their whole spending read by key (as SQLite's)."""
    users = [row[0] for row in await conn.fetch(
        "SELECT user_id FROM usage_days WHERE month = ANY($1::text[]) AND day >= $2"
        " AND day < $3 GROUP BY user_id ORDER BY sum(credits) DESC, user_id LIMIT $4",
        months, *days, top)]
    spent = {row[0]: _spend(row[1:]) for row in await conn.fetch(
        f"SELECT user_id, {_SUMS} FROM usage_days WHERE month = ANY($1::text[])"
        " AND user_id = ANY($2::text[]) AND day >= $3 AND day < $4 GROUP BY user_id",
        months, users, *days)}
    return [(user, spent[user]) for user in users]


# The rows of the hours from $1 to $2 in shards other than 0, deleted and added to shard 0's
# (read by dimension: one index range each).
_COMPACT = """
WITH gone AS (
  DELETE FROM usage_hours WHERE dim = ANY($3::text[]) AND hour >= $1 AND hour < $2
    AND shard <> 0
  RETURNING dim, hour, value, calls, prompt_tokens, completion_tokens, credits, minutes),
folded AS (
  INSERT INTO usage_hours AS h (dim, hour, value, shard, calls, prompt_tokens,
                                completion_tokens, credits, minutes)
  SELECT dim, hour, value, 0, sum(calls), sum(prompt_tokens), sum(completion_tokens),
         sum(credits), sum(minutes) FROM gone GROUP BY dim, hour, value
  ON CONFLICT (dim, hour, value, shard) DO UPDATE SET """ + ", ".join(
    f"{column} = h.{column} + excluded.{column}" for column in (
        "calls", "prompt_tokens", "completion_tokens", "credits", "minutes")) + """)
SELECT count(*) FROM gone"""


# Endpoints with deliveries still being retried or failed for good since $1 (as SQLite's).
_FAILING = """
WITH d AS (
    SELECT webhook, state, id FROM webhook_deliveries WHERE state = 'pending' AND attempts > 0
    UNION ALL
    SELECT webhook, state, id FROM webhook_deliveries WHERE state = 'failed' AND created >= $1),
bad AS (
    SELECT webhook, count(*) FILTER (WHERE state = 'pending') AS retrying,
           count(*) FILTER (WHERE state = 'failed') AS failed, max(id) AS latest
    FROM d GROUP BY webhook)
SELECT w.id, w.user_id, w.url, bad.retrying, bad.failed, x.last_status, x.last_error
FROM bad JOIN webhooks w ON w.id = bad.webhook JOIN webhook_deliveries x ON x.id = bad.latest
ORDER BY bad.latest DESC LIMIT 100"""


class PostgresAdmin:
    """The administration part of :class:`~gateway.store.postgres.PostgresStore` (a mixin: it
    uses the store's connections, clock and access watch)."""

    clock: Callable[[], float]
    _access: AccessWatch

    if TYPE_CHECKING:  # the store's own
        def _now(self) -> str: ...

        async def _query(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

        async def _transaction(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

    # --- accounts ----------------------------------------------------------------------------
    async def find_users(self, query: UserQuery) -> list[User]:
        """A page of accounts by user id (see :class:`UserQuery`)."""
        async def run(conn: Connection) -> list[User]:
            return [user_of(row) for row in await conn.fetch(
                f"SELECT {USER_COLUMNS} FROM users WHERE user_id > $1"
                " AND ($2::text IS NULL OR strpos(lower(user_id), lower($2)) > 0)"
                " AND ($3::text IS NULL OR plan = $3) AND ($4::bool IS NULL OR blocked = $4)"
                " AND ($5::bool IS NULL OR admin = $5) ORDER BY user_id LIMIT $6",
                query.after or "", query.search, query.plan, query.blocked, query.admin,
                query.limit)]
        return await self._query(run)

    async def set_flag(self, user_id: str, flag: str, on: bool, audit: AuditEntry) -> User:
        """Set the account's ``admin`` or ``blocked`` flag and append ``audit``, in one
        transaction that moves the access epoch (every process is told when it commits)."""
        if flag not in FLAGS:
            raise ValueError(f"not an account flag: {flag!r}")

        async def run(conn: Connection) -> User:
            row = await conn.fetchrow(f"UPDATE users SET {flag} = $1 WHERE user_id = $2"
                                      f" RETURNING {USER_COLUMNS}", on, user_id)
            if row is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            await conn.execute("UPDATE access_revocations SET revoked = revoked + 1")
            await conn.execute("SELECT pg_notify('cloudybot_access', current_schema())")
            await append_audit(conn, audit, self._now())
            return user_of(row)
        try:
            return await self._transaction(run)
        finally:
            self._access.changed()  # here at once; other processes when it commits

    async def set_daily_credits(self, user_id: str, credits: int | None,
                                audit: AuditEntry) -> User:
        """Give the account a daily cap of its own (None: its plan's again) and append
        ``audit``, in one transaction."""
        async def run(conn: Connection) -> User:
            row = await conn.fetchrow(f"UPDATE users SET daily_credits = $1 WHERE user_id = $2"
                                      f" RETURNING {USER_COLUMNS}", credits, user_id)
            if row is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            await append_audit(conn, audit, self._now())
            return user_of(row)
        return await self._transaction(run)

    # --- the audit log -------------------------------------------------------------------------
    async def append_audit(self, entry: AuditEntry) -> None:
        """Append ``entry`` to the audit log (an act that changes nothing else)."""
        async def run(conn: Connection) -> None:
            await append_audit(conn, entry, self._now())
        await self._query(run)

    async def audit_log(self, query: AuditQuery) -> list[AuditRecord]:
        """Audit rows, newest first (see :class:`AuditQuery`)."""
        async def run(conn: Connection) -> list[AuditRecord]:
            return [audit_record(row) for row in await conn.fetch(
                f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE id < $1"
                " AND ($2::text IS NULL OR at >= $2) AND ($3::text IS NULL OR actor = $3)"
                " AND ($4::text IS NULL OR action = $4) ORDER BY id DESC LIMIT $5",
                query.before if query.before is not None else 2**62, query.since,
                query.actor, query.action, query.limit)]
        return await self._query(run)

    # --- reports -------------------------------------------------------------------------------
    async def usage_report(self, query: UsageQuery) -> UsageReport:
        """Spending over time by one dimension, the totals and the top spenders, from the
        rollups (see :class:`UsageQuery`)."""
        width = 13 if query.bucket == "hour" else 10
        first, end = usage.days_of(query.start, query.end)
        months = usage.months_of(first, end)

        async def run(conn: Connection) -> UsageReport:
            top = await _top_spenders(conn, months, (first, end), query.top)
            total = _spend(await conn.fetchrow(
                f"SELECT {_SUMS} FROM usage_hours WHERE dim = 'plan' AND hour >= $1"
                " AND hour < $2", query.start, query.end))
            if query.group_by == "user":
                rows = await conn.fetch(
                    f"SELECT day, user_id, {_SUMS} FROM usage_days"
                    " WHERE month = ANY($1::text[]) AND user_id = ANY($2::text[])"
                    " AND day >= $3 AND day < $4 GROUP BY day, user_id ORDER BY day, user_id",
                    months, [user for user, _ in top], first, end)
            else:
                rows = await conn.fetch(
                    f"SELECT substr(hour, 1, $1) AS bucket, value, {_SUMS} FROM usage_hours"
                    " WHERE dim = $2 AND hour >= $3 AND hour < $4 GROUP BY bucket, value"
                    " ORDER BY bucket, value", width, query.group_by, query.start, query.end)
            return UsageReport([UsageRow(row[0], row[1], _spend(row[2:])) for row in rows],
                               total, top)
        return await self._query(run)

    async def compact_usage(self, start: str, end: str) -> int:
        """Fold the shards of the hours from ``start`` to ``end`` into shard 0 (see
        ``_COMPACT``), in one transaction; how many rows were folded."""
        async def run(conn: Connection) -> int:
            folded: int = await conn.fetchval(_COMPACT, start, end, list(usage.DIMENSIONS))
            return folded
        return await self._transaction(run)

    async def health(self, since: float) -> Health:
        """The channels' queues, the endpoints failing and the jobs by state."""
        async def run(conn: Connection) -> Health:
            inbox = {row[0]: int(row[1]) for row in await conn.fetch(
                "SELECT channel, count(*) FROM inbox WHERE state = 'pending' GROUP BY channel")}
            outbox = {row[0]: (int(row[1]), row[2], int(row[3])) for row in await conn.fetch(
                "SELECT channel, count(*) FILTER (WHERE state = 'pending'),"
                " min(created) FILTER (WHERE state = 'pending'),"
                " count(*) FILTER (WHERE state = 'failed') FROM outbox GROUP BY channel")}
            channels = [OutboxHealth(channel, inbox.get(channel, 0),
                                     *outbox.get(channel, (0, None, 0)))
                        for channel in sorted({*inbox, *outbox})]
            webhooks = [FailingWebhook(row[0], row[1], row[2], int(row[3]), int(row[4]),
                                       row[5], row[6])
                        for row in await conn.fetch(_FAILING, since)]
            jobs = {row[0]: int(row[1]) for row in await conn.fetch(
                "SELECT state, count(*) FROM jobs GROUP BY state")}
            return Health(channels, webhooks, jobs)
        return await self._query(run)
