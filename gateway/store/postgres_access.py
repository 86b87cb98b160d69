"""PostgreSQL: every process hears at once that an API token stopped working, whichever process
ended it, so that no token cache answers for a revoked token.

The revoking transaction bumps a counter and sends a notification (a trigger on
``api_tokens``, migration 8); PostgreSQL delivers it at COMMIT to each process's listening
connection, which moves this process's epoch on (:meth:`PostgresStore.access_epoch` answers
from memory: no round trip per request). A notification is lost if that connection is (a
restart of the server, a network cut): so the counter is read again every ``every`` seconds,
on a connection opened afresh if the old one is gone, and a change the notifications missed
moves the epoch on then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

log = logging.getLogger(__name__)
CHANNEL = "cloudybot_access"
# How the listening connection shows in pg_stat_activity.
APPLICATION_NAME = "cloudybot access watch"


class AccessWatch:
    """This process's access epoch on a PostgreSQL database, kept by ``LISTEN`` and a periodic
    read of the revocation counter (see the module docstring)."""

    def __init__(self, url: str, every: float) -> None:
        self.url = url
        self.every = every
        self.epoch = 0
        self._conn: Any = None  # an asyncpg.Connection (asyncpg ships no type hints)
        self._schema = ""  # the notifications of this schema only are this deployment's
        self._counter: int | None = None  # as last read
        self._heard_since = False  # a notification came since it was read
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen and read the counter (raising if the database cannot be reached), then check
        it every ``every`` seconds until :meth:`stop`."""
        await self._check()
        self._task = asyncio.get_running_loop().create_task(self._check_periodically())

    async def stop(self) -> None:
        """Stop checking and close the listening connection (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._drop()

    def changed(self) -> None:
        """A token stopped working: the next authentication trusts no cached token."""
        self.epoch += 1

    async def _check(self) -> None:
        """Listen (connecting first if need be), then read the counter; once more on a fresh
        connection if the one it had was lost."""
        try:
            await self._read_counter()
        except (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError):
            await self._drop()
            await self._read_counter()

    async def _read_counter(self) -> None:
        if self._conn is None or self._conn.is_closed():
            await self._drop()
            conn = await asyncpg.connect(self.url,
                                         server_settings={"application_name": APPLICATION_NAME})
            try:
                self._schema = await conn.fetchval("SELECT current_schema()")
                await conn.add_listener(CHANNEL, self._heard)  # before the read: none missed
            except BaseException:
                await conn.close()
                raise
            self._conn = conn
        heard, self._heard_since = self._heard_since, False
        revoked = int(await self._conn.fetchval("SELECT revoked FROM access_revocations"))
        if self._counter is not None and revoked != self._counter:
            if not (heard or self._heard_since):
                log.warning("PostgreSQL: a token revocation was not heard (its notification "
                            "was lost); its tokens are refused from now on")
            self.changed()
        self._counter = revoked

    def _heard(self, conn: object, pid: int, channel: str, payload: str) -> None:
        if payload == self._schema:
            self._heard_since = True
            self.changed()

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self._check()
            except Exception as exc:  # the next round tries again
                log.warning("cannot read the token revocations from PostgreSQL: %s", exc)

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 1.0)
            if not conn.is_closed():
                conn.terminate()
