"""``GET /openapi.json`` (SPEC §17): every route the server has is described, the description is
the declarations the routes are registered from, and ``schemathesis`` finds no 5xx and no
answer that breaks it against a live gateway."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.api.operations import OPERATIONS
from gateway.testing.slack import SIGNING_SECRET, FakeSlack
from gateway.testing.slack import TOKEN as SLACK_TOKEN
from tests.conftest import PROXY_VARIABLES, Harness
from tests.process import ServeProcess
from tests.test_cli import acloudybot, last_line

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
EXAMPLES_PER_OPERATION = "20"


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path template) of every route but the HEADs aiohttp adds to GETs."""
    return {(route.method.lower(), route.resource.canonical)
            for route in app.router.routes()
            if route.method != "HEAD" and route.resource is not None}


async def test_every_route_is_described(start_telegram: Callable[..., Awaitable[Harness]],
                                        fake_slack: FakeSlack) -> None:
    # The Telegram and Slack channels on too: their webhook routes exist only then.
    harness = await start_telegram(slack_bot_token=SLACK_TOKEN,
                                   slack_signing_secret=SIGNING_SECRET,
                                   slack_api_base=fake_slack.base_url)
    response = await harness.client.get("/openapi.json")
    assert response.status == 200
    described = await response.json()
    assert described["openapi"] == "3.1.0"
    paths = described["paths"]
    listed = {(method, path) for path, methods in paths.items() for method in methods}

    routes = served(harness.client.app)
    assert ("post", "/telegram/webhook") in routes and ("post", "/slack/events") in routes
    assert routes <= listed
    assert {("get", "/openapi.json"), ("get", "/healthz")} <= listed


async def test_the_api_s_operations_are_described_from_their_declarations(
        harness: Harness) -> None:
    described = (await (await harness.client.get("/openapi.json")).json())["paths"]
    ids = {op["operationId"] for methods in described.values() for op in methods.values()}
    for declared in OPERATIONS:
        op = described[declared.path][declared.method.lower()]
        assert op["operationId"] == declared.operation_id
        assert str(declared.status) in op["responses"]
        assert op["summary"], declared.path
        if declared.authenticated:
            assert op["security"] and "401" in op["responses"]
            error = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert "error" in error["properties"]
        for target, _, _ in declared.links:
            assert target in ids, f"{declared.operation_id} links to unknown {target}"
    chat = described["/chat"]["post"]
    limit = harness.gateway.settings.max_message_chars
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["message"]["maxLength"] == limit  # the configured limit
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert "402" in chat["responses"] and "429" in chat["responses"]


async def test_schemathesis_finds_no_5xx_and_no_answer_off_the_description(
        tmp_path: Path) -> None:
    """``schemathesis run`` against a live ``cloudybot serve`` (the offline provider, as
    installed), a bounded number of examples per operation, with a token."""
    server = ServeProcess(tmp_path / "data", {"CLOUDYBOT_DEFAULT_PLAN": "team"})
    try:
        added = await acloudybot(server.data_dir, "users", "add", "alice", "--plan", "team")
        assert added.returncode == 0, added.stderr
        await server.start()
        tool = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
        assert tool is not None, "schemathesis is a test dependency"
        env = {key: value for key, value in os.environ.items() if key not in PROXY_VARIABLES}
        run = await asyncio.create_subprocess_exec(
            tool, "run", f"{server.url}/openapi.json",
            "-H", f"Authorization: Bearer {last_line(added)}", "--checks", CHECKS,
            "--max-examples", EXAMPLES_PER_OPERATION, "--phases",
            "examples,coverage,fuzzing,stateful", "--no-color", "--seed", "20261203",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env,
            cwd=tmp_path)
        output = (await asyncio.wait_for(run.communicate(), 600))[0].decode()
        assert run.returncode == 0, output
        passed = re.search(r"(\d+) generated, (\d+) passed", output)
        assert passed is not None and int(passed.group(2)) == int(passed.group(1)) > 500, output
        log: Any = server.log.read_text()
        assert "Traceback" not in log, log
    finally:
        await server.ensure_stopped()
