"""``cloudybot migrate --from-sqlite DATA_DIR --to postgresql://…``: copy a SQLite deployment's
rows into PostgreSQL, table by table in foreign-key order, ids kept, then check the counts.

The source is read with the standard ``sqlite3`` module (the gateway must not be running on
it); the target is migrated first and must be empty unless ``force`` (then it is emptied).
Session files stay where they are: the PostgreSQL store keeps rows only, so point the
gateways at the same data dir's ``sessions/`` (or copy it along).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from ..errors import GatewayError
from .postgres import PostgresStore

# Parents before children; each with the columns both schemas share.
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("users", ("user_id", "plan", "credits", "browser_minutes", "created_at", "period")),
    ("api_tokens", ("token_hash", "user_id", "created_at")),
    ("threads", ("id", "session_key", "user_id", "thread_id", "channel", "summary",
                 "summary_tokens", "summary_version", "created_at", "updated_at")),
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
)
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


def _source(data_dir: Path) -> sqlite3.Connection:
    database = data_dir / "cloudybot.sqlite3"
    if not database.is_file():
        raise MigrationError(f"no SQLite database at {database}")
    return sqlite3.connect(f"file:{database}?mode=ro", uri=True)


async def migrate(data_dir: Path, url: str, *, force: bool = False,
                  progress: Progress | None = None) -> MigrationReport:
    """Copy every row of the SQLite deployment in ``data_dir`` into the database at ``url``;
    raise :class:`MigrationError` if the target holds rows (without ``force``) or a count
    differs afterwards."""
    source = _source(data_dir)
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
                await _restart_identities(conn)
                await _check_counts(source, conn, report)
        finally:
            await conn.close()
    finally:
        await target.close()
        source.close()
    return report


async def _empty_or_refuse(conn: asyncpg.Connection, force: bool) -> None:
    held = {table: await conn.fetchval(f"SELECT count(*) FROM {table}") for table, _ in TABLES}
    busy = {table: count for table, count in held.items() if count}
    if busy and not force:
        listed = ", ".join(f"{table} ({count})" for table, count in busy.items())
        raise MigrationError(f"the target database is not empty: {listed}; pass --force to "
                             "replace what it holds")
    if busy:
        await conn.execute("TRUNCATE " + ", ".join(table for table, _ in TABLES) + " CASCADE")


async def _copy(source: sqlite3.Connection, conn: asyncpg.Connection, table: str,
                columns: tuple[str, ...], progress: Progress | None) -> int:
    total = source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    cursor = source.execute(f"SELECT {', '.join(columns)} FROM {table}")
    copied = 0
    while rows := cursor.fetchmany(BATCH):
        await conn.copy_records_to_table(table, records=rows, columns=list(columns))
        copied += len(rows)
        if progress is not None:
            progress(table, copied, total)
    if progress is not None and total == 0:
        progress(table, 0, 0)
    return copied


async def _restart_identities(conn: asyncpg.Connection) -> None:
    """Identity columns go on from the highest id copied (new rows never collide)."""
    for table, columns in TABLES:
        if "id" in columns:
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" coalesce((SELECT max(id) FROM {table}), 0) + 1, false)")


async def _check_counts(source: sqlite3.Connection, conn: asyncpg.Connection,
                        report: MigrationReport) -> None:
    for table, _ in TABLES:
        expected = source.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        found = await conn.fetchval(f"SELECT count(*) FROM {table}")
        if found != expected or report.copied[table] != expected:
            raise MigrationError(f"{table}: {expected} rows in SQLite, {found} in PostgreSQL "
                                 "after the copy; nothing was kept")
