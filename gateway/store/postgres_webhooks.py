"""Outbound webhooks in PostgreSQL: the endpoints and their outbox (SPEC §15).

A delivery is queued by the statement that commits the change it reports (``_COMMIT_TURN``
and ``_COMMIT_SUMMARY`` carry the events in ``$27``/``$28`` and ``$15``/``$16``; clears and
deletes queue theirs in their transaction) and taken by the process that queued it. A process
that dies leaves its pending deliveries to the next that looks (:meth:`webhook_pending`), as
it leaves its outbox replies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.base import jsonio
from gateway.store import events as webhook_events
from gateway.store import policy
from gateway.store.columns import WEBHOOK_COLUMNS, WEBHOOK_DELIVERY_COLUMNS
from gateway.store.records import (
    DueDelivery,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
)

T = TypeVar("T")
Connection = Any  # an asyncpg.Connection (asyncpg ships no type hints)

# Queue events (types $5, bodies $6) for user $1's endpoints: those subscribed, or endpoint $2
# alone whatever it subscribed to.
EMIT = f"""
INSERT INTO webhook_deliveries (message_id, webhook, user_id, event, body, state, next_attempt,
                                created, taken_by)
SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), w.id, w.user_id, e.type, e.body,
       'pending', $3, $3, $4
FROM webhooks w, unnest($5::text[], $6::text[]) AS e(type, body)
WHERE w.user_id = $1 AND (w.id = $2 OR $2::text IS NULL AND e.type = ANY(w.events))
RETURNING {WEBHOOK_DELIVERY_COLUMNS}
"""


def queue_events(due: str, taker: str) -> str:
    """The CTE ``hooked`` of a commit statement: one delivery, due at ``due`` and taken by
    ``taker`` (SQL parameters), per endpoint subscribed to a row of the statement's CTE
    ``events`` (type, body, owner); :data:`HOOKED_ROWS` selects them."""
    return f"""hooked AS (
  INSERT INTO webhook_deliveries (message_id, webhook, user_id, event, body, state,
                                  next_attempt, created, taken_by)
  SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), w.id, w.user_id, e.type, e.body,
         'pending', {due}, {due}, {taker}
  FROM events e JOIN webhooks w ON w.user_id = e.owner AND e.type = ANY(w.events)
  RETURNING {WEBHOOK_DELIVERY_COLUMNS})"""


# What ``hooked`` queued, as the JSON array :meth:`PostgresWebhooks._announce` reads.
HOOKED_ROWS = f"(SELECT json_agg(json_build_array({WEBHOOK_DELIVERY_COLUMNS})) FROM hooked)"


def credits_low_params(threshold: int | None, spent: int,
                       now: str) -> tuple[int | None, int | None, str, str]:
    """A commit statement's four ``credits.low`` parameters, for charges of ``spent`` credits
    against ``threshold``: the balances after them at which the event is told (lowest,
    highest: :func:`policy.low_credits_window`; NULL, NULL: at none), and the event's body at
    ``now`` before and after the balance's digits. The statement only checks its balance
    against them."""
    window = policy.low_credits_window(threshold, spent)
    if window is None or threshold is None:
        return None, None, "", ""
    return (*window, *webhook_events.credits_low_around(now, threshold))


def daily_low_params(cap: int | None, now: str) -> tuple[int | None, str, str]:
    """A commit statement's three parameters of ``credits.low`` near the daily ``cap``: the
    spending today at which it is told (:func:`policy.daily_low_threshold`; NULL: never), and
    its body at ``now`` before and after the spending's digits."""
    threshold = policy.daily_low_threshold(cap)
    if threshold is None or cap is None:
        return None, "", ""
    return (threshold, *webhook_events.daily_credits_low_around(now, cap, now[:10]))


def event_params(events: Sequence[WebhookEvent], now: str) -> tuple[list[str], list[str]]:
    """Events as a statement's two arrays: their types and their bodies."""
    return ([event.type for event in events],
            [webhook_events.body(event.type, now, event.data) for event in events])


def _webhook(row: Any) -> Webhook:
    return Webhook(row[0], row[1], row[2], tuple(row[3]), bytes(row[4]), row[5])


class PostgresWebhooks:
    """The webhook half of :class:`~gateway.store.postgres.PostgresStore` (a mixin: it uses
    the store's connections, clock and process id)."""

    clock: Callable[[], float]
    process_id: str
    webhooks_queued: Callable[[list[WebhookDelivery]], None]

    if TYPE_CHECKING:  # the store's own
        def _now(self) -> str: ...

        async def _query(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

        async def _transaction(self, work: Callable[[Connection], Awaitable[T]]) -> T: ...

        async def _dead_takers(self, table: str) -> list[str]: ...

    def _announce(self, hooked: str | list[Any] | None) -> None:
        """Tell the dispatcher of the deliveries a statement queued (a JSON array of rows in
        WEBHOOK_DELIVERY_COLUMNS' order, or the rows themselves)."""
        if not hooked:
            return
        rows = jsonio.loads(hooked) if isinstance(hooked, str) else hooked
        self.webhooks_queued([WebhookDelivery(*row) for row in rows])

    async def _emit_in(self, conn: Connection, user_id: str, events: Sequence[WebhookEvent],
                       only: str | None = None) -> list[Any]:
        """Queue ``events`` inside the caller's transaction; the rows queued (announce them
        once it commits)."""
        if not events:
            return []
        rows: list[Any] = await conn.fetch(EMIT, user_id, only, self.clock(), self.process_id,
                                           *event_params(events, self._now()))
        return rows

    async def create_webhook(self, webhook: Webhook) -> None:
        """Register an endpoint."""
        async def run(conn: Connection) -> None:
            await conn.execute(
                f"INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)",
                webhook.id, webhook.user_id, webhook.url, list(webhook.events), webhook.secret,
                webhook.created_at)
        await self._transaction(run)

    async def list_webhooks(self, user_id: str) -> list[Webhook]:
        """The user's endpoints, oldest first."""
        async def run(conn: Connection) -> list[Webhook]:
            return [_webhook(row) for row in await conn.fetch(
                f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE user_id = $1"
                " ORDER BY created_at, id", user_id)]
        return await self._query(run)

    async def get_webhook(self, webhook_id: str) -> Webhook | None:
        """An endpoint by id, or None."""
        async def run(conn: Connection) -> Webhook | None:
            row = await conn.fetchrow(f"SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1",
                                      webhook_id)
            return _webhook(row) if row else None
        return await self._query(run)

    async def delete_webhook(self, user_id: str, webhook_id: str) -> bool:
        """Remove the user's endpoint and its deliveries; False if the user has none such."""
        async def run(conn: Connection) -> bool:
            return await conn.fetchval(
                "DELETE FROM webhooks WHERE id = $1 AND user_id = $2 RETURNING 1",
                webhook_id, user_id) is not None
        return await self._transaction(run)

    async def emit(self, user_id: str, events: Sequence[WebhookEvent],
                   only: str | None = None) -> int:
        """Queue ``events`` for the user's subscribed endpoints (``only``: for that one
        endpoint, subscribed or not), a change of its own; how many deliveries."""
        rows = await self._transaction(lambda conn: self._emit_in(conn, user_id, events, only))
        self._announce(rows)
        return len(rows)

    async def webhook_deliveries(self, user_id: str, webhook_id: str,
                                 limit: int) -> list[WebhookDelivery]:
        """The user's endpoint's delivery log, newest first (read through the user's
        deliveries: an index per endpoint would cost every turn a page write)."""
        async def run(conn: Connection) -> list[WebhookDelivery]:
            return [WebhookDelivery(*row) for row in await conn.fetch(
                f"SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries WHERE user_id = $1"
                " AND webhook = $2 ORDER BY id DESC LIMIT $3", user_id, webhook_id, limit)]
        return await self._query(run)

    async def webhook_pending(self) -> list[DueDelivery]:
        """The pending deliveries no live process sends (those of processes that died, or
        this one's from before a restart), taken over by this one; by when they are due."""
        dead = await self._dead_takers("webhook_deliveries")

        async def run(conn: Connection) -> list[DueDelivery]:
            rows = await conn.fetch(
                "UPDATE webhook_deliveries SET taken_by = $1 WHERE state = 'pending'"
                " AND (taken_by IS NULL OR taken_by = ANY($2::text[]))"
                " RETURNING next_attempt, id, webhook", self.process_id, dead)
            return sorted(DueDelivery(*row) for row in rows)
        return await self._query(run)

    async def webhook_delivery(self, delivery_id: int) -> WebhookDelivery | None:
        """One delivery, body included; None if it is gone (its endpoint was deleted)."""
        async def run(conn: Connection) -> WebhookDelivery | None:
            row = await conn.fetchrow(f"SELECT {WEBHOOK_DELIVERY_COLUMNS}"
                                      " FROM webhook_deliveries WHERE id = $1", delivery_id)
            return WebhookDelivery(*row) if row else None
        return await self._query(run)

    async def webhook_attempts(self, attempts: list[WebhookAttempt]) -> None:
        """Record attempts' outcomes, in order, in one statement (a delivery's latest
        outcome wins)."""
        latest = {attempt.delivery_id: attempt for attempt in attempts}

        async def run(conn: Connection) -> None:
            await conn.execute(
                "UPDATE webhook_deliveries d SET state = a.state, attempts = a.attempts,"
                " last_status = a.status, next_attempt = a.next_attempt, last_error = a.error"
                " FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[],"
                " $5::double precision[], $6::text[])"
                " AS a(id, state, attempts, status, next_attempt, error) WHERE d.id = a.id",
                *(list(column) for column in zip(*latest.values(), strict=True)))
        await self._transaction(run)
