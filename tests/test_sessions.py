"""Agent sessions (SPEC §5): JSONL session files, key encoding, rotation and torn lines.

The session store is tested directly and through ``/chat``. Idle rotation uses an injected clock
(``Gateway(..., clock=...)``): the store compares that clock with the file's modification time,
so moving the clock forward makes the session look idle without sleeping.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway, hookimpl
from gateway.app import build_app
from gateway.config.settings import Settings
from gateway.memory.sessions import (
    Rotation,
    RotationRule,
    SessionStore,
    ToolExchange,
    decode_key,
    encode_key,
    read_events,
)
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, tool_call_completion
from gateway.testing.plugin import ReplyRecorder
from gateway.turn.prompt import ROTATION_HINT
from tests.conftest import Harness

# The session files; sessions in PostgreSQL are tested in test_postgres_sessions.py.
pytestmark = pytest.mark.sqlite_only

IDLE_MINUTES = 30.0
PAST_IDLE_SECONDS = IDLE_MINUTES * 60 + 5
SAFE_NAME = re.compile(r"[A-Za-z0-9._%-]+")
STAMP = r"\d{8}T\d{6}(?:\.\d+)?Z(?:-\d+)?"


class FakeClock:
    """The wall clock plus an offset a test moves forward; or frozen at one instant."""

    def __init__(self, frozen: float | None = None) -> None:
        self.offset = 0.0
        self.frozen = frozen

    def __call__(self) -> float:
        return (time.time() if self.frozen is None else self.frozen) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def back_in_step(self) -> None:
        """Forget the offset: files written from now on carry this clock's time as mtime."""
        self.offset = 0.0


StartClocked = Callable[..., Awaitable[Harness]]


async def start_with_clock(aiohttp_client: Any, settings: Settings, pm: PluginManager,
                           clock: Callable[[], float]) -> Harness:
    """A gateway on ``settings`` whose sessions use ``clock``, behind a test client."""
    gateway = Gateway(settings, pm, clock=clock)
    client = await aiohttp_client(await build_app(gateway))
    return Harness(gateway, client, ReplyRecorder())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def session_file(harness: Harness, name: str) -> Path:
    return harness.gateway.settings.sessions_dir / name


def archive_dir(harness: Harness) -> Path:
    return harness.gateway.settings.sessions_dir / "archive"


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path`` parsed (a line that does not parse fails the test)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def archives(harness: Harness, encoded_key: str) -> list[Path]:
    pattern = re.compile(rf"{re.escape(encoded_key)}\.{STAMP}\.jsonl")
    return sorted(p for p in archive_dir(harness).iterdir() if pattern.fullmatch(p.name))


async def chat_ok(harness: Harness, auth: dict[str, str], message: str,
                  thread: str = "t1") -> dict[str, Any]:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def get_thread(harness: Harness, auth: dict[str, str],
                     thread: str = "t1") -> dict[str, Any]:
    response = await harness.client.get(f"/api/threads/{thread}", headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def make_store(root: Path, clock: Callable[[], float] = time.time,
               idle_minutes: float = IDLE_MINUTES, max_bytes: int = 204_800) -> SessionStore:
    return SessionStore(root, rule=RotationRule(idle_minutes, max_bytes),
                        count_message=lambda message: 1, clock=clock)


def assert_utc_timestamp(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
    assert moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0, value
    return moment


# --- file names: the %XX encoding ----------------------------------------------------------
KEYS = [
    "alice--t1",
    "telegram:42",
    "telegram:42:7",
    "slack:T01:C02:1700000000.000100",
    "a/b",
    "/etc/passwd",
    "../../etc/passwd",
    "..",
    ".",
    "...",
    "./x",
    "..%2F..%2Fescape",
    "%",
    "%%",
    "%2F",
    "%zz",
    "a%3Ab",
    "a:b",
    "a b",
    " ",
    "tab\there",
    "new\nline",
    "nul\x00byte",
    "\x00",
    "back\\slash",
    "C:\\Windows\\system32",
    "~alice",
    "$HOME",
    "*?[]",
    "ünïcödé",
    "e\u0301",  # "é" decomposed: other bytes than the composed form below
    "\u00e9",
    "日本語のスレッド",
    "emoji 🙂",
    "\u202eRTL override",
    "A",
    "a",
    "-leading-dash",
    "trailing.",
    "x" * 60,
]


def test_session_file_names_follow_the_spec_examples(tmp_path: Path) -> None:
    store = make_store(tmp_path / "sessions")

    assert store.path_for("alice--t1") == tmp_path / "sessions" / "alice--t1.jsonl"
    assert store.path_for("telegram:42") == tmp_path / "sessions" / "telegram%3A42.jsonl"
    assert encode_key("slack:T1:C2") == "slack%3AT1%3AC2"
    assert encode_key("%") == "%25"
    assert encode_key("é") == "%C3%A9"


@pytest.mark.parametrize("key", KEYS, ids=[repr(k)[:40] for k in KEYS])
def test_every_key_maps_to_a_safe_name_inside_sessions_that_round_trips(
        tmp_path: Path, key: str) -> None:
    root = tmp_path / "sessions"
    store = make_store(root)

    name = encode_key(key)
    path = store.path_for(key)

    assert SAFE_NAME.fullmatch(name), name
    assert decode_key(name) == key
    assert path.name == f"{name}.jsonl"
    assert path.parent == root
    assert path.resolve().parent == root.resolve()
    assert path.name not in {".", ".."}


def test_keys_never_share_a_file_and_each_file_lands_in_sessions(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = make_store(root)

    for index, key in enumerate(KEYS):
        store.append(key, "alice", f"t{index}", [{"type": "user", "content": key}])

    assert len({encode_key(key) for key in KEYS}) == len(KEYS)
    files = sorted(p.name for p in root.iterdir() if p.is_file())
    assert len(files) == len(KEYS)
    assert {decode_key(name.removesuffix(".jsonl")) for name in files} == set(KEYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]  # nothing escaped
    for key in KEYS:
        header, event = json_lines(store.path_for(key))
        assert header["key"] == key
        assert event["content"] == key
    assert {listed for listed, _, _ in store.list_sessions()} == set(KEYS)


# --- file contents ------------------------------------------------------------------------------
async def test_chat_writes_a_header_then_typed_timestamped_events(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user()

    body = await chat_ok(harness, auth, "hello")

    path = session_file(harness, "alice--t1.jsonl")
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    header, *events = json_lines(path)
    assert set(header) == {"type", "key", "userId", "threadId", "createdAt"}
    assert header["type"] == "session"
    assert (header["key"], header["userId"], header["threadId"]) == ("alice--t1", "alice", "t1")
    created = assert_utc_timestamp(header["createdAt"])
    assert abs(created.timestamp() - time.time()) < 60
    assert [e["type"] for e in events] == ["user", "assistant", "usage"]
    for event in events:
        assert abs(assert_utc_timestamp(event["ts"]).timestamp() - time.time()) < 60
    assert events[0]["content"] == "hello"
    assert events[1]["content"] == body["reply"] == "echo: hello"
    assert events[2]["promptTokens"] == body["usage"]["promptTokens"]
    assert events[2]["completionTokens"] == body["usage"]["completionTokens"]


async def test_a_second_turn_appends_without_a_second_header(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user()

    await chat_ok(harness, auth, "one")
    await chat_ok(harness, auth, "two")

    types = [e["type"] for e in json_lines(session_file(harness, "alice--t1.jsonl"))]
    assert types == ["session", "user", "assistant", "usage", "user", "assistant", "usage"]


async def test_tool_calls_and_results_are_session_events(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    fake_llm.script.append(Scripted(body=tool_call_completion(
        [("call_1", "calculator", '{"expression": "2+3"}')])))

    await chat_ok(harness, auth, "what is 2+3?")

    events = json_lines(session_file(harness, "alice--t1.jsonl"))[1:]
    assert [e["type"] for e in events] == ["user", "tool_calls", "tool_result", "assistant",
                                           "usage"]
    calls, result = events[1], events[2]
    assert calls["calls"] == [{"id": "call_1", "name": "calculator",
                               "arguments": '{"expression": "2+3"}'}]
    assert result["toolCallId"] == "call_1"
    assert result["content"] == "2+3 = 5"
    assert all("ts" in e for e in events)


async def test_threads_and_users_get_files_of_their_own(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    alice = await harness.user("alice")
    bob = await harness.user("bob")

    await chat_ok(harness, alice, "alice one", thread="t1")
    await chat_ok(harness, alice, "alice two", thread="t2")
    await chat_ok(harness, bob, "bob one", thread="t1")
    await chat_ok(harness, alice, "alice colon", thread="a:b")

    expected = {"alice--t1.jsonl": ("alice", "t1", "alice one"),
                "alice--t2.jsonl": ("alice", "t2", "alice two"),
                "bob--t1.jsonl": ("bob", "t1", "bob one"),
                "alice--a%3Ab.jsonl": ("alice", "a:b", "alice colon")}
    files = {p.name for p in harness.gateway.settings.sessions_dir.glob("*.jsonl")}
    assert files == set(expected)
    for name, (user, thread, message) in expected.items():
        header, user_event, *_ = json_lines(session_file(harness, name))
        assert (header["userId"], header["threadId"], user_event["content"]) == (
            user, thread, message)


async def test_longest_valid_thread_and_user_ids_still_chat(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user("u" * 128)
    thread = "x:" * 64  # 128 valid characters; every ":" becomes "%3A" in the file name

    response = await harness.chat(auth, "hello", thread=thread)

    assert response.status == 200, await response.text()
    files = list(harness.gateway.settings.sessions_dir.glob("*.jsonl"))
    assert len(files) == 1
    assert json_lines(files[0])[0]["key"] == f"{'u' * 128}--{thread}"


# --- idle rotation ------------------------------------------------------------------------------
async def test_idle_session_rotates_before_the_turn_and_the_turn_says_so(
        start_clocked: StartClocked, clock: FakeClock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(session_idle_minutes=IDLE_MINUTES)
    auth = await harness.user()
    first = await chat_ok(harness, auth, "first")
    path = session_file(harness, "alice--t1.jsonl")
    old_content = path.read_bytes()

    clock.advance(PAST_IDLE_SECONDS)
    rotating = await chat_ok(harness, auth, "second")
    rotating_request = fake_llm.requests[-1]
    clock.back_in_step()
    after = await chat_ok(harness, auth, "third")

    assert first["sessionRotated"] is False
    assert rotating["sessionRotated"] is True
    assert after["sessionRotated"] is False
    assert rotating_request.system_text.endswith(ROTATION_HINT)
    assert ROTATION_HINT not in fake_llm.requests[0].system_text
    assert ROTATION_HINT not in fake_llm.requests[-1].system_text
    [archived] = archives(harness, "alice--t1")
    assert archived.read_bytes() == old_content
    header, rotation, *rest = json_lines(path)
    assert header["type"] == "session" and header["key"] == "alice--t1"
    assert rotation["type"] == "rotation"
    assert rotation["reason"] == "idle"
    assert rotation["previous"] == archived.name
    assert_utc_timestamp(rotation["ts"])
    assert [e["type"] for e in rest] == ["user", "assistant", "usage"] * 2
    assert [e["content"] for e in rest if e["type"] == "user"] == ["second", "third"]


async def test_archive_name_is_the_encoded_key_and_the_utc_time_of_rotation(
        start_clocked: StartClocked, clock: FakeClock, pm: PluginManager) -> None:
    class Watcher:
        @hookimpl
        def session_rotated(self, rotation: Rotation) -> None:
            seen.append((rotation, clock()))

    seen: list[tuple[Rotation, float]] = []
    pm.register(Watcher(), name="watcher")
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "first", thread="a:b")

    clock.advance(PAST_IDLE_SECONDS)
    await chat_ok(harness, auth, "second", thread="a:b")

    [(rotation, when)] = seen
    [archived] = archives(harness, "alice--a%3Ab")
    assert rotation.archive == archived
    assert archived.parent == harness.gateway.settings.sessions_dir / "archive"
    stamp = re.fullmatch(r"alice--a%3Ab\.(\d{8}T\d{6})(?:\.\d+)?Z(?:-\d+)?\.jsonl",
                         archived.name)
    assert stamp is not None, archived.name
    rotated_at = datetime.strptime(stamp.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    assert abs(rotated_at.timestamp() - when) < 2  # the gateway's clock, not the wall clock


async def test_a_session_used_within_the_idle_time_does_not_rotate(
        start_clocked: StartClocked, clock: FakeClock) -> None:
    harness = await start_clocked(session_idle_minutes=IDLE_MINUTES)
    auth = await harness.user()
    await chat_ok(harness, auth, "first")

    clock.advance(IDLE_MINUTES * 60 - 60)
    body = await chat_ok(harness, auth, "second")

    assert body["sessionRotated"] is False
    assert archives(harness, "alice--t1") == []


async def test_fractional_idle_minutes_are_honoured(
        start_clocked: StartClocked, clock: FakeClock) -> None:
    harness = await start_clocked(session_idle_minutes=0.5)
    auth = await harness.user()
    await chat_ok(harness, auth, "first")

    clock.advance(25)
    early = await chat_ok(harness, auth, "25 s later")
    clock.back_in_step()
    clock.advance(35)
    late = await chat_ok(harness, auth, "35 s later")

    assert early["sessionRotated"] is False
    assert late["sessionRotated"] is True
    assert len(archives(harness, "alice--t1")) == 1


# --- size rotation ------------------------------------------------------------------------------
async def test_oversized_session_rotates_before_the_next_turn(
        start_clocked: StartClocked, fake_llm: FakeLLM) -> None:
    # A long first exchange overflows the limit; short turns after a rotation stay under it.
    harness = await start_clocked(session_max_file_bytes=1500)
    auth = await harness.user()
    await chat_ok(harness, auth, "long " * 200)
    path = session_file(harness, "alice--t1.jsonl")
    assert path.stat().st_size > 1500
    old_content = path.read_bytes()

    rotating = await chat_ok(harness, auth, "short")
    rotating_request = fake_llm.requests[-1]
    after = await chat_ok(harness, auth, "short again")

    assert rotating["sessionRotated"] is True
    assert after["sessionRotated"] is False
    assert rotating_request.system_text.endswith(ROTATION_HINT)
    assert ROTATION_HINT not in fake_llm.requests[-1].system_text
    [archived] = archives(harness, "alice--t1")
    assert archived.read_bytes() == old_content
    header, rotation, *_ = json_lines(path)
    assert header["type"] == "session"
    assert (rotation["type"], rotation["reason"]) == ("rotation", "size")


async def test_a_session_under_the_size_limit_does_not_rotate(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked(session_max_file_bytes=100_000)
    auth = await harness.user()

    bodies = [await chat_ok(harness, auth, "long " * 200) for _ in range(3)]

    assert [b["sessionRotated"] for b in bodies] == [False, False, False]
    assert archives(harness, "alice--t1") == []


# --- rotation leaves SQLite memory alone --------------------------------------------------------
async def test_rotation_keeps_summary_messages_and_transcript(
        start_clocked: StartClocked, clock: FakeClock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(summarize_at=4, keep_recent=1)
    auth = await harness.user()
    await chat_ok(harness, auth, "one")
    await chat_ok(harness, auth, "two")
    await harness.gateway.drain()
    before = await get_thread(harness, auth)
    assert before["summary"]  # the rolling summary exists, so keeping it means something

    clock.advance(PAST_IDLE_SECONDS)
    rotating = await chat_ok(harness, auth, "three")
    await harness.gateway.drain()
    after = await get_thread(harness, auth)

    assert rotating["sessionRotated"] is True
    assert after["summary"] == before["summary"]
    assert after["messages"] == before["messages"] + [
        {"role": "user", "content": "three"}, {"role": "assistant", "content": "echo: three"}]
    old_ids = {m["id"] for m in before["display_messages"]}
    assert old_ids <= {m["id"] for m in after["display_messages"]}
    assert len(after["display_messages"]) == len(before["display_messages"]) + 2
    # the rotating turn still showed the model its memory
    request = fake_llm.chat_requests[-1]
    assert before["summary"] in request.system_text
    assert request.messages[1:-1] == before["messages"]


# --- clear and delete ---------------------------------------------------------------------------
async def test_clearing_a_thread_archives_its_session(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "hello")
    path = session_file(harness, "alice--t1.jsonl")
    content = path.read_bytes()

    response = await harness.client.post("/api/threads/t1/clear", headers=auth)

    assert response.status == 200
    assert not path.exists()
    [archived] = archives(harness, "alice--t1")
    assert archived.read_bytes() == content
    await chat_ok(harness, auth, "after clear")
    assert json_lines(path)[0]["type"] == "session"


async def test_deleting_a_thread_archives_its_session(start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "hello")
    path = session_file(harness, "alice--t1.jsonl")
    content = path.read_bytes()

    response = await harness.client.delete("/api/threads/t1", headers=auth)

    assert response.status == 204
    assert not path.exists()
    [archived] = archives(harness, "alice--t1")
    assert archived.read_bytes() == content


async def test_clear_twice_in_the_same_second_keeps_both_archives(
        start_clocked: StartClocked, clock: FakeClock) -> None:
    clock.frozen = time.time()  # every archive gets the very same timestamp
    harness = await start_clocked()
    auth = await harness.user()

    await chat_ok(harness, auth, "first life")
    assert (await harness.client.post("/api/threads/t1/clear", headers=auth)).status == 200
    await chat_ok(harness, auth, "second life")
    assert (await harness.client.post("/api/threads/t1/clear", headers=auth)).status == 200

    found = archives(harness, "alice--t1")
    assert len(found) == 2
    contents = sorted(json_lines(p)[1]["content"] for p in found)
    assert contents == ["first life", "second life"]


def test_archiving_twice_at_the_same_instant_never_overwrites(tmp_path: Path) -> None:
    store = make_store(tmp_path / "sessions", clock=FakeClock(frozen=1767225600.0))

    store.append("telegram:42", "alice", "telegram:42", [{"type": "user", "content": "one"}])
    first = store.archive("telegram:42")
    store.append("telegram:42", "alice", "telegram:42", [{"type": "user", "content": "two"}])
    second = store.archive("telegram:42")
    store.append("telegram:42", "alice", "telegram:42", [{"type": "user", "content": "three"}])
    third = store.archive("telegram:42")

    assert first is not None and second is not None and third is not None
    names = [first.archive.name, second.archive.name, third.archive.name]
    assert len(set(names)) == 3
    assert all(re.fullmatch(r"telegram%3A42\.20260101T000000(?:\.\d+)?Z(?:-\d+)?\.jsonl", n)
               for n in names), names
    assert [json_lines(r.archive)[1]["content"] for r in (first, second, third)] == [
        "one", "two", "three"]
    assert store.archives_of("telegram:42") == sorted(r.archive for r in (first, second, third))


def test_archiving_a_missing_session_does_nothing(tmp_path: Path) -> None:
    store = make_store(tmp_path / "sessions")

    assert store.archive("nobody--t1") is None
    assert list((tmp_path / "sessions" / "archive").iterdir()) == []


# --- the session_rotated hook --------------------------------------------------------------------
async def test_session_rotated_hook_sees_every_rotation_with_its_reason(
        start_clocked: StartClocked, clock: FakeClock, pm: PluginManager) -> None:
    seen: list[tuple[str, str, Path, bool]] = []

    class Watcher:
        @hookimpl
        async def session_rotated(self, rotation: Rotation) -> None:
            seen.append((rotation.key, rotation.reason, rotation.archive,
                         rotation.archive.exists()))

    pm.register(Watcher(), name="watcher")
    harness = await start_clocked(session_max_file_bytes=1500)
    auth = await harness.user()

    await chat_ok(harness, auth, "long " * 200)
    await chat_ok(harness, auth, "size")            # rotates: too large
    clock.advance(PAST_IDLE_SECONDS)
    await chat_ok(harness, auth, "idle")            # rotates: idle
    clock.back_in_step()
    await chat_ok(harness, auth, "not rotated")
    await harness.client.post("/api/threads/t1/clear", headers=auth)
    await chat_ok(harness, auth, "after clear")
    await harness.client.delete("/api/threads/t1", headers=auth)

    assert [(key, reason) for key, reason, _, _ in seen] == [
        ("alice--t1", "size"), ("alice--t1", "idle"), ("alice--t1", "cleared"),
        ("alice--t1", "deleted")]
    assert all(existed for _, _, _, existed in seen)
    assert sorted(path for _, _, path, _ in seen) == archives(harness, "alice--t1")


async def test_a_failing_rotation_observer_neither_fails_the_turn_nor_silences_others(
        start_clocked: StartClocked, clock: FakeClock, pm: PluginManager) -> None:
    seen: list[str] = []

    class Broken:
        @hookimpl
        def session_rotated(self, rotation: Rotation) -> None:
            raise RuntimeError("observer bug")

    class Watcher:
        @hookimpl
        def session_rotated(self, rotation: Rotation) -> None:
            seen.append(rotation.reason)

    pm.register(Broken(), name="broken")
    pm.register(Watcher(), name="watcher")
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "first")

    clock.advance(PAST_IDLE_SECONDS)
    body = await chat_ok(harness, auth, "second")

    assert body["sessionRotated"] is True
    assert seen == ["idle"]


# --- rotate_session_if_needed -------------------------------------------------------------------
async def test_rotate_session_if_needed_reports_whether_it_rotated(
        start_clocked: StartClocked, clock: FakeClock) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    gateway = harness.gateway
    path = session_file(harness, "alice--t1.jsonl")

    assert await gateway.rotate_session_if_needed("alice", "t1") is False  # no session yet
    await chat_ok(harness, auth, "hello")
    assert await gateway.rotate_session_if_needed("alice", "t1") is False  # fresh
    assert path.exists()

    clock.advance(PAST_IDLE_SECONDS)
    assert await gateway.rotate_session_if_needed("alice", "t1") is True
    assert not path.exists()
    assert len(archives(harness, "alice--t1")) == 1
    assert await gateway.rotate_session_if_needed("alice", "t1") is False  # nothing left
    assert len(archives(harness, "alice--t1")) == 1


async def test_rotate_session_if_needed_rotates_an_oversized_session(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked(session_max_file_bytes=1500)
    auth = await harness.user()
    await chat_ok(harness, auth, "short")
    assert await harness.gateway.rotate_session_if_needed("alice", "t1") is False

    await chat_ok(harness, auth, "long " * 200)

    assert await harness.gateway.rotate_session_if_needed("alice", "t1") is True
    assert not session_file(harness, "alice--t1.jsonl").exists()


async def test_rotate_session_if_needed_touches_only_that_thread(
        start_clocked: StartClocked, clock: FakeClock) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "one", thread="t1")
    await chat_ok(harness, auth, "two", thread="t2")
    clock.advance(PAST_IDLE_SECONDS)

    assert await harness.gateway.rotate_session_if_needed("alice", "t1") is True

    assert not session_file(harness, "alice--t1.jsonl").exists()
    assert session_file(harness, "alice--t2.jsonl").exists()


async def test_the_turn_after_an_out_of_turn_rotation_carries_the_hint(
        start_clocked: StartClocked, clock: FakeClock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "hello")
    clock.advance(PAST_IDLE_SECONDS)
    assert await harness.gateway.rotate_session_if_needed("alice", "t1") is True
    clock.back_in_step()

    await chat_ok(harness, auth, "after rotation")

    assert fake_llm.requests[-1].system_text.endswith(ROTATION_HINT)


# --- torn last line -----------------------------------------------------------------------------
TORN = b'{"type":"user","content":"half a li'


def test_read_events_skips_a_torn_last_line(tmp_path: Path) -> None:
    store = make_store(tmp_path / "sessions")
    store.append("alice--t1", "alice", "t1", [{"type": "user", "content": "whole"}])
    path = store.path_for("alice--t1")
    with path.open("ab") as handle:
        handle.write(TORN)

    events = read_events(path)

    assert [e["type"] for e in events] == ["session", "user"]
    assert events[1]["content"] == "whole"


def test_read_events_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_events(tmp_path / "missing.jsonl") == []


async def test_after_a_crash_mid_write_the_next_turn_appends_cleanly(
        fake_llm: FakeLLM, aiohttp_client: Any, make_settings: Callable[..., Settings],
        pm: PluginManager, clock: FakeClock) -> None:
    settings = make_settings()
    first = await start_with_clock(aiohttp_client, settings, pm, clock)
    auth = await first.user()
    await chat_ok(first, auth, "before the crash")
    await first.client.close()  # the process is gone...
    path = settings.sessions_dir / "alice--t1.jsonl"
    with path.open("ab") as handle:
        handle.write(TORN)  # ...in the middle of its last write
    torn_at = len(path.read_bytes().splitlines()) - 1

    second = await start_with_clock(aiohttp_client, settings, pm, clock)
    body = await chat_ok(second, auth, "after the crash")

    assert body["reply"] == "echo: after the crash"
    lines = path.read_bytes().splitlines()
    broken = []
    for number, line in enumerate(lines):
        try:
            json.loads(line)
        except ValueError:
            broken.append(number)
    assert broken == [torn_at]
    events = read_events(path)
    assert [e["type"] for e in events] == ["session", "user", "assistant", "usage",
                                           "user", "assistant", "usage"]
    assert [e["content"] for e in events if e["type"] == "user"] == [
        "before the crash", "after the crash"]


async def test_a_torn_line_left_while_running_does_not_swallow_the_next_event(
        start_clocked: StartClocked) -> None:
    harness = await start_clocked()
    auth = await harness.user()
    await chat_ok(harness, auth, "first")
    path = session_file(harness, "alice--t1.jsonl")
    with path.open("ab") as handle:
        handle.write(TORN)

    await chat_ok(harness, auth, "second")

    assert [e["content"] for e in read_events(path) if e["type"] == "user"] == [
        "first", "second"]


def test_an_empty_or_missing_session_never_rotates(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path / "sessions", clock=clock, idle_minutes=1, max_bytes=10)
    assert store.rotation_due("nobody--t1") is None
    store.path_for("empty--t1").touch()
    clock.advance(3600)

    assert store.rotation_due("empty--t1") is None
    assert store.rotate_if_needed("empty--t1") is None


def test_rotation_due_names_size_before_idle(tmp_path: Path) -> None:
    clock = FakeClock()
    store = make_store(tmp_path / "sessions", clock=clock, idle_minutes=1, max_bytes=300)
    store.append("k", "alice", "t1", [{"type": "user", "content": "x" * 200}])
    store.append("small", "alice", "t2", [{"type": "user", "content": "x"}])
    assert store.rotation_due("small") is None

    clock.advance(120)

    assert store.rotation_due("k") == "size"
    assert store.rotation_due("small") == "idle"
    rotation = store.rotate_if_needed("small")
    assert rotation is not None and rotation.reason == "idle"
    assert not store.path_for("small").exists()
    assert rotation.archive.exists()


def test_a_new_file_after_an_external_archive_gets_a_header(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = make_store(root)
    store.append("alice--t1", "alice", "t1", [{"type": "user", "content": "one"}])

    other_process = make_store(root)
    assert other_process.archive("alice--t1", "manual") is not None
    store.append("alice--t1", "alice", "t1", [{"type": "user", "content": "two"}])

    header, event = json_lines(store.path_for("alice--t1"))
    assert header["type"] == "session"
    assert event["content"] == "two"


def test_appends_are_whole_lines_in_order(tmp_path: Path) -> None:
    store = make_store(tmp_path / "sessions")
    for number in range(50):
        store.append("k", "alice", "t1", [{"type": "user", "content": f"m{number}"},
                                          {"type": "assistant", "content": f"r{number}"}])

    raw = store.path_for("k").read_bytes()

    assert raw.endswith(b"\n")
    events = json_lines(store.path_for("k"))
    assert len(events) == 101
    assert [e["content"] for e in events[1::2]] == [f"m{n}" for n in range(50)]
    assert os.stat(store.path_for("k")).st_size == len(raw)


# --- replaying tool exchanges of a session not held in memory (issue 17) -----------------------
def turn_events(user_id: int, tool_result: str | None = None,
                tool_tokens: int | None = None) -> list[dict[str, Any]]:
    """One turn as the agent writes it: user message, an optional tool exchange, reply."""
    reply_id = user_id + 1
    events: list[dict[str, Any]] = [{"type": "user", "content": "question", "messageId": user_id}]
    if tool_result is not None:
        events += [{"type": "tool_calls", "replyId": reply_id, "round": 1, "content": None,
                    "calls": [{"id": f"call_{reply_id}", "name": "calculator",
                               "arguments": "{}"}]},
                   {"type": "tool_result", "replyId": reply_id, "round": 1,
                    "toolCallId": f"call_{reply_id}", "content": tool_result}]
    reply: dict[str, Any] = {"type": "assistant", "content": "answer", "messageId": reply_id}
    if tool_tokens is not None:
        reply["toolTokens"] = tool_tokens
    return [*events, reply, {"type": "usage", "promptTokens": 1, "completionTokens": 1}]


def write_long_session(store: SessionStore, key: str, old_turns: int) -> None:
    """``old_turns`` turns of 4 KB tool results, then recent turns 10_000.. (one with tools)."""
    for number in range(old_turns):
        store.append(key, "alice", "t1", turn_events(2 * number + 1, "old " * 1000, 7))
    store.append(key, "alice", "t1", turn_events(10_000))
    store.append(key, "alice", "t1", turn_events(10_002, "5", 42))
    store.append(key, "alice", "t1", turn_events(10_004))


class CountingReads:
    """Counts the bytes read through every file opened with ``Path.open`` during a test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        original = Path.open

        def counting_open(path: Path, *args: Any, **kwargs: Any) -> Any:
            handle = original(path, *args, **kwargs)
            read = handle.read

            def counted(*read_args: Any) -> Any:
                data = read(*read_args)
                self.bytes += len(data)
                return data
            handle.read = counted
            return handle
        monkeypatch.setattr(Path, "open", counting_open)


def test_a_session_not_in_memory_replays_from_the_files_tail_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "sessions"
    write_long_session(make_store(root), "k", old_turns=1000)  # a 4 MB file
    assert store_size(root, "k") > 4_000_000
    reads = CountingReads(monkeypatch)

    fresh = make_store(root)  # a restart, or a session evicted from memory
    exchanges = fresh.exchanges("k", since_id=10_000)

    assert list(exchanges) == [10_003]
    assert exchanges[10_003].messages[-1] == {"role": "tool", "tool_call_id": "call_10003",
                                              "content": "5"}
    assert reads.bytes < 64 * 1024


def store_size(root: Path, key: str) -> int:
    return (root / (encode_key(key) + ".jsonl")).stat().st_size


def test_the_written_token_count_is_used_and_nothing_is_counted_again(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    write_long_session(make_store(root), "k", old_turns=3)

    def must_not_count(message: Any) -> int:
        raise AssertionError("a stored exchange was tokenized again")
    fresh = SessionStore(root, rule=RotationRule(IDLE_MINUTES, 10**9),
                         count_message=must_not_count)

    assert fresh.exchanges("k", since_id=10_000)[10_003].tokens == 42


def test_an_exchange_far_back_in_the_recent_window_is_found(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = make_store(root)
    store.append("k", "alice", "t1", turn_events(1, "big " * 20_000, 9))  # 80 KB, > one block
    for number in range(3, 40, 2):
        store.append("k", "alice", "t1", turn_events(number))

    exchanges = make_store(root).exchanges("k", since_id=1)

    assert list(exchanges) == [2] and exchanges[2].tokens == 9


def test_exchanges_before_the_window_are_not_read(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    write_long_session(make_store(root), "k", old_turns=5)

    assert list(make_store(root).exchanges("k", since_id=10_004)) == []
    assert sorted(make_store(root).exchanges("k", since_id=5)) == [6, 8, 10, 10_003]


def test_an_older_window_asked_later_is_read_again(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    write_long_session(make_store(root), "k", old_turns=5)
    store = make_store(root)

    assert list(store.exchanges("k", since_id=10_004)) == []
    assert 10_003 in store.exchanges("k", since_id=10_000)


def test_sessions_evicted_from_memory_still_replay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.memory.sessions.MAX_INDEXED_SESSIONS", 2)
    store = make_store(tmp_path / "sessions")
    for key in ("a", "b", "c", "d"):
        store.append(key, "alice", key, turn_events(1, f"result of {key}", 3))

    for key in ("a", "b", "c", "d"):
        exchange = store.exchanges(key, since_id=1)[2]
        assert exchange.messages[-1]["content"] == f"result of {key}"


def test_a_session_archived_by_another_process_replays_nothing(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = make_store(root)
    store.append("k", "alice", "t1", turn_events(1, "5", 3),
                 exchange=(2, ToolExchange(({"role": "tool"},), 3)))
    assert 2 in store.exchanges("k", since_id=1)

    make_store(root).archive("k", "manual")

    assert store.exchanges("k", since_id=1) == {}
