"""The store's worker thread: one ``sqlite3`` connection that lives and is used on one thread.

Work that may wait for SQLite's write lock, or touch many rows, runs here so that the event
loop never blocks on it. This is the standard library's executor, not a driver's private call:
the function gets the connection and runs to completion on the worker, in submission order.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerThread:
    """A connection to ``path`` opened, used and closed on a thread of its own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cloudybot-db")
        self._conn: sqlite3.Connection | None = None

    async def open(self, pragmas: Iterable[str]) -> None:
        """Connect (autocommit: transactions are explicit) and apply ``pragmas``."""
        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, isolation_level=None)
            for pragma in pragmas:
                conn.execute(pragma).fetchall()
            return conn
        self._conn = await asyncio.get_running_loop().run_in_executor(self._executor, connect)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(connection, *args)`` on the worker thread; its result or its exception. If the
        caller is cancelled, the work still runs to its end (as a transaction must)."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the store's worker is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, conn, *args)

    async def close(self) -> None:
        """Close the connection after the work already submitted, then end the thread."""
        if self._conn is not None:
            await self.call(sqlite3.Connection.close)
            self._conn = None
        self._executor.shutdown(wait=True)
