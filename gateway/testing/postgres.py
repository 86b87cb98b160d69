"""A PostgreSQL database made for one run (of tests, or of the benchmark) and dropped after."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import asyncpg

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


async def admin(url: str, statement: str) -> None:
    """Run one administrative statement (CREATE/DROP DATABASE, a schema) on ``url``."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def new_database_name(prefix: str) -> str:
    """A database name nobody else uses: ``{prefix}_{random}``."""
    return f"{prefix}_{secrets.token_hex(4)}"


def with_database(server: str, database: str) -> str:
    """The URL of ``database`` on the server ``server`` names."""
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, ""))
