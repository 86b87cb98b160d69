"""``python -m bench.search [sqlite|postgresql]``: thread search for a user with 2,000 threads
of 50 display messages each, store-level (``Store.search_threads``), one page of 20.

The messages are written through ``commit_turn`` (so the indexes are kept as a live gateway
keeps them): 10-60 words each from a vocabulary of 3,000 words plus eight very common ones, a
rare word in about one message in 500. Each query is asked 40 times; median and p95. The
PostgreSQL run uses a database of its own (``ts_search_bench`` at
``CLOUDYBOT_TEST_DATABASE_URL``'s server, dropped first), analysed after the fill. Not part of
``python -m bench``: the fill takes about half a minute per backend.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from gateway.store import NewMessage, Store, ThreadRef, TurnCommit
from gateway.store.postgres import PostgresStore
from gateway.store.sqlite import SQLiteStore

THREADS, MESSAGES, ROUNDS, PAGE = 2000, 50, 40, 20
VOCABULARY = [f"w{n}" for n in range(3000)] + ["the", "and", "of", "to", "a", "in", "is",
                                               "it"] * 200
RARE = ("zanzibar", "quixotic", "lisbon")
QUERIES = {"common word (the)": ("the",), "rare word": ("zanzibar",), "prefix (w12)": ("w12",),
           "two words": ("w100", "w200"), "no match": ("nothingmatches",)}
SERVER = os.environ.get("CLOUDYBOT_TEST_DATABASE_URL",
                        "postgresql://postgres@127.0.0.1:5432/postgres")


def _message(rng: random.Random) -> str:
    """One message's text."""
    words = rng.choices(VOCABULARY, k=rng.randint(10, 60))
    if rng.random() < 0.002:
        words.insert(rng.randrange(len(words)), rng.choice(RARE))
    return " ".join(words).capitalize() + "."


async def _fill(store: Store) -> None:
    """alice's 2,000 threads of 50 messages."""
    rng = random.Random(7)
    await store.create_user("alice", "team", 10**9, 0, "2026-01")
    for t in range(THREADS):
        ref = ThreadRef("alice", f"t{t}", f"alice--t{t}", "dashboard")
        await store.commit_turn(TurnCommit(ref, "alice", [
            NewMessage("user" if m % 2 == 0 else "assistant", _message(rng), 10)
            for m in range(MESSAGES)], []))


async def _measure(store: Store, backend: str) -> None:
    """Each query ``ROUNDS`` times; print median and p95."""
    for name, terms in QUERIES.items():
        times = []
        for _ in range(ROUNDS):
            start = time.perf_counter()
            hits, _ = await store.search_threads("alice", terms, PAGE)
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        print(f"{backend:10} {name:18} median {statistics.median(times):6.1f} ms"
              f"  p95 {times[int(len(times) * 0.95) - 1]:6.1f} ms  threads on the page {len(hits)}")


async def main(backend: str) -> None:
    """Fill one store and measure its searches."""
    store: Store
    if backend == "sqlite":
        store = SQLiteStore(Path(tempfile.mkdtemp()) / "gateway.sqlite3")
    else:
        admin = await asyncpg.connect(SERVER)
        await admin.execute("DROP DATABASE IF EXISTS ts_search_bench")
        await admin.execute("CREATE DATABASE ts_search_bench")
        await admin.close()
        store = PostgresStore(SERVER.rsplit("/", 1)[0] + "/ts_search_bench")
    await store.open()
    try:
        await _fill(store)
        if isinstance(store, PostgresStore):
            conn = await asyncpg.connect(store.url)
            await conn.execute("VACUUM ANALYZE")
            await conn.close()
        await _measure(store, backend)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "sqlite"))
