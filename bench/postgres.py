"""A PostgreSQL database for one benchmark run (``--backend postgresql``): made at the start,
dropped at the end, on the server ``--database-url`` names."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_database(server: str) -> AsyncIterator[str]:
    """A new, empty database on ``server``; its URL. Dropped afterwards."""
    name = f"cloudybot_bench_{secrets.token_hex(4)}"
    await _admin(server, f'CREATE DATABASE "{name}"')
    parts = urlsplit(server)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
    finally:
        await _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
