"""Log lines (SPEC §17): text or JSON, every line of a turn carrying its turn, user, thread
and channel (a plugin's lines too), nothing secret; a real ``cloudybot serve`` writes JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway import hookimpl
from gateway.base.logs import log_handler, redact_in_logs
from gateway.plugins.manager import PluginManager
from tests.conftest import Harness
from tests.process import ServeProcess

plugin_log = logging.getLogger("tests.a_plugin")


class LogsEachTurn:
    """A plugin that logs from inside the turn."""

    @hookimpl
    def turn_completed(self, reply: str) -> None:
        plugin_log.info("the reply has %d characters", len(reply))


@pytest.fixture
def captured(request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """The root logger also writes, in the format the test names, to a buffer."""
    stream = io.StringIO()
    handler = log_handler(getattr(request, "param", "json"), stream)
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    yield stream.getvalue
    root.removeHandler(handler)
    root.setLevel(level)


async def test_every_line_of_a_turn_carries_the_turn_as_json(
        pm: PluginManager, start_gateway: Callable[..., Awaitable[Harness]],
        captured: Callable[[], str]) -> None:
    pm.register(LogsEachTurn(), name="logs-each-turn")
    harness = await start_gateway()
    alice = await harness.user("alice")
    assert (await harness.chat(alice, "hello", thread="t1")).status == 200
    assert (await harness.chat(alice, "again", thread="t2")).status == 200
    plugin_log.info("outside any turn")

    lines = [json.loads(line) for line in captured().splitlines()]
    ours = [line for line in lines if line["logger"] == "tests.a_plugin"]
    assert [line["message"] for line in ours] == ["the reply has 11 characters",
                                                  "the reply has 11 characters",
                                                  "outside any turn"]
    first, second, outside = ours
    assert (first["user"], first["thread"], first["channel"]) == ("alice", "t1", "dashboard")
    assert second["thread"] == "t2" and second["turn"] != first["turn"]
    assert "turn" not in outside and "user" not in outside
    assert {"time", "level", "logger", "message"} <= set(first)
    assert first["level"] == "INFO" and first["time"].endswith("Z")


@pytest.mark.parametrize("captured", ["text"], indirect=True)
async def test_text_lines_end_with_the_turn(pm: PluginManager,
                                            start_gateway: Callable[..., Awaitable[Harness]],
                                            captured: Callable[[], str]) -> None:
    pm.register(LogsEachTurn(), name="logs-each-turn")
    harness = await start_gateway()
    alice = await harness.user("alice")
    assert (await harness.chat(alice, "hello")).status == 200
    [line] = [line for line in captured().splitlines() if "tests.a_plugin" in line]
    assert " INFO tests.a_plugin: the reply has 11 characters [turn=" in line
    assert line.endswith(" user=alice thread=t1 channel=dashboard]")


def test_secrets_and_tracebacks_are_masked_in_json(captured: Callable[[], str]) -> None:
    redact_in_logs("sk-very-secret-token")
    try:
        raise RuntimeError("calling with sk-very-secret-token failed")
    except RuntimeError:
        plugin_log.exception("the key sk-very-secret-token was refused")
    [line] = [json.loads(text) for text in captured().splitlines()]
    assert "sk-very-secret-token" not in json.dumps(line)
    assert "<redacted>" in line["message"] and "RuntimeError" in line["exception"]


async def test_serve_writes_json_lines_at_the_level_asked(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", {"CLOUDYBOT_LOG_FORMAT": "json",
                                              "CLOUDYBOT_LOG_LEVEL": "debug"})
    try:
        await server.start()
    finally:
        await server.ensure_stopped()
    lines: list[dict[str, Any]] = []
    for text in server.log.read_text().splitlines():
        if text.startswith("{"):
            lines.append(json.loads(text))
        else:  # the start-up line: what runs
            assert text.startswith("cloudybot: serving on "), text
            assert "(provider: offline; channels: dashboard" in text
            assert "tools: " in text and "current_time" in text
    assert lines and all({"time", "level", "logger", "message"} <= set(line)
                         for line in lines)
    assert any(line["level"] == "DEBUG" for line in lines)
