"""One live session with one MCP server (for one user, when the server is per user).

The SDK's transports and :class:`mcp.ClientSession` are context managers that must be left in
the task that entered them, so each session lives in a task of its own (``_run``), which
holds it open until :meth:`Connection.close` or until the server goes away (its stream ends:
the process exited, the HTTP session ended). The next use then connects again; after a failed
attempt the next one waits, doubling from 0.5 s up to ``max_reconnect_seconds``, and a call
in that window is answered at once with the reason (a tool error the model reads).

Tools are listed when connecting and again only when the server sends
``notifications/tools/list_changed``, never per turn or per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO, cast

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from plugins.mcp.settings import ServerConfig

log = logging.getLogger("cloudybot.plugin.mcp")
CLIENT = types.Implementation(name="cloudybot", version="1")
FIRST_RETRY_SECONDS = 0.5
CLOSE_SECONDS = 1.0


class Unreachable(Exception):
    """The server cannot be reached now (it says why)."""


class CallTimedOut(Exception):
    """A call went ``timeout_seconds`` without an answer or a progress notification."""


@dataclass(frozen=True)
class Limits:
    """How long connecting may take, and the longest wait between attempts."""

    connect_seconds: float
    max_retry_seconds: float


class _Watched:
    """The session's read stream, which sets ``ended`` once the SDK stops reading it (the
    server went away, or the session closed)."""

    def __init__(self, stream: Any, ended: asyncio.Event) -> None:
        self._stream = stream
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            self._ended.set()
            raise

    async def __aenter__(self) -> _Watched:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._ended.set()
        await self._stream.aclose()


class Connection:
    """A session with one server, opened on first use and kept open across turns."""

    def __init__(self, server: ServerConfig, limits: Limits, user_id: str | None,
                 count: Callable[..., None]) -> None:
        self.server = server
        self.limits = limits
        self.user_id = user_id
        self._count = count
        self.tools: tuple[types.Tool, ...] = ()
        self.version = 0  # one more each time the tools were listed
        self.error = ""  # why it is down, if it is
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._stop = asyncio.Event()
        self._failures = 0
        self._retry_at = 0.0
        self._connected_before = False
        self._refreshes: set[asyncio.Task[None]] = set()
        self._ended = asyncio.Event()  # set once the SDK stopped reading the open session

    @property
    def state(self) -> str:
        """``connected``, ``connecting``, ``down`` or ``idle`` (never used)."""
        if self._session is not None:
            return "connected"
        if self._task is not None and not self._task.done():
            return "connecting"
        return "down" if self.error else "idle"

    def start(self) -> None:
        """Begin connecting in the background (if not connected or connecting)."""
        if self._task is None or self._task.done():
            self._stop.clear()
            loop = asyncio.get_running_loop()
            self._ready = loop.create_future()
            self._ready.add_done_callback(_retrieve)
            self._task = loop.create_task(self._run(self._ready),
                                          name=f"mcp {self.server.name}")

    def may_retry(self) -> bool:
        """Whether a failed connection's wait before its next attempt is over."""
        return asyncio.get_running_loop().time() >= self._retry_at

    async def session(self) -> ClientSession:
        """The open session, connecting if needed.

        :raises Unreachable: the server could not be reached (or is waiting for its next
            attempt), or did not answer within the connect timeout.
        """
        if self._session is not None and not self._ended.is_set():
            return self._session
        if self._ended.is_set() and self._task is not None:  # gone: let its task end first
            await asyncio.gather(self._task, return_exceptions=True)
        if self._task is None or self._task.done():
            wait = self._retry_at - asyncio.get_running_loop().time()
            if wait > 0:
                raise Unreachable(f"{self.error}; the next attempt is in {wait:.1f} s")
            self.start()
        assert self._ready is not None and self._task is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready),
                                          self.limits.connect_seconds)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._failed(f"no answer within {self.limits.connect_seconds:g} s")
            raise Unreachable(self.error) from None

    async def relisted(self) -> None:
        """Wait for a listing the server asked for (its tool list changed) to finish."""
        if self._refreshes:
            await asyncio.wait(set(self._refreshes), timeout=self.limits.connect_seconds)

    async def call(self, name: str, arguments: dict[str, Any],
                   timeout: float) -> types.CallToolResult:
        """Call tool ``name``; ``timeout`` seconds without an answer or a progress
        notification cancels it (the SDK then sends ``notifications/cancelled``).

        :raises Unreachable: see :meth:`session`.
        :raises CallTimedOut: the call was cancelled after ``timeout`` seconds of silence.
        :raises MCPError: the server answered with an error, or went away mid-call.
        """
        session = await self.session()
        alive = asyncio.Event()

        async def progressed(progress: float, total: float | None, message: str | None) -> None:
            alive.set()

        call = asyncio.ensure_future(session.call_tool(name, arguments,
                                                       progress_callback=progressed))
        try:
            while True:
                waiter = asyncio.ensure_future(alive.wait())
                done, _ = await asyncio.wait({call, waiter}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if call in done:
                    return call.result()
                if not done:
                    raise CallTimedOut(f"no answer and no progress for {timeout:g} s")
                alive.clear()
        finally:
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

    async def close(self) -> None:
        """End the session (within ``CLOSE_SECONDS``, then by cancelling it)."""
        self._stop.set()
        for refresh in self._refreshes:
            refresh.cancel()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_SECONDS)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # --- the session's task -------------------------------------------------------------
    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        server = self.server
        if server.transport == "stdio":
            return stdio_client(StdioServerParameters(
                command=server.command, args=list(server.args), env=server.resolved_env(),
                cwd=server.cwd or None), errlog=_errlog())
        client = httpx2.AsyncClient(headers=server.resolved_headers(self.user_id),
                                    timeout=httpx2.Timeout(30.0, read=300.0))
        return _http(server.url, client)

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        ended = self._ended = asyncio.Event()
        if self._connected_before or self._failures:
            self._count("reconnects", server=self.server.name)
        self._count("connects", server=self.server.name)
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(
                    cast(Any, _Watched(read, ended)), write, message_handler=self._on_message,
                    client_info=CLIENT))
                await session.initialize()
                await self._list(session)
                self._session, self._failures, self.error = session, 0, ""
                self._connected_before = True
                ready.set_result(session)
                await _first(self._stop.wait(), ended.wait())
                if not self._stop.is_set():
                    self.error = "the server closed the connection"
                    log.warning("MCP server %s closed the connection", self.server.name)
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # ExceptionGroups of the transports' task groups
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            reason = _reason(exc)
            if not ready.done():
                self._failed(reason)
                ready.set_exception(Unreachable(reason))
            else:
                self.error = reason
            log.warning("MCP server %s: %s", self.server.name, reason)
        finally:
            self._session = None

    def _failed(self, reason: str) -> None:
        """A connection attempt failed: the next waits (doubling)."""
        self.error = reason
        self._failures += 1
        delay = min(self.limits.max_retry_seconds,
                    FIRST_RETRY_SECONDS * 2 ** (self._failures - 1))
        self._retry_at = asyncio.get_running_loop().time() + delay

    async def _list(self, session: ClientSession) -> None:
        """List every tool (all pages)."""
        self._count("tools_lists", server=self.server.name)
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tuple(tools)
        self.version += 1

    async def _on_message(self, message: Any) -> None:
        """A notification from the server: a changed tool list is listed again, in the
        background (never inline: the SDK's read loop is waiting on this)."""
        if isinstance(message, types.ToolListChangedNotification) and self._session:
            task = asyncio.get_running_loop().create_task(self._relist(self._session))
            self._refreshes.add(task)
            task.add_done_callback(self._refreshes.discard)

    async def _relist(self, session: ClientSession) -> None:
        try:
            await self._list(session)
        except Exception as exc:
            log.warning("MCP server %s: listing its tools again failed: %s",
                        self.server.name, _reason(exc))


@contextlib.asynccontextmanager
async def _http(url: str, client: httpx2.AsyncClient) -> Any:
    """Streamable HTTP over ``client`` (closed after)."""
    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


async def _first(*waits: Any) -> None:
    """Wait until the first of ``waits`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours (the real one when it is captured)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or sys.stderr
    return sys.stderr


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a failed connection's exception retrieved (nobody may have waited for it)."""
    if not future.cancelled():
        future.exception()


def _reason(exc: BaseException) -> str:
    """One line on why: the innermost exception of a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text
