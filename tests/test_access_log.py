"""The HTTP access log of ``cloudybot serve``: off by default (it costs about 8% of a turn's
CPU), one line per request with ``CLOUDYBOT_ACCESS_LOG=true``."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.process import ServeProcess


async def served_log(tmp_path: Path, env: dict[str, str]) -> str:
    """Start ``serve``, make two requests, stop it; return what it logged."""
    server = ServeProcess(tmp_path / "data", {"CLOUDYBOT_LLM_PROVIDER": "offline", **env})
    try:
        await server.start()
        async with aiohttp.ClientSession() as session:
            for path in ("/healthz", "/no-such-page"):
                async with session.get(f"{server.url}{path}") as response:
                    await response.read()
        assert await server.terminate() == 0
    finally:
        await server.ensure_stopped()
    return server.log.read_text()


async def test_the_access_log_is_off_by_default(tmp_path: Path) -> None:
    log = await served_log(tmp_path, {})

    assert "serving on" in log  # the log was written, just no request lines
    assert "/no-such-page" not in log


@pytest.mark.parametrize("value", ["true", "1"])
async def test_the_access_log_logs_each_request_when_turned_on(tmp_path: Path,
                                                              value: str) -> None:
    log = await served_log(tmp_path, {"CLOUDYBOT_ACCESS_LOG": value})

    lines = [line for line in log.splitlines() if "aiohttp.access" in line]
    assert any('"GET /healthz HTTP/1.1" 200' in line for line in lines), log
    assert any('"GET /no-such-page HTTP/1.1" 404' in line for line in lines), log
