"""Revocation takes effect at once in every process: a running ``cloudybot serve`` that has
just let a token in (and cached it) refuses it on the very next request after the real CLI
(``users revoke``, ``users delete``, ``users token``) ended it from another process, on
SQLite and on PostgreSQL with two gateways; on PostgreSQL within the leader retry interval
even when the notification is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from gateway.store.postgres_access import APPLICATION_NAME
from tests.process import ServeProcess
from tests.test_cli import acloudybot, last_line

SECRET = "one-secret-key-for-every-process"
# How each command ends alice's token (``users token`` also prints a new one).
ENDINGS = {"revoke": ("users", "revoke", "alice"),
           "delete": ("users", "delete", "alice", "--yes"),
           "token": ("users", "token", "alice")}


async def status(process: ServeProcess, token: str) -> int:
    """The status of one authenticated request to ``process``."""
    async with aiohttp.ClientSession() as session, session.get(
            f"{process.url}/api/user/credits",
            headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status


async def cli(process: ServeProcess, *args: str) -> str:
    """Run ``cloudybot ARGS`` on the process's store; its last line."""
    result = await acloudybot(process.data_dir, *args, **process.overrides)
    assert result.returncode == 0, result.stderr
    return last_line(result)


@pytest.fixture
async def sqlite_gateway(tmp_path: Path) -> AsyncIterator[ServeProcess]:
    process = ServeProcess(tmp_path / "serve", {})
    try:
        await process.start()
        yield process
    finally:
        await process.ensure_stopped()


@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_sqlite_gateway_refuses_a_token_the_cli_ended_on_the_next_request(
        sqlite_gateway: ServeProcess, ending: str) -> None:
    token = await cli(sqlite_gateway, "users", "add", "alice")
    assert await status(sqlite_gateway, token) == 200  # known now, and cached
    assert await status(sqlite_gateway, token) == 200
    printed = await cli(sqlite_gateway, *ENDINGS[ending])
    assert await status(sqlite_gateway, token) == 401
    if ending == "token":
        assert await status(sqlite_gateway, printed) == 200


def postgres_gateway(tmp_path: Path, url: str, name: str, **env: str) -> ServeProcess:
    return ServeProcess(tmp_path / name, {"CLOUDYBOT_DATABASE_URL": url,
                                          "CLOUDYBOT_SECRET_KEY": SECRET, **env})


@pytest.fixture
async def two_gateways(tmp_path: Path, postgres_url: str) -> AsyncIterator[list[ServeProcess]]:
    processes = [postgres_gateway(tmp_path, postgres_url, f"gateway-{index}")
                 for index in range(2)]
    try:
        await asyncio.gather(*(process.start() for process in processes))
        yield processes
    finally:
        for process in processes:
            await process.ensure_stopped()


@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_postgres_gateways_both_refuse_a_token_the_cli_ended_on_the_next_request(
        two_gateways: list[ServeProcess], ending: str) -> None:
    token = await cli(two_gateways[0], "users", "add", "alice")
    for process in two_gateways:
        assert await status(process, token) == 200  # cached in each
        assert await status(process, token) == 200
    printed = await cli(two_gateways[0], *ENDINGS[ending])
    assert [await status(process, token) for process in two_gateways] == [401, 401]
    if ending == "token":
        assert [await status(process, printed) for process in two_gateways] == [200, 200]


async def test_a_lost_notification_is_caught_up_within_the_leader_retry_interval(
        tmp_path: Path, postgres_url: str) -> None:
    retry = 0.5
    process = postgres_gateway(tmp_path, postgres_url, "serve",
                               CLOUDYBOT_LEADER_RETRY_SECONDS=str(retry))
    try:
        await process.start()
        token = await cli(process, "users", "add", "alice")
        assert await status(process, token) == 200  # cached
        conn = await asyncpg.connect(postgres_url)
        try:
            # The gateway's listening connection is cut, and while it is down (in the same
            # round trip) the token is revoked: its notification reaches nobody.
            await conn.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                f" WHERE application_name = '{APPLICATION_NAME}'"
                " AND datname = current_database();"
                "DELETE FROM api_tokens WHERE user_id = 'alice'")
        finally:
            await conn.close()
        revoked = time.monotonic()
        while await status(process, token) == 200:  # a bounded poll: the retry interval
            assert time.monotonic() - revoked < retry + 2.0, "still let in"
            await asyncio.sleep(0.05)
        assert await status(process, token) == 401
        await process.terminate()
        assert "a token revocation was not heard" in process.log.read_text()
    finally:
        await process.ensure_stopped()
