"""``cloudybot migrate --from-sqlite DATA_DIR --to postgresql://…``: copy a SQLite deployment's
rows into PostgreSQL, table by table in foreign-key order, ids kept, then check the counts.

The source is read with the standard ``sqlite3`` module, its folder locked (a folder a
gateway or another command has open is refused: what it wrote during the copy would be lost;
:mod:`gateway.store.in_use`); the secret key is checked first and carried after
(:mod:`gateway.cli.migrate_key`). The target is migrated first and must be empty unless
``force`` (then it is emptied).
The session files (``sessions/`` and its archives) become the database's sessions, line for
line, with their sizes, last writes and archive names.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from gateway.base import jsonio
from gateway.base.errors import GatewayError
from gateway.cli.migrate_key import TargetKey, check_key
from gateway.memory.sessions import SUFFIX, decode_key, parse_events
from gateway.memory.shared_sessions import replay_id
from gateway.store.in_use import FolderLock, try_lock
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite_rollups import fold_usage

# Parents before children; each with the columns both schemas share.
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("users", ("user_id", "plan", "credits", "browser_minutes", "created_at", "period",
               "time_zone", "admin", "blocked", "daily_credits", "spent_day", "spent_today",
               "active_at")),
    ("api_tokens", ("token_hash", "user_id", "created_at")),
    ("threads", ("id", "session_key", "user_id", "thread_id", "channel", "summary",
                 "summary_tokens", "summary_version", "created_at", "updated_at", "title")),
    ("pinned", ("thread", "key", "value", "updated_at")),
    ("messages", ("id", "thread", "role", "content", "tokens")),
    ("display_messages", ("id", "thread", "role", "content", "created_at")),
    ("specialists", ("user_id", "name", "instructions", "updated_at")),
    ("browser_credentials", ("user_id", "site", "secret", "updated_at")),
    ("ledger", ("id", "user_id", "thread_key", "kind", "model", "prompt_tokens",
                "completion_tokens", "credits", "minutes", "created_at")),
    ("inbox", ("id", "channel", "message_id", "conversation", "state", "address", "max_chars",
               "payload", "received_at")),
    ("outbox", ("id", "channel", "message_id", "conversation", "address", "text", "max_chars",
                "state", "chunks_sent", "attempts", "next_attempt", "created", "last_error",
                "updated_at")),
    ("web_sessions", ("session_hash", "user_id", "csrf", "expires", "created_at")),
    ("login_links", ("code_hash", "user_id", "expires", "created_at")),
    ("webhooks", ("id", "user_id", "url", "events", "secret", "created_at")),
    # pending ones are taken by no process: the first PostgreSQL gateway to start sends them
    ("webhook_deliveries", ("id", "message_id", "webhook", "user_id", "event", "body", "state",
                            "attempts", "last_status", "next_attempt", "created",
                            "last_error")),
    # a job claimed when the SQLite gateway stopped is claimed again once its lease ends
    ("jobs", ("id", "user_id", "session_key", "thread_id", "channel", "address", "max_chars",
              "kind", "spec", "time_zone", "action", "text", "misfire", "state", "next_run",
              "wake_at", "lease_token", "lease_until", "claims", "runs", "misses", "last_run",
              "last_status", "created_at")),
    ("job_runs", ("id", "job_id", "due", "status", "detail", "at")),
    # the audit log keeps its ids (and its order); the rollups arrive as SQLite kept them
    ("audit_log", ("id", "at", "actor", "action", "target", "details", "source")),
    ("usage_hours", ("dim", "hour", "value", "calls", "prompt_tokens", "completion_tokens",
                     "credits", "minutes")),
    ("usage_days", ("month", "user_id", "day", "calls", "prompt_tokens", "completion_tokens",
                    "credits", "minutes")),
)
TEXT_IDS = frozenset({"webhooks", "jobs"})  # ids chosen by the gateway, not a sequence
# Rows whose SQLite form differs from PostgreSQL's: an endpoint's events are JSON text there.
CONVERT: dict[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]] = {
    "webhooks": lambda row: (*row[:3], json.loads(row[3]), *row[4:]),
    # an account's admin and blocked flags are 0/1 there, booleans here
    "users": lambda row: (*row[:7], bool(row[7]), bool(row[8]), *row[9:]),
}
BATCH = 5000
Progress = Callable[[str, int, int], None]  # (table, rows copied so far, rows in all)


class MigrationError(GatewayError):
    """The migration cannot start, or its counts do not match."""


@dataclass
class MigrationReport:
    """Rows copied per table, in the order copied."""

    copied: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rows copied in all."""
        return sum(self.copied.values())


def _locked(data_dir: Path) -> FolderLock:
    """The SQLite folder, locked for the copy: refused while a process has it open."""
    database = data_dir / "cloudybot.sqlite3"
    if not database.is_file():
        raise MigrationError(f"no SQLite database at {database}")
    lock = try_lock(data_dir, exclusive=True)
    if lock is None:
        raise MigrationError(f"{data_dir.resolve()} is in use: a running gateway (or another "
                             "cloudybot command) has its database open. Stop it first: what "
                             "it wrote during the copy would be lost")
    return lock


async def migrate(data_dir: Path, url: str, *, force: bool = False,
                  progress: Progress | None = None,
                  key: TargetKey | None = None) -> MigrationReport:
    """Copy every row of the SQLite deployment in ``data_dir`` into the database at ``url``;
    raise :class:`MigrationError` if the folder is in use, if ``key`` (the PostgreSQL
    deployment's) does not open what it sealed, if the target holds rows (without ``force``)
    or if a count differs afterwards."""
    lock = _locked(data_dir)
    try:
        _fold_rollups(data_dir / "cloudybot.sqlite3")
        source = sqlite3.connect(f"file:{data_dir / 'cloudybot.sqlite3'}?mode=ro", uri=True)
        try:
            if key is not None:
                check_key(key, data_dir, source)
            return await _copy_all(data_dir, source, url, force, progress)
        finally:
            source.close()
    finally:
        lock.release()


def _fold_rollups(database: Path) -> None:
    """Fold the ledger rows booked since the last fold into the usage rollups
    (:mod:`~gateway.store.sqlite_rollups`), so that the rollups copied cover the whole ledger
    (a database from before the fold has none to fold)."""
    conn = sqlite3.connect(database, isolation_level=None)
    try:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'usage_folded'").fetchone():
            conn.execute("BEGIN IMMEDIATE")
            fold_usage(conn)
            conn.execute("COMMIT")
    finally:
        conn.close()


async def _copy_all(data_dir: Path, source: sqlite3.Connection, url: str, force: bool,
                    progress: Progress | None) -> MigrationReport:
    """Every table and the session files, in one transaction of the target."""
    target = PostgresStore(url)
    await target.open()  # the schema, migrated
    try:
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await _empty_or_refuse(conn, force)
                report = MigrationReport()
                for table, columns in TABLES:
                    report.copied[table] = await _copy(source, conn, table, columns, progress)
                report.copied["sessions"] = await _copy_sessions(data_dir, conn, progress)
                await _restart_identities(conn)
                await _check_counts(source, conn, report)
        finally:
            await conn.close()
    finally:
        await target.close()
    return report


async def _empty_or_refuse(conn: asyncpg.Connection, force: bool) -> None:
    held = {table: await conn.fetchval(f"SELECT count(*) FROM {table}")
            for table in (*(name for name, _ in TABLES), "sessions")}
    busy = {table: count for table, count in held.items() if count}
    if busy and not force:
        listed = ", ".join(f"{table} ({count})" for table, count in busy.items())
        raise MigrationError(f"the target database is not empty: {listed}; pass --force to "
                             "replace what it holds")
    if busy:
        await conn.execute("TRUNCATE " + ", ".join(table for table, _ in TABLES)
                           + ", sessions, session_lines CASCADE")


async def _copy(source: sqlite3.Connection, conn: asyncpg.Connection, table: str,
                columns: tuple[str, ...], progress: Progress | None) -> int:
    total = source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    cursor = source.execute(f"SELECT {', '.join(columns)} FROM {table}")
    copied = 0
    convert = CONVERT.get(table)
    while rows := cursor.fetchmany(BATCH):
        if convert is not None:
            rows = [convert(row) for row in rows]
        await conn.copy_records_to_table(table, records=rows, columns=list(columns))
        copied += len(rows)
        if progress is not None:
            progress(table, copied, total)
    if progress is not None and total == 0:
        progress(table, 0, 0)
    return copied


def _session_files(data_dir: Path) -> list[tuple[Path, bool]]:
    """Every session file of the deployment, active (False) or archived (True)."""
    root = data_dir / "sessions"
    active = sorted(root.glob(f"*{SUFFIX}")) if root.is_dir() else []
    archives = sorted((root / "archive").glob(f"*{SUFFIX}")) \
        if (root / "archive").is_dir() else []
    return [(path, False) for path in active] + [(path, True) for path in archives]


async def _copy_sessions(data_dir: Path, conn: asyncpg.Connection,
                         progress: Progress | None) -> int:
    """Each session file as a ``sessions`` row and its lines (a torn line is kept as it is:
    the readers skip it, as they skip it in a file)."""
    files = _session_files(data_dir)
    for done, (path, archived) in enumerate(files, start=1):
        raw = path.read_bytes()
        lines = [line.decode("utf-8", "replace") for line in raw.split(b"\n") if line.strip()]
        events = parse_events(raw, str(path))
        header = events[0] if events and events[0].get("type") == "session" else {}
        key = str(header.get("key") or _key_of(path.name, archived))
        mtime = path.stat().st_mtime
        session = await conn.fetchval(
            "INSERT INTO sessions (key, user_id, thread_id, bytes, last_write, archived, name)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id", key,
            str(header.get("userId", "")), str(header.get("threadId", "")), len(raw), mtime,
            mtime if archived else None, path.name if archived else None)
        await conn.copy_records_to_table(
            "session_lines", columns=["session", "n", "reply_id", "line"],
            records=[(session, n, _line_replay_id(line), line)
                     for n, line in enumerate(lines, start=1)])
        if progress is not None:
            progress("sessions", done, len(files))
    return len(files)


def _key_of(name: str, archived: bool) -> str:
    stem = name[:-len(SUFFIX)]
    return decode_key(stem.rsplit(".", 2)[0] if archived else stem)


def _line_replay_id(line: str) -> int | None:
    try:
        event = jsonio.loads(line)
    except ValueError:
        return None
    found = replay_id(event) if isinstance(event, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


async def _restart_identities(conn: asyncpg.Connection) -> None:
    """Identity columns go on from the highest id copied (new rows never collide)."""
    await conn.execute("SELECT setval(pg_get_serial_sequence('sessions', 'id'),"
                       " coalesce((SELECT max(id) FROM sessions), 0) + 1, false)")
    for table, columns in TABLES:
        if "id" in columns and table not in TEXT_IDS:
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" coalesce((SELECT max(id) FROM {table}), 0) + 1, false)")


async def _check_counts(source: sqlite3.Connection, conn: asyncpg.Connection,
                        report: MigrationReport) -> None:
    sessions = await conn.fetchval("SELECT count(*) FROM sessions")
    if sessions != report.copied["sessions"]:
        raise MigrationError(f"sessions: {report.copied['sessions']} files, {sessions} in "
                             "PostgreSQL after the copy; nothing was kept")
    for table, _ in TABLES:
        expected = source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        found = await conn.fetchval(f"SELECT count(*) FROM {table}")
        if found != expected or report.copied[table] != expected:
            raise MigrationError(f"{table}: {expected} rows in SQLite, {found} in PostgreSQL "
                                 "after the copy; nothing was kept")
