"""Agent sessions in PostgreSQL, for any number of gateway processes: the JSONL semantics of
:class:`gateway.sessions.SessionStore` (a header line, one event per line, rotation when idle
or larger than ``max_bytes``, archives), with rows instead of files.

``sessions`` has a row per session (the active one of a key has ``archived`` NULL) with its
size in bytes as a file would have it and its last write; ``session_lines`` its lines in
order. Lines of a tool exchange (and the reply they lead to) carry the reply's id, so the
replay window of a turn is one indexed range, read with the turn's state in the same
statement (``Store.load_turn``): checking for rotation and replaying tools cost a turn no
round trip, and a turn's append is one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.base import jsonio
from gateway.base.times import iso_utc
from gateway.memory.sessions import (
    SUFFIX,
    ActiveSession,
    ArchivedSession,
    Rotation,
    RotationObserver,
    RotationRule,
    SessionStatus,
    ToolExchange,
    encode_key,
    exchanges_of,
    unobserved,
)
from gateway.store.records import SessionState, SessionWrite, TurnState

if TYPE_CHECKING:
    from gateway.store.postgres import Connection, PostgresStore

_APPEND = """
WITH s AS (
  INSERT INTO sessions AS cur (key, user_id, thread_id, bytes, last_write)
  VALUES ($1, $2, $3, $4::bigint + $5::bigint, $6::float8)
  ON CONFLICT (key) WHERE archived IS NULL
  DO UPDATE SET bytes = cur.bytes + $4, last_write = $6
  RETURNING id, (xmax = 0) AS created),
top AS (SELECT coalesce(max(n), 0) AS n FROM session_lines
        WHERE session = (SELECT id FROM s))
INSERT INTO session_lines (session, n, reply_id, line)
SELECT s.id, top.n + x.ord, x.reply_id, x.line
FROM s, top, unnest($7::text[], $8::bigint[]) WITH ORDINALITY AS x(line, reply_id, ord)
WHERE x.ord > 1 OR s.created
"""


def replay_id(event: dict[str, Any]) -> int | None:
    """The reply a line belongs to for replay: a tool line's ``replyId``; a reply's own id
    when it carries ``toolTokens``."""
    if event.get("type") in ("tool_calls", "tool_result"):
        return event.get("replyId")
    if event.get("type") == "assistant" and "toolTokens" in event:
        return event.get("messageId")
    return None


class PostgresSessions:
    """Sessions in the PostgreSQL store's database (see the module docstring)."""

    def __init__(self, store: PostgresStore, *, rule: RotationRule,
                 count_message: Callable[[Any], int], clock: Callable[[], float],
                 observer: RotationObserver = unobserved) -> None:
        self._store = store
        self.rule = rule
        self.count_message = count_message
        self.clock = clock
        self.observer = observer

    # --- a turn --------------------------------------------------------------------------
    def peek(self, key: str, state: TurnState | None = None) -> tuple[str | None, bool]:
        """Why the session would rotate, from what the turn read with its state."""
        session = state.session if state is not None else None
        return self._due(session), session is not None

    def _due(self, session: SessionState | None) -> str | None:
        if session is None:
            return None
        return self.rule.due(session.size, session.last_write, self.clock())

    async def begin_turn(self, key: str,
                         state: TurnState | None = None) -> tuple[Rotation | None, bool]:
        """Rotate if due (reading the session first when the caller read no state)."""
        session = state.session if state is not None else await self._state(key)
        reason = self._due(session)
        if reason is None:
            return None, session is not None
        rotation = await self.archive_now(key, reason)
        if rotation is not None:
            await self.observer(rotation)
        return rotation, False

    def exchanges(self, key: str, since_id: int,
                  state: TurnState | None = None) -> dict[int, ToolExchange]:
        """The tool exchanges of the replay window the turn read with its state."""
        if state is None or state.session is None:
            return {}
        events = [jsonio.loads(line) for line in state.session.replay]
        return exchanges_of([e for e in events if isinstance(e, dict)], self.count_message)

    def with_commit(self, user_id: str, thread_id: str, key: str,
                    events: Callable[[], Sequence[dict[str, Any]]]) -> SessionWrite:
        """The turn's lines for its commit: stored with the turn, atomically, in the same
        statement (no round trip of their own)."""
        header, stamped = self._stamped(key, user_id, thread_id, events())
        return SessionWrite(user_id, thread_id, header,
                            [jsonio.dumps(event).decode() for event in stamped],
                            [replay_id(event) is not None for event in stamped])

    async def write_turn(self, key: str, user_id: str, thread_id: str,
                         events: Sequence[dict[str, Any]],
                         exchange: tuple[int, ToolExchange] | None = None) -> None:
        """One statement: the session row created (with its header) or grown, the lines
        added after its last (what a turn's commit does, for events outside a turn)."""
        header, stamped = self._stamped(key, user_id, thread_id, events)
        lines = [jsonio.dumps(event).decode() for event in stamped]
        size = sum(len(line.encode()) + 1 for line in lines)

        async def run(conn: Connection) -> None:
            await conn.execute(_APPEND, key, user_id, thread_id, size,
                               len(header.encode()) + 1, self.clock(), [header, *lines],
                               [None, *(replay_id(event) for event in stamped)])
        await self._store._query(run)

    def _stamped(self, key: str, user_id: str, thread_id: str,
                 events: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
        """The header line a new session starts with, and the events with their ``ts``."""
        ts = iso_utc(self.clock())
        header = jsonio.dumps({"type": "session", "key": key, "userId": user_id,
                               "threadId": thread_id, "createdAt": ts}).decode()
        return header, [{**event, "ts": ts} for event in events]

    def forget_exchanges_before(self, key: str, first_kept_id: int) -> None:
        """Nothing is kept between turns: each reads its window with its state."""

    # --- ending sessions ----------------------------------------------------------------
    async def archive_now(self, key: str, reason: str = "manual") -> Rotation | None:
        """Archive the active session under a file-like name; None if there is none."""
        now = self.clock()
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{encode_key(key)}.{stamp}{SUFFIX}"

        async def run(conn: Connection) -> bool:
            archived = await conn.fetchval(
                "UPDATE sessions SET archived = $2, name = $3"
                " WHERE key = $1 AND archived IS NULL RETURNING id", key, now, name)
            return archived is not None
        if not await self._store._query(run):
            return None
        return Rotation(key, reason, None, name)

    async def end(self, key: str, reason: str) -> Rotation | None:
        """Archive the session now and tell the observer."""
        rotation = await self.archive_now(key, reason)
        if rotation is not None:
            await self.observer(rotation)
        return rotation

    async def remove(self, key: str) -> int:
        """Delete the session and its archives, tell the observer; return how many went."""
        async def run(conn: Connection) -> int:
            return len(await conn.fetch("DELETE FROM sessions WHERE key = $1 RETURNING id",
                                        key))
        removed = await self._store._query(run)
        await self.observer(Rotation(key, "purged", None))
        return removed

    async def drop_orphan_archives(self, before: float, dry_run: bool,
                                   has_thread: Callable[[str], Awaitable[bool]]) -> int:
        """Archives older than ``before`` of keys without a thread, in one statement."""
        verb = "SELECT id FROM sessions" if dry_run else "DELETE FROM sessions"
        statement = (f"{verb} WHERE archived IS NOT NULL AND archived < $1 AND NOT EXISTS"
                     " (SELECT 1 FROM threads t WHERE t.session_key = sessions.key)")
        if not dry_run:
            statement += " RETURNING id"

        async def run(conn: Connection) -> int:
            return len(await conn.fetch(statement, before))
        return await self._store._query(run)

    # --- looking ------------------------------------------------------------------------
    async def _state(self, key: str) -> SessionState | None:
        async def run(conn: Connection) -> SessionState | None:
            row = await conn.fetchrow("SELECT bytes, last_write FROM sessions"
                                      " WHERE key = $1 AND archived IS NULL", key)
            return None if row is None else SessionState(row[0], row[1], [])
        return await self._store._query(run)

    async def session_status(self, key: str) -> SessionStatus:
        """The active session's size and last write, and the archives, oldest first."""
        async def run(conn: Connection) -> SessionStatus:
            rows = await conn.fetch("SELECT bytes, last_write, archived, name FROM sessions"
                                    " WHERE key = $1 ORDER BY id", key)
            active = next(((r[0], r[1]) for r in rows if r[2] is None), None)
            archives = [ArchivedSession(r[3], r[0], iso_utc(r[2])) for r in rows
                        if r[2] is not None]
            return SessionStatus(key, active, archives)
        return await self._store._query(run)

    async def export(self, key: str, archive: str | None = None) -> bytes | None:
        """The active session's JSONL (or that of its archive named ``archive``), header
        first, exactly as its lines were written."""
        async def run(conn: Connection) -> bytes | None:
            session = await conn.fetchval(
                "SELECT id FROM sessions WHERE key = $1 AND archived IS NULL", key) \
                if archive is None else await conn.fetchval(
                    "SELECT id FROM sessions WHERE key = $1 AND name = $2"
                    " AND archived IS NOT NULL", key, archive)
            if session is None:
                return None
            lines = await conn.fetch("SELECT line FROM session_lines WHERE session = $1"
                                     " ORDER BY n", session)
            return b"".join(row[0].encode() + b"\n" for row in lines)
        return await self._store._query(run)

    async def active_sessions(self) -> list[ActiveSession]:
        """Every active session, by key, with its archive count."""
        async def run(conn: Connection) -> list[ActiveSession]:
            rows = await conn.fetch(
                "SELECT s.key, s.bytes, s.last_write, (SELECT count(*) FROM sessions a"
                " WHERE a.key = s.key AND a.archived IS NOT NULL)"
                " FROM sessions s WHERE s.archived IS NULL ORDER BY s.key")
            return [ActiveSession(*row) for row in rows]
        return await self._store._query(run)
