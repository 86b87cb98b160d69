"""Which store a configuration names: SQLite in the data dir, or PostgreSQL by URL."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config.settings import Settings
from gateway.store import Store


def store_for(settings: Settings, clock: Callable[[], float] = time.time) -> Store:
    """The store of ``settings``: PostgreSQL when ``CLOUDYBOT_DATABASE_URL`` is set (asyncpg
    is imported only then), else the embedded SQLite database."""
    if settings.database_url:
        from gateway.store.postgres import PostgresStore
        return PostgresStore(settings.database_url, clock, settings.database_pool_size,
                             revocation_check_seconds=settings.leader_retry_seconds)
    from gateway.store.sqlite import SQLiteStore
    return SQLiteStore(settings.database_path, clock)
