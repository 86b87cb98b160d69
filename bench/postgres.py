"""A PostgreSQL database for one benchmark run (``--backend postgresql``): made at the start,
dropped at the end, on the server ``--database-url`` names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.testing.postgres import DEFAULT_SERVER, admin, new_database_name, with_database

__all__ = ["DEFAULT_SERVER", "fresh_database"]


@asynccontextmanager
async def fresh_database(server: str) -> AsyncIterator[str]:
    """A new, empty database on ``server``; its URL. Dropped afterwards."""
    name = new_database_name("cloudybot_bench")
    await admin(server, f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server, name)
    finally:
        await admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
