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

from gateway.api import pictures
from gateway.api.operations import OPERATIONS
from gateway.config.settings import Settings
from gateway.testing.slack import SIGNING_SECRET, FakeSlack
from gateway.testing.slack import TOKEN as SLACK_TOKEN
from tests.conftest import PROXY_VARIABLES, Harness
from tests.process import ServeProcess
from tests.test_cli import acloudybot, last_line

# Every check, a bounded and deterministic run, and the few places where a check's default
# expectation is not the API's rule (each with its reason) are in this file.
SCHEMATHESIS_CONFIG = Path(__file__).with_name("schemathesis.toml")


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


def _objects(schema: Any) -> list[dict[str, Any]]:
    """Every object schema in ``schema``, nested ones included."""
    if isinstance(schema, list):
        return [found for item in schema for found in _objects(item)]
    if not isinstance(schema, dict):
        return []
    nested = [found for value in schema.values() for found in _objects(value)]
    return [schema, *nested] if schema.get("type") == "object" else nested


async def test_operation_ids_are_unique_and_answers_closed(harness: Harness) -> None:
    described = (await (await harness.client.get("/openapi.json")).json())["paths"]
    ids = [op["operationId"] for methods in described.values() for op in methods.values()]
    assert len(ids) == len(set(ids))
    for declared in OPERATIONS:
        op = described[declared.path][declared.method.lower()]
        for status, answer in op["responses"].items():
            for media in answer.get("content", {}).values():
                for schema in _objects(media["schema"]):  # every property an answer has
                    if "properties" in schema:
                        assert schema["additionalProperties"] is False, (op["operationId"],
                                                                         status)
    chat = described["/chat"]["post"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    # without a vision model a message is required and not blank, and no picture is taken
    assert "message" in body["required"] and body["properties"]["message"]["minLength"] == 1
    assert body["properties"]["images"]["maxItems"] == 0
    assert "context_too_large" in chat["responses"]["413"]["description"]


def test_with_a_vision_model_a_turn_needs_a_message_or_pictures(
        make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(llm_vision=True)
    body = next(op for op in OPERATIONS if op.path == "/chat").body
    assert callable(body)
    schema = body(settings)
    assert "message" not in schema["required"]
    assert schema["properties"]["images"]["maxItems"] == pictures.MAX_IMAGES
    assert [option["required"] for option in schema["anyOf"]] == [["message"], ["images"]]
    assert "not blank, unless images" in schema["properties"]["message"]["description"]


async def test_schemathesis_finds_the_api_exactly_as_described(tmp_path: Path) -> None:
    """``schemathesis run`` with every check against a live ``cloudybot serve`` (the offline
    provider, as installed), with a token: no 5xx, every answer's status, media type, headers
    and body as described, every request the description allows accepted and every one it
    forbids refused, methods not served answered 405 with ``Allow``, and a deleted thread or
    specialist gone."""
    server = ServeProcess(tmp_path / "data", {"CLOUDYBOT_DEFAULT_PLAN": "team"})
    try:
        # an admin: the admin API is fuzzed as well (a non-admin's every call there is 403)
        added = await acloudybot(server.data_dir, "users", "add", "alice", "--plan", "team",
                                 "--admin")
        assert added.returncode == 0, added.stderr
        await server.start()
        tool = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
        assert tool is not None, "schemathesis is a test dependency"
        env = {key: value for key, value in os.environ.items() if key not in PROXY_VARIABLES}
        run = await asyncio.create_subprocess_exec(
            tool, "--config-file", str(SCHEMATHESIS_CONFIG), "run",
            f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {last_line(added)}",
            "--no-color", "--output-truncate", "true",
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
