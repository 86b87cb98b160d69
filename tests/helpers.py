"""Helpers shared by the test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from gateway.billing.credits import period_of
from gateway.cli.datadir import NEW_DATABASE
from gateway.config.settings import OPTIONS, Settings
from gateway.store import Store
from gateway.store.backends import store_for


class Clock:
    """A clock the test sets: the wall clock's time when made, then moved only when told."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def to(self, moment: datetime) -> None:
        self.now = moment.timestamp()

    def next_month(self, minutes_in: float = 30) -> str:
        """Move to ``minutes_in`` minutes after the start of the next UTC month; its period."""
        self.to(month_start(self.now, months=1))
        self.advance(minutes_in * 60)
        return period_of(self.now)


def month_start(epoch: float, months: int = 0) -> datetime:
    """The first instant of the UTC month ``months`` after the one holding ``epoch``."""
    moment = datetime.fromtimestamp(epoch, UTC)
    index = moment.year * 12 + moment.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


async def assert_json_error(response: ClientResponse, status: int,
                            code: str | None = None) -> dict[str, Any]:
    """The response is ``status`` with the SPEC's error object (of ``code``, if given) and no
    traceback; return the error object."""
    text = await response.text()
    assert response.status == status, text
    assert "Traceback" not in text
    error: dict[str, Any] = json.loads(text)["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code
    return error


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """A CLI run that failed with ``code`` and exactly one stderr line, no traceback; the line.
    The warning of a command that found no database comes before it (it tells why a user or a
    session is not there; ``tests/test_cli_first_run.py`` checks it)."""
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith(NEW_DATABASE)]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@asynccontextmanager
async def reopened_store(settings: Settings) -> AsyncIterator[Store]:
    """The database of a stopped gateway, opened afresh (what the next start will see)."""
    store = store_for(settings)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def waits_on(clock: Clock) -> tuple[list[float], Callable[[float], Awaitable[None]]]:
    """A wait that moves ``clock`` instead of sleeping, and the list of what it was asked to
    wait (for ``gateway.outbox.wait`` and ``gateway.inbox.wait_for_rate``)."""
    waited: list[float] = []

    async def wait(seconds: float) -> None:
        waited.append(seconds)
        clock.advance(seconds)

    return waited, wait


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until ``predicate()`` holds, polling briefly; fail after ``timeout`` seconds."""
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.005)  # a bounded poll of something the fakes recorded
    await asyncio.wait_for(poll(), timeout)


async def until_async(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    """:func:`until` for a check that has to await (a store read)."""
    async def poll() -> None:
        while not await check():
            await asyncio.sleep(0.005)  # a bounded poll of what the store holds
    await asyncio.wait_for(poll(), timeout)


async def stop_while_held(harness: Any, release: asyncio.Event) -> None:
    """Stop the harness's gateway (by closing its client) while a fake LLM answer waits on
    ``release``; let the answer go once the stop has begun, and wait for the stop to end."""
    stopping = asyncio.ensure_future(harness.client.close())
    await until(harness.gateway.stopping.is_set)
    release.set()
    await stopping


def cli_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without any gateway setting (no ``CLOUDYBOT_*``, no core
    variable, no ``OPENAI_API_KEY``), on ``data_dir``; ``extra`` added."""
    ours = {name for option in OPTIONS for name in option.env} | {"OPENAI_API_KEY"}
    env = {name: value for name, value in os.environ.items()
           if name not in ours and not name.startswith("CLOUDYBOT_")}
    env["CLOUDYBOT_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


async def session_bytes(gateway: Any, key: str = "alice--t1") -> bytes | None:
    """The active session of ``key`` as its JSONL, wherever the gateway keeps sessions (files
    or PostgreSQL); None if there is none."""
    data: bytes | None = await gateway.sessions.export(key)
    return data


async def session_events(gateway: Any, key: str = "alice--t1") -> list[dict[str, Any]]:
    """The events of the active session of ``key`` (none if there is no session)."""
    from gateway.memory.sessions import parse_events
    return parse_events(await session_bytes(gateway, key) or b"", key)


CHROMIUM = Path("/usr/bin/chromium")


def require_chromium() -> Any:
    """For a test module that drives Debian's Chromium: skip it where Chromium or Playwright
    is missing, except in CI, where a missing Chromium is an error (``.ci/run`` installs it).
    Returns ``playwright.async_api``."""
    if not CHROMIUM.exists():  # pragma: no cover - depends on the machine
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"{CHROMIUM} is missing; .ci/run installs Debian's chromium "
                               "package")
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium); browser tests "
                    "skipped", allow_module_level=True)
    return pytest.importorskip("playwright.async_api")


@contextmanager
def unanswered_port() -> Iterator[int]:
    """A port whose connections are never made: a listener that never accepts, its backlog
    filled."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(4)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                with suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
            yield port
        finally:
            for filler in fillers:
                filler.close()
