"""The MCP plugin end to end: real MCP servers written with the SDK (tests/fakes/mcp_server.py,
over stdio and Streamable HTTP on loopback), driven through real turns in which the fake LLM
asks for their tools. The server logs every request it receives, so the tests count
connections (``initialize``), listings (``tools/list``) and cancellations where they happen.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.cli.main import main as cli
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from plugins.mcp.naming import MAX_NAME, tool_name
from plugins.mcp.settings import SERVER_NAME
from tests.conftest import Harness
from tests.fakes.mcp_server import LONG_NAME, PIXEL
from tests.helpers import session_bytes
from tests.test_agent_tools import PASSWORD, save_password
from tests.test_metrics import scrape
from tests.test_sessions import chat_ok

ROOT = Path(__file__).resolve().parent.parent
Start = Callable[..., Awaitable[Harness]]


def stdio(log: Path, **rules: Any) -> dict[str, Any]:
    """A stdio server entry running the fake, logging to ``log``."""
    return {"command": sys.executable, "cwd": str(ROOT),
            "args": ["-m", "tests.fakes.mcp_server", "--log", str(log), "stdio"], **rules}


def received(log: Path) -> list[str]:
    """What the server received, one line each."""
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "mcp.log"


@pytest.fixture
def start_mcp(start_gateway: Start) -> Callable[..., Awaitable[Harness]]:
    """A gateway with these MCP servers (name: entry)."""
    async def start(servers: dict[str, Any], **overrides: Any) -> Harness:
        return await start_gateway(mcp_servers=json.dumps(servers), **overrides)
    return start


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """The fake served over Streamable HTTP on loopback: its URL and its log."""
    log = tmp_path / "mcp-http.log"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.fakes.mcp_server", "--log", str(log), "http",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    port = int(await asyncio.wait_for(process.stdout.readline(), 60))
    yield f"http://127.0.0.1:{port}/mcp", log
    process.terminate()
    await process.wait()


def call(name: str, arguments: dict[str, Any], call_id: str = "c1") -> Scripted:
    return Scripted(body=tool_call_completion([(call_id, name, json.dumps(arguments))]))


async def tool_turn(harness: Harness, fake_llm: FakeLLM, auth: dict[str, str],
                    name: str, arguments: dict[str, Any]) -> str:
    """One turn, in a thread of its own (no summarization to take the script's answers), in
    which the model calls ``name``; the result it read."""
    fake_llm.script += [call(name, arguments), Scripted(body=completion("done"))]
    body = await chat_ok(harness, auth, f"use {name}", thread=f"t{len(fake_llm.requests)}")
    assert body["reply"] == "done"
    result = fake_llm.chat_requests[-1].messages[-1]
    assert result["role"] == "tool"
    content: str = result["content"]
    return content


def offered(fake_llm: FakeLLM, index: int = -1) -> dict[str, dict[str, Any]]:
    """The tools a chat call offered the model, by name."""
    return {tool["function"]["name"]: tool["function"]
            for tool in fake_llm.chat_requests[index].body.get("tools", [])}


# --- naming ----------------------------------------------------------------------------------
def test_names_are_server__tool_sanitised_unique_and_at_most_64() -> None:
    assert tool_name("files", "echo") == "files__echo"
    dotted, underscored = tool_name("files", "get.item"), tool_name("files", "get_item")
    assert underscored == "files__get_item"
    assert dotted.startswith("files__get_item_") and dotted != underscored
    # a server name that holds the separator, or ends in "_", cannot take another's names
    assert tool_name("a__b", "c") != tool_name("a", "b__c") == "a__b__c"
    assert tool_name("a_", "b") != tool_name("a", "_b") == "a___b"
    long = tool_name("files", LONG_NAME)
    assert len(long) == MAX_NAME and long == tool_name("files", LONG_NAME)  # stable
    assert long != tool_name("files", LONG_NAME + "2")


SERVER_NAMES = st.one_of(st.from_regex(SERVER_NAME, fullmatch=True),
                         st.text("ab_", min_size=1, max_size=6).filter(SERVER_NAME.fullmatch))
TOOL_NAMES = st.one_of(st.text(max_size=70), st.text("ab_.", min_size=1, max_size=6))


@settings(max_examples=500, deadline=None)
@given(SERVER_NAMES, TOOL_NAMES, SERVER_NAMES, TOOL_NAMES)
def test_two_tools_never_share_a_name(server: str, tool: str, other_server: str,
                                      other_tool: str) -> None:
    name = tool_name(server, tool)
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
    if (server, tool) != (other_server, other_tool):
        assert name != tool_name(other_server, other_tool)
    # the pairs most likely to meet: the same ``{server}__{tool}`` cut at another "__"
    joined = f"{server}__{tool}"
    for cut in (i for i in range(len(joined)) if joined.startswith("__", i)):
        elsewhere = (joined[:cut], joined[cut + 2:])
        if elsewhere != (server, tool) and SERVER_NAME.fullmatch(elsewhere[0]):
            assert tool_name(*elsewhere) != name, elsewhere


async def test_the_model_gets_the_servers_tools_named_with_their_schemas(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["free"])})
    auth = await harness.user("alice")

    assert await tool_turn(harness, fake_llm, auth, "files__echo", {"text": "hi"}) == "hi"

    tools = offered(fake_llm, 0)
    assert {"files__echo", "files__get_item", tool_name("files", "get.item"),
            tool_name("files", LONG_NAME), "calculator"} <= set(tools)
    assert all(len(name) <= MAX_NAME for name in tools)
    assert tools["files__echo"]["description"] == "Echo the text back."
    assert tools["files__echo"]["parameters"]["properties"]["text"]["type"] == "string"
    assert tools["files__echo"]["parameters"]["required"] == ["text"]


# --- who may use a server ----------------------------------------------------------------------
async def test_a_server_reaches_only_the_plans_and_users_it_names(
        start_mcp: Start, fake_llm: FakeLLM, log: Path, tmp_path: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["pro"], users=["bob"]),
                               "nobody": stdio(tmp_path / "other.log")})
    alice, bob = await harness.user("alice"), await harness.user("bob")
    carol = await harness.user("carol", plan="pro")

    assert (await tool_turn(harness, fake_llm, alice, "files__echo", {"text": "x"})
            ).startswith('error: there is no tool named "files__echo"')
    assert not any(name.startswith(("files__", "nobody__")) for name in offered(fake_llm))
    assert await tool_turn(harness, fake_llm, bob, "files__echo", {"text": "b"}) == "b"
    assert await tool_turn(harness, fake_llm, carol, "files__echo", {"text": "c"}) == "c"
    assert "files__echo" in offered(fake_llm) and "nobody__echo" not in offered(fake_llm)
    assert "process" not in received(tmp_path / "other.log")[1:]  # connected, never called


async def test_allowed_and_denied_tools_filter_what_the_model_sees(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"], allowed_tools=["e*", "ad?"],
                                              denied_tools=["add"])})
    auth = await harness.user("alice")
    await tool_turn(harness, fake_llm, auth, "files__echo", {"text": "x"})
    assert {name for name in offered(fake_llm) if name.startswith("files__")} == {"files__echo"}


# --- one session across turns -----------------------------------------------------------------
async def test_one_session_and_one_listing_serve_100_turns(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice", plan="team")  # no rate limit
    for number in range(100):
        assert await tool_turn(harness, fake_llm, auth, "files__add",
                               {"a": number, "b": 1}) == f"{number + 1.0}"
    lines = received(log)
    assert lines.count("process") == 1 and lines.count("initialize") == 1
    assert lines.count("tools/list") == 1
    assert lines.count("tools/call add") == 100


async def test_a_changed_tool_list_is_listed_again_once(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")
    assert await tool_turn(harness, fake_llm, auth, "files__grow", {}) == "grown"
    assert "files__late" not in offered(fake_llm)

    assert await tool_turn(harness, fake_llm, auth, "files__late", {}) == "late and here"
    assert "files__late" in offered(fake_llm, -2)
    assert received(log).count("tools/list") == 2


# --- servers that misbehave ----------------------------------------------------------------------
async def test_a_server_that_crashes_is_an_error_the_model_reads_then_comes_back(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")

    text = await tool_turn(harness, fake_llm, auth, "files__crash", {})
    assert text.startswith("error: the MCP server files failed"), text
    assert await tool_turn(harness, fake_llm, auth, "files__echo", {"text": "back"}) == "back"
    assert received(log).count("process") == 2
    samples = await scrape(harness)
    labels = frozenset({("server", "files")})
    assert samples[("cloudybot_plugin_mcp_reconnects_total", labels)] == 1
    assert samples[("cloudybot_plugin_mcp_errors_total", labels)] == 1
    assert samples[("cloudybot_plugin_mcp_calls_total", labels)] == 2
    assert samples[("cloudybot_plugin_mcp_call_seconds_total", labels)] > 0


async def test_a_server_that_never_starts_leaves_the_turn_working(
        start_mcp: Start, fake_llm: FakeLLM) -> None:
    harness = await start_mcp({"broken": {"command": sys.executable, "args": ["-c", "pass"],
                                          "plans": ["*"]}})
    auth = await harness.user("alice")
    body = await chat_ok(harness, auth, "hello")
    assert body["reply"]
    assert not any(name.startswith("broken__") for name in offered(fake_llm))


async def test_a_server_down_at_start_is_offered_once_it_comes_up(
        start_mcp: Start, fake_llm: FakeLLM, tmp_path: Path, log: Path) -> None:
    script = tmp_path / "late_server.py"  # not there yet: the first attempt fails
    harness = await start_mcp({"late": {"command": sys.executable, "args": [str(script)],
                                        "plans": ["*"]}})
    auth = await harness.user("alice")
    await chat_ok(harness, auth, "hello")
    assert not any(name.startswith("late__") for name in offered(fake_llm))

    script.write_text(
        f"import runpy, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"sys.argv = ['mcp_server', '--log', {str(log)!r}, 'stdio']\n"
        "runpy.run_module('tests.fakes.mcp_server', run_name='__main__')\n")

    async def offered_after_a_turn() -> None:
        # a bounded poll: the next attempt waits out its backoff (0.5 s); a thread a turn, so
        # that no summarization runs to take the answers scripted below
        for turn in itertools.count():
            await chat_ok(harness, auth, "again", thread=f"late-{turn}")
            if "late__echo" in offered(fake_llm):
                return
            await asyncio.sleep(0.05)
    await asyncio.wait_for(offered_after_a_turn(), 20)
    assert await tool_turn(harness, fake_llm, auth, "late__echo", {"text": "up"}) == "up"


async def test_a_servers_environment_takes_variables_and_an_unset_one_keeps_it_down(
        start_mcp: Start, fake_llm: FakeLLM, log: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", "from-the-environment")
    secrets = {"FAKE_MCP_SECRET": "${MCP_TEST_SECRET}"}
    harness = await start_mcp({"files": stdio(log, plans=["*"], env=secrets),
                               "missing": stdio(log, plans=["*"],
                                                env={"FAKE_MCP_SECRET": "${MCP_TEST_UNSET}"})})
    auth = await harness.user("alice")
    with caplog.at_level(logging.WARNING, logger="cloudybot.plugin.mcp"):
        assert await tool_turn(harness, fake_llm, auth, "files__secret", {}) == \
            "from-the-environment"
    assert not any(name.startswith("missing__") for name in offered(fake_llm))
    assert any("MCP server missing: MissingVariable: the variable MCP_TEST_UNSET is not set"
               in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


async def test_a_hanging_call_is_cancelled_at_the_server_after_its_timeout(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"], timeout_seconds=0.3)})
    auth = await harness.user("alice")

    text = await tool_turn(harness, fake_llm, auth, "files__hang", {})
    assert text == ("error: the tool hang of files was cancelled: no answer and no progress "
                    "for 0.3 s")
    # the session is still good, and the server had the cancellation before this call
    assert await tool_turn(harness, fake_llm, auth, "files__echo", {"text": "ok"}) == "ok"
    lines = received(log)
    assert lines.index("notifications/cancelled") < lines.index("tools/call echo")


async def test_progress_keeps_a_long_call_alive(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"], timeout_seconds=0.4)})
    auth = await harness.user("alice")
    assert await tool_turn(harness, fake_llm, auth, "files__slow",
                           {"seconds": 1.0, "every": 0.1}) == "worked 1.0 s"
    assert (await tool_turn(harness, fake_llm, auth, "files__slow",
                            {"seconds": 1.0, "every": 5.0})).startswith("error: the tool slow")


async def test_a_flood_of_notifications_does_not_break_the_call(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")
    assert await tool_turn(harness, fake_llm, auth, "files__flood",
                           {"count": 2000}) == "sent 2000"


async def test_a_1_mb_result_is_cut_with_a_note(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")
    text = await tool_turn(harness, fake_llm, auth, "files__big", {"size": 1_000_000})
    assert text.startswith("x" * 16_384)
    assert text.endswith("[the result was cut: 1,000,000 bytes, only the first 16,384 are "
                         "shown]")
    assert len(text) < 16_384 + 200


async def test_resources_and_pictures_become_text_with_their_uri(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")
    assert await tool_turn(harness, fake_llm, auth, "files__document", {}) == \
        "[resource file:///srv/notes.txt]\nthe notes"
    assert await tool_turn(harness, fake_llm, auth, "files__picture", {}) == \
        "a pixel\n[image image/png, 67 bytes]\n[the picture was not shown: this model reads " \
        "no pictures]"


async def test_a_vision_model_is_shown_a_tool_s_picture_which_is_never_stored(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])}, llm_vision=True)
    auth = await harness.user("alice")
    fake_llm.script += [call("files__picture", {}), Scripted(body=completion("a dot"))]
    assert (await chat_ok(harness, auth, "draw", thread="t1"))["reply"] == "a dot"
    *_, result, shown = fake_llm.chat_requests[-1].messages
    assert result["role"] == "tool" and result["content"] == (
        "a pixel\n[image image/png, 67 bytes]\n[1 picture: shown in the next message]")
    assert shown["role"] == "user"
    intro, caption, picture = shown["content"]
    assert "from the tools, not the user" in intro["text"]
    assert caption["text"].startswith("files__picture (")
    assert picture["image_url"]["url"] == f"data:image/png;base64,{PIXEL}"
    # the session file and the transcript keep the text, never the picture
    stored = await session_bytes(harness.gateway, "alice--t1") or b""
    assert b"[1 picture: shown in the next message]" in stored and PIXEL.encode() not in stored
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert PIXEL not in json.dumps(thread)


async def test_a_result_holding_a_saved_password_is_redacted(
        start_mcp: Start, fake_llm: FakeLLM, log: Path) -> None:
    harness = await start_mcp({"files": stdio(log, plans=["*"])})
    auth = await harness.user("alice")
    await save_password(harness, auth)
    text = await tool_turn(harness, fake_llm, auth, "files__echo", {"text": f"pw {PASSWORD}"})
    assert PASSWORD not in text and "[redacted]" in text


# --- Streamable HTTP, and sessions per user -----------------------------------------------------
async def test_an_http_server_with_a_user_header_gets_a_session_per_user(
        start_mcp: Start, fake_llm: FakeLLM,
        http_server: tuple[str, Path]) -> None:
    url, log = http_server
    harness = await start_mcp({"remote": {"url": url, "headers": {"X-User": "{user_id}"},
                                          "plans": ["*"]}})
    alice, bob = await harness.user("alice"), await harness.user("bob")
    for _ in range(3):
        assert await tool_turn(harness, fake_llm, alice, "remote__whoami", {}) == "alice"
        assert await tool_turn(harness, fake_llm, bob, "remote__whoami", {}) == "bob"
    assert received(log).count("initialize") == 2


async def test_a_header_takes_a_variable_from_the_environment_and_the_user_id(
        start_mcp: Start, fake_llm: FakeLLM, http_server: tuple[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = http_server
    monkeypatch.setenv("MCP_TEST_TENANT", "acme")
    harness = await start_mcp({"remote": {
        "url": url, "headers": {"X-User": "${MCP_TEST_TENANT}/{user_id}"}, "plans": ["*"]}})
    alice = await harness.user("alice")
    assert await tool_turn(harness, fake_llm, alice, "remote__whoami", {}) == "acme/alice"


async def test_an_http_server_is_shared_without_a_user_header(
        start_mcp: Start, fake_llm: FakeLLM,
        http_server: tuple[str, Path]) -> None:
    url, log = http_server
    harness = await start_mcp({"remote": {"url": url, "plans": ["*"]}})
    alice, bob = await harness.user("alice"), await harness.user("bob")
    assert await tool_turn(harness, fake_llm, alice, "remote__echo", {"text": "a"}) == "a"
    assert await tool_turn(harness, fake_llm, bob, "remote__whoami", {}) == "nobody"
    assert received(log).count("initialize") == 1


# --- the operator's commands ---------------------------------------------------------------------
def test_cli_lists_servers_and_calls_a_tool(
        tmp_path: Path, log: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDYBOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CLOUDYBOT_MCP_SERVERS", json.dumps(
        {"files": stdio(log, plans=["pro"]), "off": stdio(log, enabled=False)}))
    assert cli(["mcp", "list"]) == 0
    shown = capsys.readouterr().out
    assert "files  (stdio:" in shown and "may use: plans pro" in shown
    assert "state: connected" in shown and "tool: files__echo" in shown
    assert "off  (stdio:" in shown and "state: disabled" in shown

    assert cli(["mcp", "call", "files", "echo", '{"text": "hello"}']) == 0
    assert capsys.readouterr().out == "hello\n"
    assert cli(["mcp", "call", "files", "nope", "{}"]) == 1
