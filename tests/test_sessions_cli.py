"""``cloudybot sessions list|show|rotate``, run for real in a subprocess on a gateway's data dir."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gateway.memory.sessions import RotationRule, SessionStore, read_events
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.turn.prompt import ROTATION_HINT
from tests.conftest import Harness
from tests.helpers import assert_one_line_error, cli_env

# The session files; sessions in PostgreSQL are tested in test_postgres_sessions.py.
pytestmark = pytest.mark.sqlite_only

StartGateway = Callable[..., Awaitable[Harness]]
Turns = tuple[Harness, dict[str, str]]  # a gateway that ran turns, and alice's auth header
CLI_TIMEOUT_SECONDS = 60




async def sessions_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``cloudybot sessions ARGS`` without blocking the gateway's event loop."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gateway.cli", "sessions", *args],
        env=cli_env(data_dir), cwd=data_dir.parent, capture_output=True, text=True,
        timeout=CLI_TIMEOUT_SECONDS)


@pytest.fixture
async def harness_with_turns(start_gateway: StartGateway,
                             fake_llm: FakeLLM) -> Turns:
    """A gateway that answered turns on ``alice--t1`` (one with a tool) and ``alice--a:b``."""
    harness = await start_gateway()
    auth = await harness.user()
    fake_llm.script += [Scripted(body=tool_call_completion(
                            [("call_1", "calculator", '{"expression": "2+3"}')])),
                        Scripted(body=completion("It is 5."))]
    for message, thread in [("what is 2+3?", "t1"), ("hello", "a:b")]:
        response = await harness.chat(auth, message, thread=thread)
        assert response.status == 200, await response.text()
    return harness, auth


def telegram_session(data_dir: Path) -> Path:
    """A channel session (``telegram:42``) written the way the gateway writes them."""
    store = SessionStore(data_dir / "sessions", rule=RotationRule(30, 204_800),
                         count_message=lambda message: 1)
    store.append("telegram:42", "telegram:7", "telegram:42",
                 [{"type": "user", "content": "salut"}, {"type": "assistant", "content": "hi"}])
    return store.path_for("telegram:42")


# --- list ---------------------------------------------------------------------------------------
async def test_list_shows_each_session_key_and_its_size(
        harness_with_turns: Turns, data_dir: Path) -> None:
    telegram = telegram_session(data_dir)

    result = await sessions_cli(data_dir, "list")

    assert result.returncode == 0, result.stderr
    rows = {line.split("\t")[0]: line for line in result.stdout.splitlines() if "\t" in line}
    expected = {"alice--t1": data_dir / "sessions" / "alice--t1.jsonl",
                "alice--a:b": data_dir / "sessions" / "alice--a%3Ab.jsonl",
                "telegram:42": telegram}
    assert set(rows) == set(expected)
    for key, path in expected.items():
        assert f"\t{path.stat().st_size} bytes" in rows[key]


async def test_list_of_a_data_dir_without_sessions_is_empty(data_dir: Path) -> None:
    result = await sessions_cli(data_dir, "list")

    assert result.returncode == 0, result.stderr
    assert "\t" not in result.stdout
    assert "0 active" in result.stdout


# --- show ---------------------------------------------------------------------------------------
async def test_show_prints_the_events_as_json_lines(
        harness_with_turns: Turns, data_dir: Path) -> None:
    path = data_dir / "sessions" / "alice--t1.jsonl"

    result = await sessions_cli(data_dir, "show", "alice--t1")

    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed == read_events(path)
    assert [e["type"] for e in printed] == ["session", "user", "tool_calls", "tool_result",
                                            "assistant", "usage"]


async def test_show_takes_the_key_not_the_file_name(data_dir: Path) -> None:
    telegram_session(data_dir)

    result = await sessions_cli(data_dir, "show", "telegram:42")

    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed[0]["key"] == "telegram:42"
    assert [e.get("content") for e in printed[1:]] == ["salut", "hi"]


async def test_show_skips_a_torn_last_line(data_dir: Path) -> None:
    path = telegram_session(data_dir)
    with path.open("ab") as handle:
        handle.write(b'{"type":"user","content":"tor')

    result = await sessions_cli(data_dir, "show", "telegram:42")

    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 3
    assert "Traceback" not in result.stderr


# --- rotate -------------------------------------------------------------------------------------
async def test_rotate_moves_the_session_to_the_archive(
        harness_with_turns: Turns, data_dir: Path) -> None:
    path = data_dir / "sessions" / "alice--t1.jsonl"
    content = path.read_bytes()

    result = await sessions_cli(data_dir, "rotate", "alice--t1")

    assert result.returncode == 0, result.stderr
    assert not path.exists()
    archived = list((data_dir / "sessions" / "archive").iterdir())
    assert len(archived) == 1
    assert archived[0].name.startswith("alice--t1.")
    assert archived[0].read_bytes() == content
    assert str(archived[0]) in result.stdout
    assert (data_dir / "sessions" / "alice--a%3Ab.jsonl").exists()  # only that session
    listed = await sessions_cli(data_dir, "list")
    assert "alice--t1\t" not in listed.stdout


@pytest.mark.parametrize("command", ["show", "rotate"])
async def test_an_unknown_key_is_a_one_line_error(data_dir: Path, command: str) -> None:
    telegram_session(data_dir)

    result = await sessions_cli(data_dir, command, "nobody--t9")

    line = assert_one_line_error(result, 1)
    assert "nobody--t9" in line
    assert (data_dir / "sessions" / "telegram%3A42.jsonl").exists()


async def test_rotate_refuses_a_key_that_would_escape_sessions(data_dir: Path) -> None:
    telegram_session(data_dir)
    outside = data_dir / "outside.jsonl"
    outside.write_text('{"type":"session"}\n')

    result = await sessions_cli(data_dir, "rotate", "../outside")

    assert_one_line_error(result, 1)
    assert outside.exists()


async def test_a_running_gateway_notices_a_rotation_from_the_cli(
        harness_with_turns: Turns, data_dir: Path, fake_llm: FakeLLM) -> None:
    harness, auth = harness_with_turns
    assert (await sessions_cli(data_dir, "rotate", "alice--t1")).returncode == 0

    response = await harness.chat(auth, "after the rotation")

    assert response.status == 200, await response.text()
    path = data_dir / "sessions" / "alice--t1.jsonl"
    header, *events = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["type"] == "session" and header["key"] == "alice--t1"
    assert [e["type"] for e in events] == ["user", "assistant", "usage"]
    assert events[0]["content"] == "after the rotation"
    # tool state went with the archived file; rolling memory did not
    messages = fake_llm.requests[-1].messages
    assert not any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    assert {"role": "assistant", "content": "It is 5."} in messages


async def test_the_turn_after_a_cli_rotation_carries_the_hint(
        harness_with_turns: Turns, data_dir: Path, fake_llm: FakeLLM) -> None:
    harness, auth = harness_with_turns
    assert (await sessions_cli(data_dir, "rotate", "alice--t1")).returncode == 0

    response = await harness.chat(auth, "after the rotation")

    assert response.status == 200
    assert fake_llm.requests[-1].system_text.endswith(ROTATION_HINT)

