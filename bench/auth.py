"""``python -m bench.auth [--backend sqlite|postgresql]``: what authenticating one request costs.

``Accounts.authenticate`` on a token, timed in-process over many calls (median of rounds):

- **hit**: the token is in the cache and nothing was written since the last call;
- **hit after a write**: the token is in the cache, and another connection committed a write
  (a turn's) before each call, so that a store checking whether anything changed finds that
  something did (the timing covers only the authentication, not the write);
- **miss**: the cache holds nothing (as with no cache at all): the store's token lookup.

Figures are microseconds of this process's CPU per call on this machine (the store's
connections run in it; PostgreSQL's own work does not count), indicative of the ratio more
than of the absolute values.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.postgres import DEFAULT_SERVER, fresh_database
from gateway.accounts.access import Accounts
from gateway.config.settings import load_settings
from gateway.store import Store
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SQLiteStore

CALLS = 5_000
ROUNDS = 5


async def _timed(calls: int, before: Callable[[], Awaitable[None]] | None,
                 call: Callable[[], Awaitable[object]]) -> float:
    """Median over ``ROUNDS`` of the CPU µs per ``call`` (``before`` each one, untimed):
    this process's CPU time, so that other work on the machine counts as little as it can."""
    rounds = []
    for _ in range(ROUNDS):
        spent = 0.0
        if before is None:
            start = time.process_time()
            for _ in range(calls):
                await call()
            spent = time.process_time() - start
        for _ in range(calls if before is not None else 0):
            await before()
            start = time.process_time()
            await call()
            spent += time.process_time() - start
        rounds.append(spent / calls * 1e6)
    return statistics.median(rounds)


async def measure(store: Store, write: Callable[[], Awaitable[None]],
                  calls: int) -> dict[str, float]:
    """The three figures for ``store`` (open, empty); ``write`` commits one small change
    from another connection."""
    accounts = Accounts(load_settings(None), store, time.time)
    _, token = await accounts.add_user("bench", "team")
    await accounts.authenticate(token)

    async def miss() -> object:
        accounts._auth_cache.clear()  # the cost of a cache that holds nothing
        return await accounts.authenticate(token)
    return {"hit": await _timed(calls, None, lambda: accounts.authenticate(token)),
            "hit after a write": await _timed(calls // 5, write,
                                              lambda: accounts.authenticate(token)),
            "miss": await _timed(calls, None, miss)}


async def sqlite_figures(calls: int) -> dict[str, float]:
    """The figures on a fresh SQLite database; the writes come from a connection of their own
    (as the gateway's writer or another process's)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cloudybot.sqlite3"
        store = SQLiteStore(path)
        await store.open()
        other = sqlite3.connect(path, isolation_level=None)
        try:
            async def write() -> None:
                other.execute("UPDATE users SET credits = credits WHERE user_id = 'bench'")
            return await measure(store, write, calls)
        finally:
            other.close()
            await store.close()


async def postgres_figures(server: str, calls: int) -> dict[str, float]:
    """The figures on a fresh PostgreSQL database."""
    async with fresh_database(server) as url:
        store = PostgresStore(url)
        await store.open()
        writer = PostgresStore(url)
        await writer.open()
        try:
            async def write() -> None:
                await writer.grant_credits("bench", 1)
            return await measure(store, write, calls // 5)
        finally:
            await writer.close()
            await store.close()


def main() -> None:
    """Print the figures of the chosen backend."""
    parser = argparse.ArgumentParser(prog="python -m bench.auth")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--database-url", default=DEFAULT_SERVER)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args()
    figures = asyncio.run(sqlite_figures(args.calls) if args.backend == "sqlite"
                          else postgres_figures(args.database_url, args.calls))
    for name, value in figures.items():
        print(f"{args.backend:<10} {name:<18} {value:8.1f} µs")


if __name__ == "__main__":
    main()
