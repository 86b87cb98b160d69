"""The irreducible I/O of a turn, as a minimal aiohttp app: ``python -m bench.baseline DIR PORT``.

Per ``POST /chat``: parse the JSON body, one SQLite read of the thread, one transaction that
appends two transcript rows and updates the thread, one JSONL line appended to a file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import aiosqlite
from aiohttp import web

SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (id TEXT PRIMARY KEY, summary TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS transcript (id INTEGER PRIMARY KEY, thread TEXT, role TEXT,
                                       content TEXT);
"""
REPLY = "Noted. " * 20


async def main_app(data_dir: Path) -> web.Application:
    """The baseline application."""
    db = await aiosqlite.connect(data_dir / "baseline.sqlite3", isolation_level=None)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = NORMAL")
    await db.executescript(SCHEMA)
    sessions = data_dir / "sessions"
    sessions.mkdir(exist_ok=True)

    def write(conn: sqlite3.Connection, thread: str, message: str) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO transcript (thread, role, content) VALUES (?, 'user', ?)",
                     (thread, message))
        conn.execute("INSERT INTO transcript (thread, role, content) VALUES (?, 'assistant', ?)",
                     (thread, REPLY))
        conn.execute("INSERT INTO threads VALUES (?, '', ?) ON CONFLICT (id) DO UPDATE SET"
                     " updated = excluded.updated", (thread, time.time()))
        conn.execute("COMMIT")

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        thread, message = body["threadId"], body["message"]
        await db.execute_fetchall("SELECT summary FROM threads WHERE id = ?", (thread,))
        # one hand-off to the worker thread for the whole transaction (as the gateway's store)
        await db._execute(write, db._conn, thread, message)  # type: ignore[no-untyped-call]
        line = json.dumps({"type": "turn", "user": message, "assistant": REPLY}) + "\n"
        fd = os.open(sessions / f"{thread}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return web.json_response({"threadId": thread, "reply": REPLY})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/chat", chat)
    app.router.add_get("/healthz", healthz)

    async def close(app: web.Application) -> None:
        await db.close()

    app.on_cleanup.append(close)
    return app


if __name__ == "__main__":
    web.run_app(main_app(Path(sys.argv[1])), host="127.0.0.1", port=int(sys.argv[2]),
                print=None, access_log=None)
