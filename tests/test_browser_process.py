"""The browser in a real ``cloudybot serve``: Chromium runs only while the gateway does. A
SIGTERM closes it with the gateway (exit 0); a SIGKILL, where no clean-up runs, still leaves
no Chromium behind (Playwright's driver sees its pipe close and takes Chromium down)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp

from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.testing.processes import alive, descendants, named
from tests.fakes.website import Website
from tests.helpers import require_chromium, until
from tests.process import ServeProcess

require_chromium()


async def serve_with_an_open_page(tmp_path: Path, fake_llm: FakeLLM,
                                  website: Website) -> tuple[ServeProcess, set[int]]:
    server = ServeProcess(tmp_path / "data", {
        "CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
        "CLOUDYBOT_LLM_MODEL": "fake-model", "CLOUDYBOT_BROWSER_ALLOW_PRIVATE": "true"})
    added = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "users", "add", "alice", env=server.env,
        stdout=asyncio.subprocess.PIPE)
    token = (await added.communicate())[0].decode().split()[-1]
    await server.start()
    fake_llm.script += [
        Scripted(body=tool_call_completion([("call_0", "browser", json.dumps(
            {"action": "open", "url": f"{website.base}/table"}))])),
        Scripted(body=completion("The table is open."))]
    async with aiohttp.ClientSession() as session, session.post(
            f"{server.url}/chat", json={"threadId": "t1", "message": "open the table"},
            headers={"Authorization": f"Bearer {token}"}) as response:
        assert response.status == 200, await response.text()
        assert (await response.json())["reply"] == "The table is open."
    assert website.hits == ["/table"]
    assert server.process is not None
    browsers = named(descendants(server.process.pid), "chromium")
    assert browsers, "no Chromium process runs under the gateway"
    return server, browsers


async def test_sigterm_closes_chromium_with_the_gateway(
        tmp_path: Path, fake_llm: FakeLLM, website: Website) -> None:
    server, browsers = await serve_with_an_open_page(tmp_path, fake_llm, website)
    try:
        assert await server.terminate() == 0
        await until(lambda: not alive(browsers), timeout=10)
    finally:
        await server.ensure_stopped()
    assert "closed the context of alice--t1 (gateway stopping" in server.log.read_text()


async def test_sigkill_leaves_no_chromium_behind(
        tmp_path: Path, fake_llm: FakeLLM, website: Website) -> None:
    server, browsers = await serve_with_an_open_page(tmp_path, fake_llm, website)
    try:
        await server.kill()
        await until(lambda: not alive(browsers), timeout=15)
    finally:
        await server.ensure_stopped()
