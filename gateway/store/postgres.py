"""The PostgreSQL store (asyncpg): the same interface, method names and transaction boundaries
as :mod:`gateway.store.sqlite`, for deployments where several gateway processes share one
database.

Each method is one transaction (or one read) on a pooled connection. Migrations run at
``open()`` under a transaction-scoped advisory lock, so processes starting together apply each
one exactly once. A connection that breaks (a database restart) fails the operation in flight
with :class:`~gateway.errors.Unavailable` (503); the pool opens fresh connections for the next.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, TypeAlias, TypeVar

import asyncpg

from gateway.base import jsonio
from gateway.base.errors import BadRequest, Conflict, NotFound, Unavailable
from gateway.base.times import epoch_of, iso_utc
from gateway.store import policy, usage
from gateway.store.columns import (
    DELIVERY_COLUMNS,
    THREAD_COLUMNS,
    USER_COLUMNS,
    prefixed,
    title_columns,
    titled,
    user_of,
)
from gateway.store.postgres_access import AccessWatch
from gateway.store.postgres_admin import PostgresAdmin, append_audit
from gateway.store.postgres_jobs import PostgresJobs
from gateway.store.postgres_migrations import MIGRATIONS
from gateway.store.postgres_webhooks import (
    HOOKED_ROWS,
    PostgresWebhooks,
    credits_low_params,
    daily_low_params,
    event_params,
    queue_events,
)
from gateway.store.records import (
    REPLY_SLOT,
    USER_MESSAGE_SLOT,
    AuditEntry,
    Billing,
    ChannelMessage,
    Charge,
    Claim,
    Claimed,
    Delivery,
    DisplayMessage,
    Earlier,
    ExpiredThread,
    InboxEntry,
    Intake,
    LedgerEntry,
    Moment,
    SecretRecord,
    SessionState,
    SessionWrite,
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
    WebhookDelivery,
    WebhookEvent,
    WebSession,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Connection: TypeAlias = Any  # an asyncpg.Connection (asyncpg ships no type hints)
MIGRATION_LOCK = 0x636C6F7564796200  # "cloudyb\0": one advisory lock id for migrations
# Roles lock in the two-key space (class, hash), apart from the one-key space of thread locks.
ROLE_LOCKS = 0x636C6F75
CLOSE_SECONDS = 10.0

# asyncpg raises these when the server or the connection goes away mid-operation (a server
# shutting down or an administrator ending the session is an "operator intervention"; a
# connection cut mid-protocol can leave the client in a state it reports as internal).
_GONE = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
         asyncpg.exceptions.OperatorInterventionError, asyncpg.InternalClientError,
         ConnectionError, OSError)


def _user(row: asyncpg.Record) -> User:
    return user_of(row)


def _thread(row: asyncpg.Record, offset: int = 0) -> Thread:
    user_id, thread_id, key, channel, summary, tokens, version, created, updated = \
        row[offset:offset + 9]
    return Thread(ThreadRef(user_id, thread_id, key, channel), summary, tokens, version,
                  created, updated)


def _titled(row: asyncpg.Record, offset: int = 0) -> Thread:
    """A thread from ``THREAD_COLUMNS`` at ``offset`` and then its :func:`title_columns`."""
    return titled(_thread(row, offset), row[offset + 9], row[offset + 10])


def _tsquery(terms: Sequence[str]) -> str:
    """A text-search query matching text that holds a word starting with each of ``terms``
    (letters and digits only: nothing in them is query syntax)."""
    return " & ".join(f"'{term}':*" for term in terms)


# The words of a text as the display_messages.search column holds them (migration 9).
_WORDS = "to_tsvector('simple'::regconfig, regexp_replace({}, '[[:punct:]]+', ' ', 'g'))"

# A page of the user's threads whose title, or one of whose display messages, holds every
# term ($1), newest first from the cursor ($3, $4), each with its newest matching message
# (from the GIN index; a title the user set is tested as it is read: a user has few).
_SEARCH = f"""
WITH q AS (SELECT to_tsquery('simple'::regconfig, $1) AS q),
hit AS (
    SELECT d.thread, max(d.id) AS message FROM display_messages d, q
    WHERE d.search @@ q.q AND d.thread IN (SELECT id FROM threads WHERE user_id = $2)
    GROUP BY d.thread)
SELECT t.id, {THREAD_COLUMNS}, {title_columns("t")}, h.message,
       (SELECT m.content FROM display_messages m WHERE m.id = h.message)
FROM threads t LEFT JOIN hit h ON h.thread = t.id, q
WHERE t.user_id = $2 AND (t.updated_at, t.id) < ($3, $4)
  AND (h.message IS NOT NULL OR (t.title IS NOT NULL AND {_WORDS.format("t.title")} @@ q.q))
ORDER BY t.updated_at DESC, t.id DESC LIMIT $5"""


async def _get_user(conn: Connection, user_id: str) -> User:
    row = await conn.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE user_id = $1", user_id)
    if row is None:
        raise NotFound(f"no user {user_id!r}", code="user_not_found")
    return _user(row)


async def _thread_pk(conn: Connection, session_key: str) -> int | None:
    pk: int | None = await conn.fetchval("SELECT id FROM threads WHERE session_key = $1",
                                         session_key)
    return pk


async def _owned_pk(conn: Connection, ref: ThreadRef) -> int | None:
    """The thread's row id, None if it does not exist; NotFound if someone else owns it."""
    row = await conn.fetchrow("SELECT id, user_id FROM threads WHERE session_key = $1",
                              ref.session_key)
    if row is None:
        return None
    if row[1] != ref.user_id:
        raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
    return int(row[0])


async def _touch_thread(conn: Connection, ref: ThreadRef, now: str) -> int:
    """Create the thread or mark it updated, in one statement; NotFound if someone else's."""
    row = await conn.fetchrow(
        "INSERT INTO threads (session_key, user_id, thread_id, channel, created_at, updated_at)"
        " VALUES ($1, $2, $3, $4, $5, $5) ON CONFLICT (session_key) DO UPDATE SET"
        " updated_at = excluded.updated_at RETURNING id, user_id",
        ref.session_key, ref.user_id, ref.thread_id, ref.channel, now)
    if row[1] != ref.user_id:
        raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
    return int(row[0])


async def _pinned(conn: Connection, pk: int | None) -> dict[str, str]:
    if pk is None:
        return {}
    rows = await conn.fetch("SELECT key, value FROM pinned WHERE thread = $1 ORDER BY key", pk)
    return {row[0]: row[1] for row in rows}


async def _charge(conn: Connection, user_id: str, thread_key: str | None, charge: Charge,
                  now: str) -> None:
    await conn.execute(
        "WITH row AS (INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens,"
        " completion_tokens, credits, minutes, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9))"
        " UPDATE users SET credits = credits - $7, browser_minutes = browser_minutes - $8"
        " WHERE user_id = $1",
        user_id, thread_key, charge.kind, charge.model, charge.prompt_tokens,
        charge.completion_tokens, charge.credits, charge.minutes, now)


async def _grant(conn: Connection, user_id: str, grant: Charge | None, now: str) -> None:
    """Book ``grant`` (from :func:`policy.top_up`: None when nothing is granted)."""
    if grant is not None:
        await _charge(conn, user_id, None, grant, now)


class _Reply(NamedTuple):
    """A reply for the outbox: its text, when it was written, and the W3C trace context of
    what wrote it (stored text, or None)."""

    text: str
    at: Moment
    trace: str | None


# What the charges of CTE ``charges`` (kind, model, prompt_tokens, completion_tokens,
# credits, minutes, tool) come to, for the account's update and the rollups.
_SPENT = """spent AS (
  SELECT coalesce(sum(credits), 0) AS credits, coalesce(sum(minutes), 0) AS minutes,
         count(*) AS n FROM charges)"""


def _spend_set(day: str, now: str) -> str:
    """The SET list of the account's update for the charges of ``spent``: its balances,
    what it spent on ``day`` (counted afresh on a new day) and when it was last active; an
    update with no charges changes neither of the last two."""
    return f"""credits = credits - (SELECT credits FROM spent),
    browser_minutes = browser_minutes - (SELECT minutes FROM spent),
    spent_today = CASE WHEN (SELECT n FROM spent) = 0 THEN spent_today
                       WHEN spent_day = {day}::text THEN spent_today + (SELECT credits FROM spent)
                       ELSE (SELECT credits FROM spent) END,
    spent_day = CASE WHEN (SELECT n FROM spent) = 0 THEN spent_day ELSE {day}::text END,
    active_at = CASE WHEN (SELECT n FROM spent) = 0 THEN active_at ELSE {now}::text END"""


def _add_spend(table: str) -> str:
    return ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in (
        "calls", "prompt_tokens", "completion_tokens", "credits", "minutes"))


_SUMS = ("count(*) FILTER (WHERE c.model <> ''), sum(c.prompt_tokens), sum(c.completion_tokens),"
         " sum(c.credits), sum(c.minutes)")


def _rollup_ctes(user: str, channel: str, hour: str, day: str) -> str:
    """The CTEs adding the charges of ``charges`` to the usage rollups
    (:mod:`gateway.store.usage`), for the account ``user`` (SQL expressions all), once its
    update ``billed`` (returning its ``plan``) ran: a row per dimension and value in the
    hour's shard of the account, and the account's day."""
    return f"""hours AS (
  INSERT INTO usage_hours AS h (dim, hour, value, shard, calls, prompt_tokens,
                                completion_tokens, credits, minutes)
  SELECT d.dim, {hour}::text, d.value, hashtext({user}::text) & {usage.SHARDS - 1}, {_SUMS}
  FROM charges c CROSS JOIN billed
  CROSS JOIN LATERAL (VALUES ('plan', billed.plan), ('model', c.model),
                             ('channel', {channel}::text), ('tool', c.tool)) AS d(dim, value)
  GROUP BY d.dim, d.value
  ON CONFLICT (dim, hour, value, shard) DO UPDATE SET {_add_spend("h")}),
days AS (
  INSERT INTO usage_days AS u (month, user_id, day, calls, prompt_tokens, completion_tokens,
                               credits, minutes)
  SELECT substr({day}::text, 1, 7), {user}::text, {day}::text, {_SUMS}
  FROM charges c CROSS JOIN billed
  HAVING count(*) > 0
  ON CONFLICT (month, user_id, day) DO UPDATE SET {_add_spend("u")})"""


def _charge_arrays(charges: Sequence[Charge]) -> tuple[list[Any], ...]:
    """Charges as a statement's seven arrays (the columns of CTE ``charges``)."""
    return ([c.kind for c in charges], [c.model for c in charges],
            [c.prompt_tokens for c in charges], [c.completion_tokens for c in charges],
            [c.credits for c in charges], [c.minutes for c in charges],
            [c.tool for c in charges])


# Usage booked on its own (a failed turn's calls, browser minutes): the ledger rows, the
# account's balances and spending today, the rollups; the channel is the thread's.
_BOOK = """
WITH charges AS (
  SELECT * FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[],
                       $8::bigint[], $9::text[])
    AS c(kind, model, prompt_tokens, completion_tokens, credits, minutes, tool)),
ledgered AS (
  INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens, completion_tokens,
                      credits, minutes, created_at)
  SELECT $1, $2, c.kind, c.model, c.prompt_tokens, c.completion_tokens, c.credits,
         c.minutes, $10 FROM charges c),
""" + _SPENT + """,
billed AS (UPDATE users SET """ + _spend_set("$11", "$10") + """
  WHERE user_id = $1 RETURNING plan),
""" + _rollup_ctes("$1", "coalesce((SELECT channel FROM threads WHERE session_key = $2), '')",
                   "$12", "$11") + """
SELECT count(*) FROM billed"""


async def _book(conn: Connection, billing: Billing, now: str) -> None:
    """Book usage outside a commit's statement (see ``_BOOK``)."""
    if billing.charges:
        await conn.execute(_BOOK, billing.user_id, billing.thread_key,
                           *_charge_arrays(billing.charges), now, now[:10],
                           usage.hour_key(now))


async def _answer_inbox(conn: Connection, inbound: ChannelMessage, reply: _Reply,
                        process: str) -> bool:
    """Mark a pending inbox message answered and put its reply in the outbox, together;
    False if the message is not pending (unknown, or answered already)."""
    row = await conn.fetchrow(
        "UPDATE inbox SET state = 'done', payload = NULL"
        " WHERE channel = $1 AND message_id = $2 AND state = 'pending'"
        " RETURNING conversation, address, max_chars", *inbound)
    if row is None:
        return False
    await conn.execute(
        "INSERT INTO outbox (channel, message_id, conversation, address, text, max_chars, state,"
        " next_attempt, created, updated_at, taken_by, trace) VALUES ($1, $2, $3, $4, $5, $6,"
        " 'pending', $7, $7, $8, $9, $10)", *inbound, row[0], row[1], reply.text, row[2],
        reply.at.epoch, reply.at.iso, process, reply.trace)
    return True


async def _queue_own(conn: Connection, entry: InboxEntry, text: str, at: Moment,
                     process: str) -> bool:
    """Put a message that answers no inbound one in the outbox (with ``entry.trace``),
    recorded in the inbox under ``entry``'s channel and id so that it is queued once; False
    if that id was taken."""
    taken = await conn.fetchval(
        "INSERT INTO inbox (channel, message_id, conversation, state, address, max_chars,"
        " received_at, taken_by) VALUES ($1, $2, $3, 'pending', $4, $5, $6, $7)"
        " ON CONFLICT (channel, message_id) DO NOTHING RETURNING id", entry.channel,
        entry.message_id, entry.conversation, entry.address, entry.max_chars, at.iso, process)
    return taken is not None and await _answer_inbox(
        conn, ChannelMessage(entry.channel, entry.message_id), _Reply(text, at, entry.trace),
        process)


# The active session's size, last write and replay window (lines of the replies from the
# oldest message in rolling memory on), for Store.load_turn: $2 is the session key.
SESSION_STATE = """
(SELECT json_build_array(s.bytes, s.last_write, ARRAY(
   SELECT l.line FROM session_lines l
   WHERE l.session = s.id AND l.reply_id >= (
     SELECT min(m.id) FROM messages m JOIN threads t ON t.id = m.thread
     WHERE t.session_key = $2)
   ORDER BY l.n))
 FROM sessions s WHERE s.key = $2 AND s.archived IS NULL)"""

# What a turn reads, as one statement: the account, the thread, its rolling messages and
# pinned keys, the specialist's instructions and the saved logins.
_LOAD_TURN = f"""
SELECT
  (SELECT row_to_json(u) FROM (SELECT {USER_COLUMNS} FROM users WHERE user_id = $1) u)
    AS account,
  (SELECT row_to_json(t) FROM (SELECT {THREAD_COLUMNS} FROM threads WHERE session_key = $2) t)
    AS thread,
  (SELECT coalesce(json_agg(json_build_array(m.id, m.role, m.content, m.tokens) ORDER BY m.id),
                   '[]')
     FROM messages m JOIN threads t ON t.id = m.thread WHERE t.session_key = $2) AS messages,
  (SELECT coalesce(json_object_agg(p.key, p.value), '{{}}')
     FROM pinned p JOIN threads t ON t.id = p.thread WHERE t.session_key = $2) AS pinned,
  (SELECT instructions FROM specialists WHERE user_id = $1 AND name = $3::text)
    AS instructions,
  ARRAY(SELECT site FROM browser_credentials WHERE user_id = $1 ORDER BY site) AS sites,
  ARRAY(SELECT secret FROM browser_credentials WHERE user_id = $1 ORDER BY site) AS secrets,
  NULL::json AS claimed,
  {SESSION_STATE} AS session
"""


def _claim_cte(user: int, first: int) -> str:
    """The CTE ``claim`` of a statement whose parameter ``$user`` is the account and ``$first``
    onwards are :func:`_claim_params`'s (the hold, its need, the counted plans, now, when the
    hold expires, the window's start): a claim recorded on the
    account row, under the row's lock, whatever the rules will say of it. It returns the row
    as the claim left it (``credits``, ``plan``, ``rate_hits``, ``holds`` and what its daily
    cap counts) for :func:`_judge`;
    what the rules refuse :data:`_TAKE_BACK` undoes.

    Recorded: the request at ``now``, last in ``rate_hits``, when the account's plan is one of
    ``counted``; the hold ``hold`` of ``need`` credits until ``expires``, as ``[need, expires,
    previous need, previous expires]`` (the hold's previous state: NULLs if it had none).
    Forgotten on the way: what the rules no longer count (requests at or before
    ``window_start``, holds expired at ``now``). An UPDATE's expressions see the row's latest
    version, whatever another process just wrote."""
    user_ = f"${user}"
    hold, need, counted, now, expires, window_start = (f"${first + n}" for n in range(6))
    return f"""claim AS (
  UPDATE users SET
    rate_hits = ARRAY(SELECT h FROM unnest(rate_hits) AS h WHERE h > {window_start} ORDER BY h)
                || CASE WHEN plan = ANY({counted}::text[]) THEN ARRAY[{now}::float8]
                        ELSE '{{}}'::float8[] END,
    holds = (SELECT coalesce(jsonb_object_agg(k, v), '{{}}') FROM jsonb_each(holds) AS e(k, v)
             WHERE k <> {hold}::text AND (v ->> 1)::float8 > {now})
            || jsonb_build_object({hold}::text, jsonb_build_array(
                 {need}::bigint, {expires}::float8, holds -> {hold}::text -> 0,
                 holds -> {hold}::text -> 1))
  WHERE user_id = {user_}
  RETURNING credits, plan, rate_hits, holds, daily_credits, spent_day, spent_today)
"""


# The same read, claiming the turn's quotas (see gateway.billing.shared_quotas) on the way.
_LOAD_AND_CLAIM = "WITH " + _claim_cte(1, 4) + \
    _LOAD_TURN.replace("NULL::json AS claimed",
                       "(SELECT row_to_json(c) FROM claim c) AS claimed")
_CLAIM = ("WITH " + _claim_cte(1, 2)
          + "SELECT row_to_json(c) FROM claim c")
# What the rules refused of a claim its statement recorded: the admission's hold back to what
# it was ($3: [credits, expires], or none), and the request ($4) no longer counted.
_TAKE_BACK = """
UPDATE users SET
  holds = CASE WHEN $3::jsonb IS NULL THEN holds - $2::text
               ELSE holds || jsonb_build_object($2::text, $3::jsonb) END,
  rate_hits = CASE WHEN $4::float8 IS NULL THEN rate_hits
                   ELSE coalesce(rate_hits[:array_position(rate_hits, $4::float8) - 1]
                                 || rate_hits[array_position(rate_hits, $4::float8) + 1:],
                                 rate_hits) END
WHERE user_id = $1"""
async def _drop_last_exchange(conn: Connection, session_key: str,
                              message_ids: tuple[int, ...]) -> None:
    """Delete the thread's last exchange (a turn replaces it): its rolling messages by id and
    as many of the newest display messages; Conflict if they are not there any more."""
    dropped = await conn.fetchval(
        "WITH t AS (SELECT id FROM threads WHERE session_key = $1),"
        " gone AS (DELETE FROM messages WHERE thread = (SELECT id FROM t)"
        " AND id = ANY($2::bigint[]) RETURNING id),"
        " shown AS (DELETE FROM display_messages WHERE id IN (SELECT id FROM display_messages"
        " WHERE thread = (SELECT id FROM t) ORDER BY id DESC LIMIT $3))"
        " SELECT count(*) FROM gone", session_key, list(message_ids), len(message_ids))
    if dropped != len(message_ids):
        raise Conflict("the thread's last exchange changed meanwhile", code="nothing_to_replace")


_RELEASE = "UPDATE users SET holds = holds - $2::text WHERE user_id = $1"


# A turn's commit, as one statement. Every write depends on ``ok``: the thread is the
# owner's (the upsert returns no row for someone else's) and, when the turn answers a channel
# message, that message was still pending (its inbox row moved to done here). credits.low
# ($29-$32) is queued when the balance it leaves is in the window the rules gave, and
# ($36-$38) when today's spending ($34: the day) reaches the threshold the rules gave; the
# usage rollups take the charges (their tools: $33) in hour $35; the reply's outbox row
# keeps the turn's trace context ($39).
_COMMIT_TURN = """
WITH thread AS (
  INSERT INTO threads (session_key, user_id, thread_id, channel, created_at, updated_at)
  VALUES ($1, $2, $3, $4, $5, $5)
  ON CONFLICT (session_key) DO UPDATE SET updated_at = excluded.updated_at
    WHERE threads.user_id = excluded.user_id
  RETURNING id),
answered AS (
  UPDATE inbox SET state = 'done', payload = NULL
  WHERE $9::text IS NOT NULL AND channel = $9 AND message_id = $10 AND state = 'pending'
    AND EXISTS (SELECT 1 FROM thread)
  RETURNING conversation, address, max_chars),
ok AS (
  SELECT thread.id FROM thread
  WHERE $9::text IS NULL OR EXISTS (SELECT 1 FROM answered)),
new AS (
  SELECT * FROM unnest($6::text[], $7::text[], $8::bigint[]) WITH ORDINALITY
    AS n(role, content, tokens, ord)),
shown AS (
  INSERT INTO display_messages (thread, role, content, created_at)
  SELECT ok.id, new.role, new.content, $5 FROM ok, new ORDER BY new.ord),
kept AS (
  INSERT INTO messages (thread, role, content, tokens)
  SELECT ok.id, new.role, new.content, new.tokens FROM ok, new ORDER BY new.ord
  RETURNING id),
queued AS (
  INSERT INTO outbox (channel, message_id, conversation, address, text, max_chars, state,
                      next_attempt, created, updated_at, taken_by, trace)
  SELECT $9, $10, conversation, address, $11, max_chars, 'pending', $12, $12, $5, $21, $39
  FROM answered, ok),
charges AS (
  SELECT * FROM unnest($13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::bigint[],
                       $18::bigint[], $33::text[])
    AS c(kind, model, prompt_tokens, completion_tokens, credits, minutes, tool)),
ledgered AS (
  INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens, completion_tokens,
                      credits, minutes, created_at)
  SELECT $19, $1, c.kind, c.model, c.prompt_tokens, c.completion_tokens, c.credits,
         c.minutes, $5 FROM charges c, ok),
""" + _SPENT + """,
billed AS (
  UPDATE users SET """ + _spend_set("$34", "$5") + """,
                   holds = holds - coalesce($20::text, '')
  WHERE user_id = $19 AND EXISTS (SELECT 1 FROM ok)
  RETURNING credits, plan, spent_today),
""" + _rollup_ctes("$19", "$4", "$35", "$34") + """,
events AS (
  SELECT e.type, e.body, $2::text AS owner
  FROM unnest($27::text[], $28::text[]) AS e(type, body), ok
  UNION ALL
  SELECT 'credits.low', $31::text || billed.credits || $32::text, $19
  FROM billed WHERE billed.credits BETWEEN $29::bigint AND $30::bigint
  UNION ALL
  SELECT 'credits.low', $37::text || billed.spent_today || $38::text, $19
  FROM billed WHERE (SELECT credits FROM spent) > 0 AND billed.spent_today >= $36::bigint
    AND billed.spent_today - (SELECT credits FROM spent) < $36::bigint),
""" + queue_events(due="$12", taker="$21") + """,
ids AS (SELECT min(id) AS question, max(id) AS reply FROM kept),
lines AS (
  SELECT x.ord,
         replace(replace(replace(x.line, '"messageId":-1', '"messageId":' || ids.question),
                         '"messageId":-2', '"messageId":' || ids.reply),
                 '"replyId":-2', '"replyId":' || ids.reply) AS line,
         CASE WHEN x.replay THEN ids.reply END AS reply_id
  FROM unnest($22::text[], $23::boolean[]) WITH ORDINALITY AS x(line, replay, ord), ids, ok),
session AS (
  INSERT INTO sessions AS cur (key, user_id, thread_id, bytes, last_write)
  SELECT $1, $24, $25, octet_length($26::text) + 1
                       + (SELECT sum(octet_length(line) + 1) FROM lines), $12
  WHERE EXISTS (SELECT 1 FROM lines)
  ON CONFLICT (key) WHERE archived IS NULL
  DO UPDATE SET bytes = cur.bytes + excluded.bytes - octet_length($26::text) - 1,
                last_write = excluded.last_write
  RETURNING id, (xmax = 0) AS created),
top AS (SELECT coalesce(max(n), 0) AS n FROM session_lines
        WHERE session = (SELECT id FROM session)),
session_written AS (
  INSERT INTO session_lines (session, n, reply_id, line)
  SELECT session.id, top.n + 1, NULL, $26 FROM session, top WHERE session.created
  UNION ALL
  SELECT session.id, top.n + 1 + lines.ord, lines.reply_id, lines.line
  FROM session, top, lines)
SELECT EXISTS (SELECT 1 FROM thread) AS touched, EXISTS (SELECT 1 FROM ok) AS written,
       ARRAY(SELECT id FROM kept ORDER BY id) AS ids, """ + HOOKED_ROWS + """ AS hooked
"""
assert (USER_MESSAGE_SLOT, REPLY_SLOT) == (-1, -2)  # the slots _COMMIT_TURN replaces


# A summarization's commit, as one statement: its writes depend on the version check (the
# thread's UPDATE returning a row); the hold is released whatever the check said.
# credits.low ($17-$20, $26-$28) and the rollups ($23-$25) as in _COMMIT_TURN.
_COMMIT_SUMMARY = """
WITH thread AS (
  UPDATE threads SET summary = $1, summary_tokens = $2, summary_version = summary_version + 1
  WHERE session_key = $3 AND summary_version = $4 RETURNING id, user_id, channel),
folded AS (
  DELETE FROM messages WHERE thread = (SELECT id FROM thread) AND id <= $5),
charges AS (
  SELECT $8::text AS kind, $9::text AS model, $10::bigint AS prompt_tokens,
         $11::bigint AS completion_tokens, $12::bigint AS credits, $13::bigint AS minutes,
         $23::text AS tool
  WHERE EXISTS (SELECT 1 FROM thread)),
ledgered AS (
  INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens, completion_tokens,
                      credits, minutes, created_at)
  SELECT $6, $3, c.kind, c.model, c.prompt_tokens, c.completion_tokens, c.credits,
         c.minutes, $14 FROM charges c),
""" + _SPENT + """,
billed AS (
  UPDATE users SET """ + _spend_set("$24", "$14") + """,
                   holds = holds - coalesce($7::text, '')
  WHERE user_id = $6
  RETURNING credits, plan, spent_today),
""" + _rollup_ctes("$6", "(SELECT channel FROM thread)", "$25", "$24") + """,
events AS (
  SELECT e.type, e.body, thread.user_id AS owner
  FROM unnest($15::text[], $16::text[]) AS e(type, body), thread
  UNION ALL
  SELECT 'credits.low', $19::text || billed.credits || $20::text, $6
  FROM billed, thread WHERE billed.credits BETWEEN $17::bigint AND $18::bigint
  UNION ALL
  SELECT 'credits.low', $27::text || billed.spent_today || $28::text, $6
  FROM billed WHERE (SELECT credits FROM spent) > 0 AND billed.spent_today >= $26::bigint
    AND billed.spent_today - (SELECT credits FROM spent) < $26::bigint),
""" + queue_events(due="$21", taker="$22") + """
SELECT EXISTS (SELECT 1 FROM thread) AS applied, """ + HOOKED_ROWS + """ AS hooked
"""


class _QueryConnection(asyncpg.Connection):  # type: ignore[misc]
    """A query pool's connection: handed back as it is. Store calls leave no session state
    (no LISTEN, no SET, no cursor, no advisory lock: those live on the lock pool), so the
    reset asyncpg sends by default on every release would be a round trip for nothing."""

    def get_reset_query(self) -> str:
        """Nothing to reset."""
        return ""


class _AdvisoryLock:
    """A thread's turn lock held in PostgreSQL (a session advisory lock on a connection of its
    own): another process's turn on the thread waits for it, and it dies with the connection
    if this process does."""

    def __init__(self, pool: asyncpg.Pool, conn: Connection) -> None:
        self._pool = pool
        self._conn = conn

    async def release(self) -> None:
        """Give the connection back: the pool's reset on release (``pg_advisory_unlock_all``)
        is the unlock, in the same round trip; a lost connection lost its locks too."""
        await self._pool.release(self._conn)


class _Leadership:
    """A role held as a session advisory lock on a connection of its own."""

    def __init__(self, pool: asyncpg.Pool, conn: Connection, role: str) -> None:
        self._pool = pool
        self._conn = conn
        self._role = role
        self._released = False

    async def alive(self) -> bool:
        """One round trip on the lock's connection: still connected means still held."""
        if self._released:
            return False
        try:
            await self._conn.execute("SELECT 1")
        except _GONE:
            await self.release()
            return False
        return True

    async def release(self) -> None:
        """Step down and give the connection back (idempotent)."""
        if self._released:
            return
        self._released = True
        try:
            await self._conn.execute("SELECT pg_advisory_unlock($1, hashtext($2))", ROLE_LOCKS,
                                     self._role)
        except _GONE:
            pass
        finally:
            await self._pool.release(self._conn)


def _session_params(write: SessionWrite | None) -> tuple[Any, ...]:
    """$22-$26 of _COMMIT_TURN: the turn's session lines, replay marks, owner, thread and
    header (no lines: no session written)."""
    if write is None:
        return [], [], "", "", ""
    return write.lines, write.replay, write.user_id, write.thread_id, write.header


def _life_role(process_id: str) -> str:
    return f"process:{process_id}"


def _claim_params(claim: Claim) -> tuple[Any, ...]:
    """A claim's parameters to :func:`_claim_cte`, after the account's: its hold, what it
    holds, the plans it counts requests of, now, when its hold expires, the window's start."""
    return (claim.hold_id, claim.credits, policy.counted_plans(claim.rate_limits), claim.now,
            claim.expires, policy.rate_window_start(claim.now))


async def _judge(conn: Connection, user_id: str, claim: Claim, spent: int,
                 found: str | None) -> Claimed:
    """The rules' verdict (:func:`policy.judge_claim`) on a claim its statement recorded, from
    the account row as that statement left it (``found``, JSON; None: no account), of which
    ``spent`` is charged already; what they refused is taken back at once. Until then other
    claims count it, which can only make them refuse more, never overspend."""
    if found is None:
        return Claimed(False, 0.0, False, 0)
    row = jsonio.loads(found)
    holds, plan, hits = row["holds"], row["plan"], row["rate_hits"]
    counted = plan in policy.counted_plans(claim.rate_limits)
    cap = policy.daily_cap((claim.daily_caps or {}).get(plan, 0), row["daily_credits"])
    daily = policy.daily_allowance(cap, User(user_id, plan, row["credits"], 0, "", "",
                                             spent_day=row["spent_day"],
                                             spent_today=row["spent_today"]),
                                   policy.day_of(claim.now))
    before = policy.Account(row["credits"], plan, hits[:-1] if counted else hits, holds,
                            daily)
    claimed = policy.judge_claim(before, claim.hold_id, spent, claim.rate_limits, claim.now)
    entry = holds[claim.hold_id]
    recorded, previous = entry[:2], (None if entry[2] is None else entry[2:])
    kept = policy.hold_after(claimed.held, previous, recorded)
    uncounted = counted and not claimed.rate_ok
    if kept is not recorded or uncounted:
        await conn.execute(_TAKE_BACK, user_id, claim.hold_id,
                           None if kept is None else jsonio.dumps(kept).decode(),
                           claim.now if uncounted else None)
    return claimed


class PostgresStore(PostgresWebhooks, PostgresJobs, PostgresAdmin):
    """Everything the gateway stores, in one PostgreSQL database (see the module docstring)."""

    shared = True  # any number of gateway processes

    def __init__(self, url: str, clock: Callable[[], float] = time.time,
                 pool_size: int = 10,
                 observe_statements: Callable[[str], None] | None = None,
                 revocation_check_seconds: float = 10.0) -> None:
        """``observe_statements``, if given, is told each statement sent (the benchmark counts
        a turn's round trips with it); ``revocation_check_seconds``: how often the revocation
        counter is read, in case a notification was lost (:mod:`.postgres_access`)."""
        self.url = url
        self._access = AccessWatch(url, revocation_check_seconds)
        self._observe = observe_statements
        self.clock = clock
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._locks: asyncpg.Pool | None = None  # connections that hold turn locks
        # This process, to the others: the inbox and outbox rows it took are its own while
        # its life lock is held (from open() until it closes or dies).
        self.process_id = ""  # a new one each open(): a new life
        # Told of the webhook deliveries each commit queued (the gateway's dispatcher).
        self.webhooks_queued: Callable[[list[WebhookDelivery]], None] = lambda queued: None
        self._life: _Leadership | None = None

    def _now(self) -> str:
        return iso_utc(self.clock())

    def _moment(self) -> Moment:
        epoch = self.clock()
        return Moment(epoch, iso_utc(epoch))

    # --- plumbing ---------------------------------------------------------------
    async def open(self) -> None:
        """Connect the pool and apply pending migrations (one process at a time)."""
        try:
            init = self._observed if self._observe is not None else None
            self._pool = await asyncpg.create_pool(self.url, min_size=1,
                                                   max_size=self.pool_size,
                                                   connection_class=_QueryConnection, init=init)
            # Held for a turn's whole length, so never the connections its queries need.
            self._locks = await asyncpg.create_pool(self.url, min_size=0,
                                                    max_size=self.pool_size, init=init)
        except (*_GONE, asyncpg.PostgresError) as exc:
            await self.close()
            raise Unavailable(f"cannot connect to PostgreSQL: {exc}") from None
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_version"
                               " (version BIGINT NOT NULL)")
            version = await conn.fetchval("SELECT max(version) FROM schema_version") or 0
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                await conn.execute(script)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
        self.process_id = secrets.token_hex(8)
        self._life = await self.try_lead(_life_role(self.process_id))
        try:
            await self._access.start()
        except (*_GONE, asyncpg.PostgresError) as exc:
            await self.close()
            raise Unavailable(f"cannot listen on PostgreSQL: {exc}") from None

    async def _observed(self, conn: Connection) -> None:
        observe = self._observe
        assert observe is not None
        conn.add_query_logger(lambda logged: observe(logged.query))

    async def close(self) -> None:
        """Close the pools (idempotent). Connections holding turn locks or roles are cut
        (their locks end with them); queries get ``CLOSE_SECONDS`` to finish."""
        await self._access.stop()
        locks, pool, self._locks, self._pool = self._locks, self._pool, None, None
        if locks is not None:
            locks.terminate()
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), CLOSE_SECONDS)
            except TimeoutError:
                log.warning("PostgreSQL: queries still running after %g s; cut", CLOSE_SECONDS)
                pool.terminate()

    def _live_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the store is not open")
        return self._pool

    async def _transaction(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction; a lost connection is a 503."""
        try:
            async with self._live_pool().acquire() as conn, conn.transaction():
                return await work(conn)
        except _GONE as exc:
            raise Unavailable(f"the database connection was lost: {exc}") from None

    async def _query(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``work`` on a pooled connection, without a transaction of its own (BEGIN and
        COMMIT would be two more round trips): reads, and writes that are one statement.
        Each statement sees committed data; what must agree is one statement (as the
        turn's read is)."""
        try:
            async with self._live_pool().acquire() as conn:
                return await work(conn)
        except _GONE as exc:
            raise Unavailable(f"the database connection was lost: {exc}") from None

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
        async def run(conn: Connection) -> tuple[User, bool]:
            now = self._now()
            created = await conn.fetchval(
                "INSERT INTO users (user_id, plan, credits, browser_minutes, created_at, period)"
                " VALUES ($1, $2, 0, 0, $3, $4) ON CONFLICT (user_id) DO NOTHING RETURNING 1",
                user_id, plan, now, policy.opening_period(period, now)) is not None
            grant = policy.opening_grant(credits, browser_minutes)
            if created and grant is not None:
                await _charge(conn, user_id, None, grant, now)
            return await _get_user(conn, user_id), created
        return await self._transaction(run)

    async def get_user(self, user_id: str) -> User | None:
        """The account, or None."""
        async def run(conn: Connection) -> User | None:
            row = await conn.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE user_id = $1",
                                      user_id)
            return _user(row) if row else None
        return await self._query(run)

    async def list_users(self, limit: int, after: str | None = None) -> list[User]:
        """Up to ``limit`` accounts by user id, from the first after ``after``."""
        async def run(conn: Connection) -> list[User]:
            return [user_of(row) for row in await conn.fetch(
                f"SELECT {USER_COLUMNS} FROM users WHERE user_id > $1 ORDER BY user_id"
                " LIMIT $2", after or "", limit)]
        return await self._query(run)

    async def user_counts(self, user_id: str) -> dict[str, int]:
        """How much an account holds (see the Store protocol)."""
        async def run(conn: Connection) -> dict[str, int]:
            row = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM threads WHERE user_id = $1) AS threads,"
                " (SELECT count(*) FROM api_tokens WHERE user_id = $1) AS tokens,"
                " (SELECT count(*) FROM web_sessions WHERE user_id = $1) AS sessions,"
                " (SELECT count(*) FROM specialists WHERE user_id = $1) AS specialists,"
                " (SELECT count(*) FROM browser_credentials WHERE user_id = $1) AS logins,"
                " (SELECT count(*) FROM webhooks WHERE user_id = $1) AS webhooks,"
                " (SELECT count(*) FROM jobs WHERE user_id = $1) AS jobs", user_id)
            return {name: int(value) for name, value in row.items()}
        return await self._query(run)

    async def revoke_access(self, user_id: str) -> int:
        """End every API token, dashboard session and sign-in link of the account."""
        async def run(conn: Connection) -> int:
            gone = 0
            for table in ("api_tokens", "web_sessions", "login_links"):
                gone += len(await conn.fetch(
                    f"DELETE FROM {table} WHERE user_id = $1 RETURNING 1", user_id))
            return gone
        try:
            return await self._transaction(run)
        finally:
            self._access.changed()  # here at once; other processes when it commits

    async def delete_user(self, user_id: str) -> bool:
        """Remove the account and all held about it, in one transaction (PostgreSQL reclaims
        the space at its next vacuum)."""
        async def run(conn: Connection) -> bool:
            keys = [row[0] for row in await conn.fetch(
                "SELECT session_key FROM threads WHERE user_id = $1", user_id)]
            await conn.execute("DELETE FROM inbox WHERE conversation = ANY($1::text[])", keys)
            await conn.execute("DELETE FROM outbox WHERE conversation = ANY($1::text[])", keys)
            await conn.execute("DELETE FROM webhook_deliveries WHERE user_id = $1", user_id)
            await conn.execute("DELETE FROM sessions WHERE user_id = $1", user_id)
            return await conn.fetchval("DELETE FROM users WHERE user_id = $1 RETURNING 1",
                                       user_id) is not None
        try:
            return await self._transaction(run)
        finally:
            self._access.changed()

    async def grant_credits(self, user_id: str, credits: int, audit: AuditEntry | None = None,
                            kind: str = "grant") -> User:
        """Add ``credits`` (a ledger row of ``kind``), with ``audit`` appended to the audit
        log in the same transaction; raise ``NotFound`` if no account."""
        async def run(conn: Connection) -> User:
            await _get_user(conn, user_id)
            now = self._now()
            await _charge(conn, user_id, None, Charge(kind, "", 0, 0, -credits), now)
            if audit is not None:
                await append_audit(conn, audit, now)
            return await _get_user(conn, user_id)
        return await self._transaction(run)

    async def replace_token(self, user_id: str, token_hash: str) -> None:
        """Make ``token_hash`` the account's only API token."""
        async def run(conn: Connection) -> None:
            await _get_user(conn, user_id)
            await conn.execute("DELETE FROM api_tokens WHERE user_id = $1", user_id)
            await conn.execute("INSERT INTO api_tokens VALUES ($1, $2, $3)",
                               token_hash, user_id, self._now())
        try:
            await self._transaction(run)
        finally:
            self._access.changed()

    async def user_for_token(self, token_hash: str) -> User | None:
        """The account owning this token hash, or None."""
        async def run(conn: Connection) -> User | None:
            row = await conn.fetchrow(
                f"SELECT {prefixed(USER_COLUMNS, 'u')}"
                " FROM api_tokens t JOIN users u USING (user_id) WHERE t.token_hash = $1",
                token_hash)
            return _user(row) if row else None
        return await self._query(run)

    async def access_epoch(self) -> int:
        """This process's access epoch, from memory (see :mod:`.postgres_access`): moved on
        by this process's revocations at once, by other processes' when their notification
        arrives, at worst when the counter is next read."""
        return self._access.epoch

    async def roll_period(self, user_id: str, expected: str, period: str, credits: int,
                          minutes: int) -> User:
        """Start ``period`` for the user if still in ``expected``: top the balances up to the
        plan's amounts (a ``monthly_grant`` row). Idempotent across processes: the first
        update moves the period, any later one finds it moved and changes nothing."""
        async def run(conn: Connection) -> User:
            moved = await conn.fetchval(
                "UPDATE users SET period = $1 WHERE user_id = $2 AND period = $3 RETURNING 1",
                period, user_id, expected) is not None
            user = await _get_user(conn, user_id)
            if moved:
                await _grant(conn, user_id,
                             policy.top_up(user, credits, minutes, "monthly_grant"), self._now())
                user = await _get_user(conn, user_id)
            return user
        return await self._transaction(run)

    async def set_plan(self, user_id: str, plan: str, credits: int, minutes: int) -> User:
        """Move the user to ``plan``, topping the balances up to its amounts at once."""
        async def run(conn: Connection) -> User:
            await _get_user(conn, user_id)
            await conn.execute("UPDATE users SET plan = $1 WHERE user_id = $2", plan, user_id)
            grant = policy.top_up(await _get_user(conn, user_id), credits, minutes, "plan_grant")
            await _grant(conn, user_id, grant, self._now())
            return await _get_user(conn, user_id)
        return await self._transaction(run)

    async def charge_minutes(self, user_id: str, thread_key: str | None, minutes: int,
                             what: str = "browser") -> User:
        """Take metered browser minutes (a ledger row of kind ``what``)."""
        async def run(conn: Connection) -> User:
            await _get_user(conn, user_id)
            await _book(conn, Billing(user_id, thread_key, [
                Charge(what, "", 0, 0, 0, minutes, tool=what)]), self._now())
            return await _get_user(conn, user_id)
        return await self._transaction(run)

    async def take_minutes(self, user_id: str, thread_key: str | None, minutes: int) -> int:
        """Take up to ``minutes`` browser minutes, never more than the balance holds (the
        user's row locked meanwhile: other processes' sessions wait their turn)."""
        async def run(conn: Connection) -> int:
            left = await conn.fetchval(
                "SELECT browser_minutes FROM users WHERE user_id = $1 FOR UPDATE", user_id)
            if left is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            taken = policy.minutes_to_take(int(left), minutes)
            if taken > 0:
                await _book(conn, Billing(user_id, thread_key, [
                    Charge("browser", "", 0, 0, 0, taken, tool="browser")]), self._now())
            return taken
        return await self._transaction(run)

    async def ledger_page(self, user_id: str, limit: int, before: int | None
                          ) -> tuple[list[LedgerEntry], int | None]:
        """Up to ``limit`` ledger rows older than ``before``, newest first, and the next
        cursor."""
        async def run(conn: Connection) -> tuple[list[LedgerEntry], int | None]:
            rows = await conn.fetch(
                "SELECT id, thread_key, kind, model, prompt_tokens, completion_tokens, credits,"
                " minutes, created_at FROM ledger WHERE user_id = $1 AND id < $2"
                " ORDER BY id DESC LIMIT $3",
                user_id, before if before is not None else 2**62, limit + 1)
            entries = [LedgerEntry(r[0], r[1], Charge(*r[2:8]), r[8]) for r in rows[:limit]]
            return entries, (entries[-1].id if len(rows) > limit else None)
        return await self._query(run)

    async def ledger_totals(self, user_id: str, since: str) -> dict[str, Charge]:
        """Per-kind sums of the user's ledger rows from ``since`` (ISO time) on."""
        async def run(conn: Connection) -> dict[str, Charge]:
            rows = await conn.fetch(
                "SELECT kind, count(*), sum(prompt_tokens)::bigint,"
                " sum(completion_tokens)::bigint, sum(credits)::bigint, sum(minutes)::bigint"
                " FROM ledger WHERE user_id = $1 AND created_at >= $2"
                " GROUP BY kind ORDER BY kind", user_id, since)
            return {r[0]: Charge(r[0], str(r[1]), r[2], r[3], r[4], r[5]) for r in rows}
        return await self._query(run)

    async def ledger_daily(self, user_id: str, since: str) -> list[tuple[str, str, int, int]]:
        """What the user spent per UTC day and kind from ``since`` (ISO time) on, grants left
        out: (``YYYY-MM-DD``, kind, credits, browser minutes), oldest day first."""
        async def run(conn: Connection) -> list[tuple[str, str, int, int]]:
            rows = await conn.fetch(
                "SELECT substr(created_at, 1, 10) AS day, kind, sum(credits)::bigint,"
                " sum(minutes)::bigint FROM ledger WHERE user_id = $1 AND created_at >= $2"
                " AND (credits > 0 OR minutes > 0) GROUP BY day, kind ORDER BY day, kind",
                user_id, since)
            return [(r[0], r[1], r[2], r[3]) for r in rows]
        return await self._query(run)

    # --- retention -----------------------------------------------------------------------
    async def expired_threads(self, cutoffs: dict[str, str]) -> list[ExpiredThread]:
        """Threads not updated since their owner's plan cutoff (``{plan: ISO time}``)."""
        async def run(conn: Connection) -> list[ExpiredThread]:
            expired = []
            for plan, cutoff in cutoffs.items():
                rows = await conn.fetch(
                    "SELECT t.session_key, t.user_id, u.plan, t.updated_at FROM threads t"
                    " JOIN users u USING (user_id) WHERE u.plan = $1 AND t.updated_at < $2"
                    " ORDER BY t.updated_at", plan, cutoff)
                expired += [ExpiredThread(*row) for row in rows]
            return expired
        return await self._query(run)

    async def prune_inbound(self, before: str) -> int:
        """Forget answered channel messages received before ``before``, failed deliveries
        recorded before it, and webhook deliveries (delivered or failed) queued before it;
        return how many."""
        async def run(conn: Connection) -> int:
            inbox = await conn.fetchval(
                "WITH gone AS (DELETE FROM inbox WHERE received_at < $1 AND state = 'done'"
                " RETURNING 1) SELECT count(*) FROM gone", before)
            outbox = await conn.fetchval(
                "WITH gone AS (DELETE FROM outbox WHERE updated_at < $1 AND state = 'failed'"
                " RETURNING 1) SELECT count(*) FROM gone", before)
            hooks = await conn.fetchval(
                "WITH gone AS (DELETE FROM webhook_deliveries WHERE created < $1"
                " AND state <> 'pending' RETURNING 1) SELECT count(*) FROM gone",
                epoch_of(before))
            return int(inbox + outbox + hooks)
        return await self._transaction(run)

    # --- threads and pinned memory ---------------------------------------------
    async def get_thread(self, session_key: str) -> Thread | None:
        """The thread with this session key, or None."""
        async def run(conn: Connection) -> Thread | None:
            row = await conn.fetchrow(
                f"SELECT {THREAD_COLUMNS}, {title_columns('threads')} FROM threads"
                " WHERE session_key = $1", session_key)
            return _titled(row) if row else None
        return await self._query(run)

    async def list_threads(self, user_id: str, limit: int = 50,
                           before: tuple[str, int] | None = None,
                           ) -> tuple[list[Thread], tuple[str, int] | None]:
        """Up to ``limit`` of the user's threads updated before the cursor ``before``, most
        recent first, and the next cursor (None on the last page)."""
        async def run(conn: Connection) -> tuple[list[Thread], tuple[str, int] | None]:
            stamp, pk = before if before is not None else ("\uffff", 2**62)
            rows = await conn.fetch(
                f"SELECT id, {THREAD_COLUMNS}, {title_columns('threads')} FROM threads"
                " WHERE user_id = $1 AND (updated_at, id) < ($2, $3)"
                " ORDER BY updated_at DESC, id DESC LIMIT $4",
                user_id, stamp, pk, limit + 1)
            page = rows[:limit]
            cursor = (page[-1][9], page[-1][0]) if len(rows) > limit else None
            return [_titled(row, 1) for row in page], cursor
        return await self._query(run)

    async def set_title(self, session_key: str, title: str | None) -> bool:
        """Name the thread (None: it takes its first message's title again); False if no
        thread. Its place in the list (``updated_at``) stays."""
        async def run(conn: Connection) -> bool:
            return await conn.fetchval("UPDATE threads SET title = $1 WHERE session_key = $2"
                                       " RETURNING 1", title, session_key) is not None
        return await self._query(run)

    async def search_threads(self, user_id: str, terms: Sequence[str], limit: int,
                             before: tuple[str, int] | None = None,
                             ) -> tuple[list[ThreadHit], tuple[str, int] | None]:
        """A page of the user's threads whose title or one of whose display messages holds
        a word starting with each of ``terms``, most recently updated first (the order and
        cursor of :meth:`list_threads`), and the next cursor (None on the last page)."""
        async def run(conn: Connection) -> tuple[list[ThreadHit], tuple[str, int] | None]:
            stamp, pk = before if before is not None else ("\uffff", 2**62)
            rows = await conn.fetch(_SEARCH, _tsquery(terms), user_id, stamp, pk, limit + 1)
            page = rows[:limit]
            hits = [ThreadHit(_titled(row, 1), row[12], row[13] or "") for row in page]
            return hits, (page[-1][9], page[-1][0]) if len(rows) > limit else None
        return await self._query(run)

    async def get_pinned(self, ref: ThreadRef) -> dict[str, str]:
        """The thread's pinned keys (empty if no thread)."""
        async def run(conn: Connection) -> dict[str, str]:
            return await _pinned(conn, await _owned_pk(conn, ref))
        return await self._query(run)

    async def put_pinned(self, ref: ThreadRef, key: str, value: str,
                         max_keys: int) -> dict[str, str]:
        """Upsert one pinned key, creating the thread if needed; return all keys."""
        async def run(conn: Connection) -> dict[str, str]:
            now = self._now()
            pk = await _touch_thread(conn, ref, now)
            pinned = await _pinned(conn, pk)
            if key not in pinned and len(pinned) >= max_keys:
                raise BadRequest(f"a thread holds at most {max_keys} pinned keys",
                                 code="too_many_keys")
            await conn.execute(
                "INSERT INTO pinned (thread, key, value, updated_at) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (thread, key) DO UPDATE SET value = excluded.value,"
                " updated_at = excluded.updated_at", pk, key, value, now)
            pinned[key] = value
            return dict(sorted(pinned.items()))
        return await self._transaction(run)

    async def delete_pinned(self, ref: ThreadRef, key: str | None) -> dict[str, str]:
        """Delete one pinned key, or all when ``key`` is None; return what remains."""
        async def run(conn: Connection) -> dict[str, str]:
            pk = await _owned_pk(conn, ref)
            if pk is None:
                return {}
            if key is None:
                await conn.execute("DELETE FROM pinned WHERE thread = $1", pk)
            else:
                await conn.execute("DELETE FROM pinned WHERE thread = $1 AND key = $2", pk, key)
            return await _pinned(conn, pk)
        return await self._transaction(run)

    async def clear_thread(self, session_key: str,
                           events: Sequence[WebhookEvent] = ()) -> bool:
        """Empty summary and messages (pinned and display stay), queueing ``events`` for the
        owner's webhooks; False if no thread."""
        async def run(conn: Connection) -> list[Any] | None:
            row = await conn.fetchrow(
                "UPDATE threads SET summary = '', summary_tokens = 0,"
                " summary_version = summary_version + 1, updated_at = $1"
                " WHERE session_key = $2 RETURNING id, user_id", self._now(), session_key)
            if row is None:
                return None
            await conn.execute("DELETE FROM messages WHERE thread = $1", row[0])
            return await self._emit_in(conn, row[1], events)
        queued = await self._transaction(run)
        self._announce(queued)
        return queued is not None

    async def delete_thread(self, session_key: str,
                            events: Sequence[WebhookEvent] = ()) -> bool:
        """Remove the thread and all it holds, queueing ``events`` for the owner's webhooks;
        False if no thread."""
        async def run(conn: Connection) -> list[Any] | None:
            owner = await conn.fetchval(
                "DELETE FROM threads WHERE session_key = $1 RETURNING user_id", session_key)
            return None if owner is None else await self._emit_in(conn, owner, events)
        queued = await self._transaction(run)
        self._announce(queued)
        return queued is not None

    async def display_page(self, session_key: str, limit: int,
                           before: int | None) -> ThreadPage:
        """Up to ``limit`` display messages older than ``before``, oldest first."""
        async def run(conn: Connection) -> ThreadPage:
            rows = await conn.fetch(
                "SELECT d.id, d.role, d.content, d.created_at FROM display_messages d"
                " JOIN threads t ON t.id = d.thread WHERE t.session_key = $1 AND d.id < $2"
                " ORDER BY d.id DESC LIMIT $3",
                session_key, before if before is not None else 2**62, limit + 1)
            page = [DisplayMessage(*row) for row in rows[:limit]]
            page.reverse()
            return ThreadPage(page, page[0].id if len(rows) > limit else None)
        return await self._query(run)

    async def rolling_memory(self, session_key: str) -> tuple[Thread | None, list[StoredMessage]]:
        """The thread and its rolling ``messages``, oldest first, from one snapshot."""
        async def run(conn: Connection) -> tuple[Thread | None, list[StoredMessage]]:
            row = await conn.fetchrow(
                f"SELECT id, {THREAD_COLUMNS} FROM threads WHERE session_key = $1", session_key)
            if row is None:
                return None, []
            rows = await conn.fetch("SELECT id, role, content, tokens FROM messages"
                                    " WHERE thread = $1 ORDER BY id", row[0])
            return _thread(row, 1), [StoredMessage(*r) for r in rows]
        return await self._query(run)

    # --- turns ------------------------------------------------------------------
    async def load_turn(self, ref: ThreadRef, user_id: str, specialist: str | None,
                        claim: Claim | None = None) -> TurnState:
        """Everything a turn reads, in one statement (one round trip, one snapshot), with
        ``claim`` applied on the way; raise ``NotFound`` if no account."""
        async def run(conn: Connection) -> TurnState:
            if claim is None:
                row = await conn.fetchrow(_LOAD_TURN, user_id, ref.session_key, specialist)
            else:
                row = await conn.fetchrow(_LOAD_AND_CLAIM, user_id, ref.session_key, specialist,
                                          *_claim_params(claim))
            if row["account"] is None:
                raise NotFound(f"no user {user_id!r}", code="user_not_found")
            # judged first: what the rules refuse is taken back whatever else is wrong
            claimed = None if claim is None else await _judge(conn, user_id, claim, 0,
                                                              row["claimed"])
            account = jsonio.loads(row["account"])
            user = User(*(account[name] for name in USER_COLUMNS.split(", ")))
            thread = None
            if row["thread"] is not None:
                found = jsonio.loads(row["thread"])
                thread = Thread(ThreadRef(found["user_id"], found["thread_id"],
                                          found["session_key"], found["channel"]),
                                found["summary"], found["summary_tokens"],
                                found["summary_version"], found["created_at"],
                                found["updated_at"])
            messages = [StoredMessage(*m) for m in jsonio.loads(row["messages"])]
            pinned = dict(sorted(jsonio.loads(row["pinned"]).items()))
            credentials = [SecretRecord(site, bytes(secret))
                           for site, secret in zip(row["sites"], row["secrets"], strict=True)]
            session = None if row["session"] is None \
                else SessionState(*jsonio.loads(row["session"]))
            return TurnState(user, thread, pinned, messages, row["instructions"], credentials,
                             claimed, session)
        return await self._query(run)

    async def commit_turn(self, commit: TurnCommit) -> TurnWritten:
        """Write a turn (messages, display, ledger, balance, and the channel message answered
        into the outbox) in one statement: one round trip, atomic. Nothing is written when the
        thread is someone else's (NotFound) or the channel message was answered already
        (Conflict)."""
        async def run(conn: Connection) -> TurnWritten:
            ref, inbound = commit.ref, commit.inbound
            messages, charges = commit.messages, commit.charges
            if commit.job is not None:  # first: the claim's row lock, and nothing if lost
                job = await self._finish_in(conn, commit.job, self.clock())
                if commit.job.deliver and not await _queue_own(conn, InboxEntry(
                        job.ref.channel, commit.job.message_id, job.ref.session_key,
                        job.address, job.max_chars, b"", trace=commit.trace), commit.reply,
                        self._moment(), self.process_id):
                    raise Conflict(f"the run {commit.job.message_id} was queued already",
                                   code="job_run_recorded")
            now = self._now()
            if commit.replaces:
                await _drop_last_exchange(conn, ref.session_key, commit.replaces)
            row = await conn.fetchrow(
                _COMMIT_TURN, ref.session_key, ref.user_id, ref.thread_id, ref.channel,
                now, [m.role for m in messages], [m.content for m in messages],
                [m.tokens for m in messages], inbound[0] if inbound else None,
                inbound[1] if inbound else None, commit.reply, self.clock(),
                [c.kind for c in charges], [c.model for c in charges],
                [c.prompt_tokens for c in charges], [c.completion_tokens for c in charges],
                [c.credits for c in charges], [c.minutes for c in charges], commit.billed_user,
                commit.hold, self.process_id, *_session_params(commit.session),
                *event_params(commit.events, now),
                *credits_low_params(commit.low_credits, sum(c.credits for c in charges), now),
                [c.tool for c in charges], now[:10], usage.hour_key(now),
                *daily_low_params(commit.daily_cap, now), commit.trace)
            self._announce(row["hooked"])
            if not row["touched"]:
                raise NotFound(f"no thread {ref.thread_id!r}", code="thread_not_found")
            if not row["written"]:
                assert inbound is not None
                raise Conflict(f"{inbound[0]} message {inbound[1]} was already answered",
                               code="duplicate_message")
            return TurnWritten([int(i) for i in row["ids"]])
        # A turn that replaces the last exchange deletes it first, and a scheduled run's turn
        # ends its claim and queues its reply: several statements, one transaction; any other
        # turn is one statement.
        return await (self._transaction(run) if commit.replaces or commit.job is not None
                      else self._query(run))

    async def record_charges(self, user_id: str, thread_key: str, charges: list[Charge],
                             hold: str | None = None) -> None:
        """Ledger rows (and balance) for calls whose turn was not stored, and the turn's
        credit ``hold`` released."""
        async def run(conn: Connection) -> None:
            if hold is not None:
                await conn.execute(_RELEASE, user_id, hold)
            await _book(conn, Billing(user_id, thread_key, charges), self._now())
        await self._transaction(run)

    async def commit_summary(self, commit: SummaryCommit) -> bool:
        """Apply a summary if the thread is still at the expected version (False otherwise),
        in one statement: the summary, the folded messages gone, the charge, and (applied or
        not) the summarization's credit hold released."""
        async def run(conn: Connection) -> bool:
            charge = commit.charge
            now = self._now()
            row = await conn.fetchrow(
                _COMMIT_SUMMARY, commit.summary, commit.summary_tokens, commit.session_key,
                commit.expected_version, commit.folded_through_id, commit.billed_user,
                commit.hold, charge.kind, charge.model, charge.prompt_tokens,
                charge.completion_tokens, charge.credits, charge.minutes, now,
                *event_params(commit.events, now),
                *credits_low_params(commit.low_credits, charge.credits, now), self.clock(),
                self.process_id, charge.tool, now[:10], usage.hour_key(now),
                *daily_low_params(commit.daily_cap, now))
            self._announce(row["hooked"])
            return bool(row["applied"])
        return await self._query(run)

    # --- durable inbox and outbox -------------------------------------------------------
    async def inbox_add(self, entry: InboxEntry, answered: bool = False) -> Intake | None:
        """Commit a channel message to the inbox (``answered``: only to recognise a
        redelivery); None if it is there already. Behind others when an earlier message of
        its conversation is pending with another process (in the same statement: no extra
        round trip)."""
        async def run(conn: Connection) -> Intake | None:
            row = await conn.fetchrow(
                "INSERT INTO inbox (channel, message_id, conversation, state, address, max_chars,"
                " payload, received_at, taken_by, trace)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                " ON CONFLICT (channel, message_id) DO NOTHING RETURNING id, EXISTS ("
                " SELECT 1 FROM inbox AS earlier WHERE earlier.state = 'pending'"
                " AND earlier.channel = $1 AND earlier.conversation = $3"
                " AND earlier.id < inbox.id AND earlier.taken_by IS DISTINCT FROM $9)",
                entry.channel, entry.message_id, entry.conversation,
                "done" if answered else "pending", entry.address, entry.max_chars,
                None if answered else entry.payload, self._now(), self.process_id, entry.trace)
            return Intake(row[0], bool(row[1])) if row is not None else None
        return await self._transaction(run)

    async def inbox_take_earlier(self, entry: InboxEntry) -> Earlier:
        """Take the pending messages of ``entry``'s conversation before it that are this
        process's, nobody's, or a dead process's; oldest first; count those a live process
        still holds."""
        dead = await self._dead_takers("inbox")

        async def run(conn: Connection) -> Earlier:
            rows = await conn.fetch(
                "UPDATE inbox SET taken_by = $4 WHERE state = 'pending' AND channel = $1"
                " AND conversation = $2 AND id < $3"
                " AND (taken_by IS NULL OR taken_by = $4 OR taken_by = ANY($5::text[]))"
                " RETURNING channel, message_id, conversation, address, max_chars, payload, id,"
                " trace",
                entry.channel, entry.conversation, entry.id, self.process_id, dead)
            elsewhere = await conn.fetchval(
                "SELECT count(*) FROM inbox WHERE state = 'pending' AND channel = $1"
                " AND conversation = $2 AND id < $3 AND taken_by <> $4",
                entry.channel, entry.conversation, entry.id, self.process_id)
            return Earlier(sorted((InboxEntry(*row) for row in rows),
                                  key=lambda earlier: earlier.id), int(elsewhere))
        return await self._transaction(run)

    async def inbox_pending(self) -> list[InboxEntry]:
        """The unanswered inbox messages no live process answers (those of processes that
        died, or from before this database had several), taken over by this one; in arrival
        order."""
        dead = await self._dead_takers("inbox")

        async def run(conn: Connection) -> list[InboxEntry]:
            rows = await conn.fetch(
                "UPDATE inbox SET taken_by = $1 WHERE state = 'pending'"
                " AND (taken_by IS NULL OR taken_by = ANY($2::text[]))"
                " RETURNING channel, message_id, conversation, address, max_chars, payload, id,"
                " trace",
                self.process_id, dead)
            return sorted((InboxEntry(*row) for row in rows), key=lambda entry: entry.id)
        return await self._query(run)

    async def _dead_takers(self, table: str) -> list[str]:
        """The processes that took pending rows of ``table`` and are gone: their life lock
        (held from :meth:`open` to their end) is free."""
        async def run(conn: Connection) -> list[str]:
            return [row[0] for row in await conn.fetch(
                f"SELECT DISTINCT taken_by FROM {table} WHERE state = 'pending'"
                " AND taken_by IS NOT NULL AND taken_by <> $1", self.process_id)]
        dead = []
        for taker in await self._query(run):
            life = await self.try_lead(_life_role(taker))
            if life is not None:
                await life.release()
                dead.append(taker)
        return dead

    async def answer_inbox(self, channel: str, message_id: str, reply: str,
                           trace: str | None = None) -> bool:
        """Mark the message answered and queue ``reply`` in the outbox (with the ``trace``
        context of what wrote it), in one transaction; False if it was not pending."""
        return await self._transaction(lambda conn: _answer_inbox(
            conn, ChannelMessage(channel, message_id), _Reply(reply, self._moment(), trace),
            self.process_id))

    async def queue_message(self, entry: InboxEntry, text: str) -> bool:
        """Put a message that answers no inbound one in the outbox, recorded in the inbox under
        ``entry``'s channel and id (so it is queued once), in one transaction; False if that
        id was taken already."""
        return await self._transaction(lambda conn: _queue_own(
            conn, entry, text, self._moment(), self.process_id))

    async def drop_inbox(self, channel: str, message_id: str) -> None:
        """Mark a pending message done without a reply."""
        async def run(conn: Connection) -> None:
            await conn.execute("UPDATE inbox SET state = 'done', payload = NULL"
                               " WHERE channel = $1 AND message_id = $2 AND state = 'pending'",
                               channel, message_id)
        await self._transaction(run)

    async def pending_deliveries(self) -> list[Delivery]:
        """The replies waiting for their platform that no live process delivers, taken over by
        this one (as :meth:`inbox_pending`); oldest first."""
        dead = await self._dead_takers("outbox")

        async def run(conn: Connection) -> list[Delivery]:
            rows = await conn.fetch(
                f"UPDATE outbox SET taken_by = $1 WHERE state = 'pending'"
                f" AND (taken_by IS NULL OR taken_by = ANY($2::text[]))"
                f" RETURNING {DELIVERY_COLUMNS}", self.process_id, dead)
            return sorted((Delivery(*row) for row in rows), key=lambda delivery: delivery.id)
        return await self._query(run)

    async def deliveries(self, conversation: str | None = None,
                         limit: int = 100) -> list[Delivery]:
        """Pending and failed replies, newest first; only one conversation's when given."""
        async def run(conn: Connection) -> list[Delivery]:
            rows = await conn.fetch(
                f"SELECT {DELIVERY_COLUMNS} FROM outbox"
                " WHERE ($1::text IS NULL OR conversation = $1) ORDER BY id DESC LIMIT $2",
                conversation, limit)
            return [Delivery(*row) for row in rows]
        return await self._query(run)

    async def delivery_progress(self, channel: str, message_id: str, chunks_sent: int) -> None:
        """Record that the first ``chunks_sent`` chunks of a reply arrived."""
        async def run(conn: Connection) -> None:
            await conn.execute("UPDATE outbox SET chunks_sent = $1, updated_at = $2"
                               " WHERE channel = $3 AND message_id = $4",
                               chunks_sent, self._now(), channel, message_id)
        await self._transaction(run)

    async def delivery_retry(self, channel: str, message_id: str, attempts: int,
                             next_attempt: float, error: str) -> None:
        """Record a failed attempt and when to try again."""
        async def run(conn: Connection) -> None:
            await conn.execute(
                "UPDATE outbox SET attempts = $1, next_attempt = $2, last_error = $3,"
                " updated_at = $4 WHERE channel = $5 AND message_id = $6",
                attempts, next_attempt, error, self._now(), channel, message_id)
        await self._transaction(run)

    async def delivery_finished(self, channel: str, message_id: str,
                                error: str | None = None) -> None:
        """Delivered (the row goes), or failed for good with ``error`` (the row stays)."""
        async def run(conn: Connection) -> None:
            if error is None:
                await conn.execute("DELETE FROM outbox WHERE channel = $1 AND message_id = $2",
                                   channel, message_id)
            else:
                await conn.execute(
                    "UPDATE outbox SET state = 'failed', last_error = $1, updated_at = $2"
                    " WHERE channel = $3 AND message_id = $4",
                    error, self._now(), channel, message_id)
        await self._transaction(run)

    # --- specialists and credentials ---------------------------------------------
    async def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per channel: inbox messages not answered yet, outbox replies not delivered yet (all
        processes')."""
        async def run(conn: Connection) -> dict[str, tuple[int, int]]:
            rows = await conn.fetch(
                "SELECT channel, sum(inbound), sum(1 - inbound) FROM ("
                " SELECT channel, 1 AS inbound FROM inbox WHERE state = 'pending'"
                " UNION ALL SELECT channel, 0 FROM outbox WHERE state = 'pending')"
                " AS pending GROUP BY channel")
            return {row[0]: (int(row[1]), int(row[2])) for row in rows}
        return await self._query(run)

    async def get_specialist(self, user_id: str, name: str) -> str | None:
        """The instructions of the user's specialist, or None."""
        return (await self.list_specialists(user_id, name)).get(name)

    async def list_specialists(self, user_id: str, name: str | None = None) -> dict[str, str]:
        """All the user's specialists (or only ``name``), by name."""
        async def run(conn: Connection) -> dict[str, str]:
            rows = await conn.fetch(
                "SELECT name, instructions FROM specialists WHERE user_id = $1"
                " AND ($2::text IS NULL OR name = $2) ORDER BY name", user_id, name)
            return {row[0]: row[1] for row in rows}
        return await self._query(run)

    async def put_specialist(self, user_id: str, name: str, instructions: str) -> None:
        """Create or replace a specialist."""
        async def run(conn: Connection) -> None:
            await conn.execute(
                "INSERT INTO specialists (user_id, name, instructions, updated_at)"
                " VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, name)"
                " DO UPDATE SET instructions = excluded.instructions,"
                " updated_at = excluded.updated_at", user_id, name, instructions, self._now())
        await self._transaction(run)

    async def delete_specialist(self, user_id: str, name: str) -> bool:
        """Delete a specialist; False if there was none."""
        async def run(conn: Connection) -> bool:
            return await conn.fetchval(
                "DELETE FROM specialists WHERE user_id = $1 AND name = $2 RETURNING 1",
                user_id, name) is not None
        return await self._transaction(run)

    @staticmethod
    async def _credentials(conn: Connection, user_id: str) -> list[SecretRecord]:
        rows = await conn.fetch("SELECT site, secret FROM browser_credentials"
                                " WHERE user_id = $1 ORDER BY site", user_id)
        return [SecretRecord(row[0], bytes(row[1])) for row in rows]

    async def put_credential(self, user_id: str, site: str, blob: bytes) -> list[SecretRecord]:
        """Create or replace a saved browser credential; return all the user's."""
        async def run(conn: Connection) -> list[SecretRecord]:
            await conn.execute(
                "INSERT INTO browser_credentials (user_id, site, secret, updated_at)"
                " VALUES ($1, $2, $3, $4) ON CONFLICT (user_id, site)"
                " DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at",
                user_id, site, blob, self._now())
            return await self._credentials(conn, user_id)
        return await self._transaction(run)

    async def list_credentials(self, user_id: str) -> list[SecretRecord]:
        """All the user's saved browser credentials (encrypted)."""
        return await self._query(lambda conn: self._credentials(conn, user_id))

    async def delete_credential(self, user_id: str, site: str) -> list[SecretRecord]:
        """Forget one saved credential; return what remains."""
        async def run(conn: Connection) -> list[SecretRecord]:
            await conn.execute("DELETE FROM browser_credentials WHERE user_id = $1 AND site = $2",
                               user_id, site)
            return await self._credentials(conn, user_id)
        return await self._transaction(run)

    # --- dashboard sign-in --------------------------------------------------------------------
    async def create_web_session(self, session_hash: str, user_id: str, csrf: str,
                                 expires: float) -> None:
        """Record a signed-in session (its id only as a hash) until ``expires`` (epoch s)."""
        async def run(conn: Connection) -> None:
            await conn.execute("INSERT INTO web_sessions VALUES ($1, $2, $3, $4, $5)",
                               session_hash, user_id, csrf, expires, self._now())
        await self._transaction(run)

    async def web_session(self, session_hash: str) -> WebSession | None:
        """The account and CSRF token of a session that has not expired, or None."""
        async def run(conn: Connection) -> WebSession | None:
            row = await conn.fetchrow(
                f"SELECT {prefixed(USER_COLUMNS, 'u')},"
                " s.csrf FROM web_sessions s JOIN users u USING (user_id)"
                " WHERE s.session_hash = $1 AND s.expires > $2", session_hash, self.clock())
            return WebSession(_user(row), row[-1]) if row else None
        return await self._query(run)

    async def delete_web_session(self, session_hash: str) -> None:
        """End a session (sign-out); expired sessions of anybody go too."""
        async def run(conn: Connection) -> None:
            await conn.execute("DELETE FROM web_sessions WHERE session_hash = $1 OR expires <= $2",
                               session_hash, self.clock())
        await self._transaction(run)

    async def create_login_link(self, code_hash: str, user_id: str, expires: float) -> None:
        """Record a single-use sign-in code (only its hash) valid until ``expires``."""
        async def run(conn: Connection) -> None:
            await _get_user(conn, user_id)
            await conn.execute("INSERT INTO login_links VALUES ($1, $2, $3, $4)",
                               code_hash, user_id, expires, self._now())
        await self._transaction(run)

    async def use_login_link(self, code_hash: str) -> str | None:
        """Spend a sign-in code: the account it signs in, if it was valid; never again (one
        process wins a race: the row is deleted once)."""
        async def run(conn: Connection) -> str | None:
            now = self.clock()
            row = await conn.fetchrow("DELETE FROM login_links WHERE code_hash = $1"
                                      " RETURNING user_id, expires", code_hash)
            await conn.execute("DELETE FROM login_links WHERE expires <= $1", now)
            return str(row[0]) if row and row[1] > now else None
        return await self._transaction(run)

    # --- several processes ------------------------------------------------------------
    async def lock_thread(self, session_key: str) -> _AdvisoryLock:
        """Wait for the thread's turn lock across processes and hold it (see
        :class:`_AdvisoryLock`)."""
        if self._locks is None:
            raise RuntimeError("the store is not open")
        try:
            conn = await self._locks.acquire()
        except _GONE as exc:
            raise Unavailable(f"the database connection was lost: {exc}") from None
        try:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))",
                               session_key)
        except BaseException as exc:
            await self._locks.release(conn)
            if isinstance(exc, _GONE):
                raise Unavailable(f"the database connection was lost: {exc}") from None
            raise
        return _AdvisoryLock(self._locks, conn)

    async def hold_credits(self, user_id: str, claim: Claim, spent: int) -> Claimed:
        """Apply ``claim`` (its hold of ``claim.credits``, of which ``spent`` is charged already,
        and a request against the rate limit when ``claim.rate_limits`` is given) on its own."""
        async def run(conn: Connection) -> Claimed:
            found = await conn.fetchval(_CLAIM, user_id, *_claim_params(claim))
            return await _judge(conn, user_id, claim, spent, found)
        return await self._query(run)

    async def release_hold(self, user_id: str, hold: str) -> None:
        """Forget a credit hold no commit released."""
        async def run(conn: Connection) -> None:
            await conn.execute(_RELEASE, user_id, hold)
        await self._query(run)

    async def try_lead(self, role: str) -> _Leadership | None:
        """The role's lock if no other live process holds it (``pg_try_advisory_lock``)."""
        if self._locks is None:
            raise RuntimeError("the store is not open")
        try:
            conn = await self._locks.acquire()
            try:
                won = await conn.fetchval("SELECT pg_try_advisory_lock($1, hashtext($2))",
                                          ROLE_LOCKS, role)
            except BaseException:
                await self._locks.release(conn)
                raise
        except _GONE as exc:
            raise Unavailable(f"the database connection was lost: {exc}") from None
        if not won:
            await self._locks.release(conn)
            return None
        return _Leadership(self._locks, conn, role)

    async def ledger(self, user_id: str) -> list[Charge]:
        """The user's ledger rows, oldest first."""
        async def run(conn: Connection) -> list[Charge]:
            rows = await conn.fetch(
                "SELECT kind, model, prompt_tokens, completion_tokens, credits, minutes"
                " FROM ledger WHERE user_id = $1 ORDER BY id", user_id)
            return [Charge(*row) for row in rows]
        return await self._query(run)
