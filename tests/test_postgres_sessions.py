"""Agent sessions in PostgreSQL (SPEC §18): the JSONL semantics of the session files — a
header, one event per line, rotation when idle or too large, archives — shared by every
process, so that a tool exchange made in one is replayed by another."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from gateway.memory.shared_sessions import PostgresSessions
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from tests.conftest import Harness
from tests.helpers import Clock, session_bytes, session_events
from tests.test_cli import acloudybot, last_line

StartClocked = Callable[..., Awaitable[Harness]]
CALC = ("call_1", "calculator", '{"expression": "2+3"}')


async def test_a_session_is_a_header_then_the_turns_events(
        start_clocked: StartClocked, postgres_url: str) -> None:
    harness = await start_clocked(database_url=postgres_url)
    assert isinstance(harness.gateway.sessions, PostgresSessions)
    auth = await harness.user()
    for text in ("one", "two"):
        assert (await harness.chat(auth, text)).status == 200

    events = await session_events(harness.gateway)
    assert [e["type"] for e in events] == ["session", "user", "assistant", "usage",
                                           "user", "assistant", "usage"]
    assert (events[0]["key"], events[0]["userId"], events[0]["threadId"]) == (
        "alice--t1", "alice", "t1")
    assert [e["content"] for e in events if e["type"] == "user"] == ["one", "two"]
    assert all("ts" in event for event in events[1:])
    # Its size is what the file would measure: every line and its newline.
    status = await harness.gateway.sessions.session_status("alice--t1")
    stored = await session_bytes(harness.gateway)
    assert stored is not None and status.active is not None
    assert status.active[0] == len(stored)
    assert stored.endswith(b"\n") and stored.count(b"\n") == len(events)


async def test_an_idle_session_rotates_and_the_next_turn_says_so(
        start_clocked: StartClocked, postgres_url: str, clock: Clock) -> None:
    harness = await start_clocked(database_url=postgres_url, session_idle_minutes=30)
    auth = await harness.user()
    assert (await harness.chat(auth, "before")).status == 200
    clock.advance(31 * 60)

    response = await harness.chat(auth, "after")

    assert (await response.json())["sessionRotated"] is True
    status = await harness.gateway.sessions.session_status("alice--t1")
    [archive] = status.archives
    assert archive.name.startswith("alice--t1.") and archive.name.endswith(".jsonl")
    events = await session_events(harness.gateway)
    assert events[0]["type"] == "session"
    assert events[1] == {"type": "rotation", "reason": "idle", "previous": archive.name,
                         "ts": events[1]["ts"]}
    assert [e["content"] for e in events if e["type"] == "user"] == ["after"]


async def test_a_session_past_its_size_rotates_before_the_next_turn(
        start_clocked: StartClocked, postgres_url: str) -> None:
    harness = await start_clocked(database_url=postgres_url, session_max_file_bytes=1024)
    auth = await harness.user()
    assert (await harness.chat(auth, "x" * 1200)).status == 200
    assert (await (await harness.chat(auth, "small")).json())["sessionRotated"] is True
    events = await session_events(harness.gateway)
    assert events[1]["reason"] == "size"


async def test_a_tool_exchange_made_in_one_process_is_replayed_by_another(
        start_clocked: StartClocked, postgres_url: str, fake_llm: FakeLLM) -> None:
    first = await start_clocked(database_url=postgres_url)
    second = await start_clocked(database_url=postgres_url)
    auth = await first.user()
    fake_llm.script += [Scripted(body=tool_call_completion([CALC])),
                        Scripted(body=completion("It is 5."))]
    assert (await first.chat(auth, "what is 2+3?")).status == 200

    assert (await second.chat(auth, "and doubled?")).status == 200

    replayed = fake_llm.requests[-1].messages[1:]
    assert [m["role"] for m in replayed] == ["user", "assistant", "tool", "assistant", "user"]
    assert replayed[1]["tool_calls"][0]["function"]["name"] == "calculator"
    assert replayed[2]["content"] == "2+3 = 5"


async def test_clearing_archives_and_removing_deletes_every_session_of_the_key(
        start_clocked: StartClocked, postgres_url: str) -> None:
    harness = await start_clocked(database_url=postgres_url)
    auth = await harness.user()
    assert (await harness.chat(auth, "one")).status == 200
    assert (await harness.client.post("/api/threads/t1/clear", headers=auth)).status == 200
    assert await session_bytes(harness.gateway) is None
    assert (await harness.chat(auth, "two")).status == 200
    sessions = harness.gateway.sessions
    assert len((await sessions.session_status("alice--t1")).archives) == 1

    assert await sessions.remove("alice--t1") == 2  # the active one and the archive
    status = await sessions.session_status("alice--t1")
    assert status.active is None and status.archives == []


async def test_the_cli_lists_exports_and_rotates_sessions_in_the_database(
        start_clocked: StartClocked, postgres_url: str) -> None:
    harness = await start_clocked(database_url=postgres_url)
    auth = await harness.user()
    assert (await harness.chat(auth, "hello")).status == 200
    data_dir = harness.gateway.settings.data_dir
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url}

    listed = await acloudybot(data_dir, "sessions", "list", **env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith("alice--t1\t")
    exported = await acloudybot(data_dir, "sessions", "export", "alice--t1", **env)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.encode() == await session_bytes(harness.gateway)
    assert json.loads(exported.stdout.splitlines()[0])["type"] == "session"

    rotated = await acloudybot(data_dir, "sessions", "rotate", "alice--t1", **env)
    assert rotated.returncode == 0, rotated.stderr
    assert last_line(rotated).startswith("archived alice--t1 to alice--t1.")
    missing = await acloudybot(data_dir, "sessions", "export", "alice--t1", **env)
    assert missing.returncode != 0
    assert "no active session 'alice--t1'" in missing.stderr
    # The gateway's next turn starts a new session, saying so.
    response = await harness.chat(auth, "again")
    assert (await response.json())["sessionRotated"] is True
