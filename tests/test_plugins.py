"""The plugin host: hook specs and their docs, entry-point loading, hooks as plugins see them."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import logging
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway import (
    Channel,
    Completion,
    CompletionRequest,
    PromptSection,
    Provider,
    hookimpl,
    hookspecs,
)
from gateway.base.errors import ConfigError, PluginError
from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.interfaces import SECTION_POSITIONS
from gateway.plugins.manager import PluginManager, describe_plugins, make_plugin_manager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.tools import Tool
from tests.conftest import Harness

StartGateway = Callable[..., Awaitable[Harness]]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BUILT_INS = {"dashboard": "channels.dashboard", "offline": "plugins.offline",
             "openai": "plugins.openai", "commands": "plugins.commands"}


def hook_specs() -> dict[str, Callable[..., object]]:
    """Every function in gateway.hookspecs marked as a ``cloudybot`` hook spec."""
    return {name: value for name, value in vars(hookspecs).items()
            if callable(value) and hasattr(value, f"{hookspecs.PROJECT}_spec")}


# --- meta-tests on the hook specs ----------------------------------------------------------------
def test_hookspecs_are_found() -> None:
    assert {"register_providers", "register_channels", "prompt_sections",
            "turn_completed"} <= set(hook_specs())


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hookspec_has_a_docstring_with_its_params(name: str) -> None:
    spec = hook_specs()[name]
    doc = inspect.getdoc(spec)
    assert doc, f"hook {name} has no docstring"
    for param in inspect.signature(spec).parameters:
        assert f":param {param}:" in doc, f"hook {name} does not document {param!r}"


@pytest.mark.xfail(not README.exists(), reason="README pending", strict=False)
@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hookspec_is_documented_in_readme(name: str) -> None:
    assert name in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(hook_specs()))
def test_every_hookspec_is_implemented_by_some_test(name: str) -> None:
    tests = "\n".join(path.read_text(encoding="utf-8")
                      for path in (ROOT / "tests").rglob("test_*.py"))
    assert f"def {name}(" in tests, f"no test implements the hook {name}"


# --- entry points --------------------------------------------------------------------------------
async def described(pm: PluginManager) -> list[Any]:
    """``describe_plugins`` of a gateway (built, not started) with ``pm``'s plugins."""
    return await describe_plugins(Gateway(load_settings(None, env={}), pm))


def test_builtins_are_declared_as_entry_points() -> None:
    declared = {ep.name: ep for ep in importlib.metadata.entry_points(group="cloudybot")}
    for name, module in BUILT_INS.items():
        assert name in declared, f"built-in {name} is not an entry point"
        assert declared[name].value == module
        assert declared[name].dist is not None and declared[name].dist.name == "cloudybot"


async def test_builtins_load_through_entry_points_with_their_distribution() -> None:
    version = importlib.metadata.version("cloudybot")
    infos = {info.name: info for info in await described(make_plugin_manager())}
    for name, module in BUILT_INS.items():
        assert infos[name].module == module
        assert infos[name].distribution == f"cloudybot {version}"
    assert "register_channels" in infos["dashboard"].hooks
    assert "register_providers" in infos["offline"].hooks
    assert "register_providers" in infos["openai"].hooks


async def test_without_entry_points_no_builtin_is_loaded() -> None:
    pm = make_plugin_manager(load_entry_points=False)
    names = {info.name for info in await described(pm)}
    assert not names & set(BUILT_INS)


async def test_plugin_registered_in_code_is_described_as_such(pm: PluginManager) -> None:
    class Observer:
        @hookimpl
        def turn_completed(self, reply: str) -> None:
            pass

    pm.register(Observer(), name="observer")
    info = {info.name: info for info in await described(pm)}["observer"]
    assert "cloudybot" not in info.distribution  # no distribution claimed for it
    assert info.hooks == ("turn_completed",)


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path for fake distributions; their modules are forgotten after."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
    for path in site.glob("*.py"):
        sys.modules.pop(path.stem, None)


def install_distribution(site: Path, name: str, plugins: dict[str, str]) -> None:
    """A ``*.dist-info`` with one ``cloudybot`` entry point per module in ``plugins``."""
    dist_info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    lines = "".join(f"{module} = {module}\n" for module in plugins)
    (dist_info / "entry_points.txt").write_text(f"[cloudybot]\n{lines}", encoding="utf-8")
    for module, source in plugins.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")


GOOD_PLUGIN = """\
    from gateway import hookimpl

    @hookimpl
    def turn_completed(reply):
        pass
    """


def load_failures(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR and name in r.getMessage()]


async def test_broken_entry_point_is_logged_and_skipped(
        site_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    install_distribution(site_dir, "cloudybot-fakeplug", {
        "fake_good": GOOD_PLUGIN,
        "fake_broken": 'raise RuntimeError("this plugin is broken")\n',
    })
    with caplog.at_level(logging.ERROR, logger="gateway.plugins.manager"):
        pm = make_plugin_manager()

    assert pm.get_plugin("fake_broken") is None
    assert pm.get_plugin("fake_good") is not None
    infos = {info.name: info for info in await described(pm)}
    assert infos["fake_good"].distribution == "cloudybot-fakeplug 1.0"
    assert infos["fake_good"].hooks == ("turn_completed",)
    assert set(BUILT_INS) <= set(infos)
    failures = load_failures(caplog, "fake_broken")
    assert len(failures) == 1
    assert failures[0].exc_info is not None
    assert "this plugin is broken" in str(failures[0].exc_info[1])


def test_entry_point_with_wrong_hook_arguments_is_logged_and_skipped(
        site_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    install_distribution(site_dir, "cloudybot-badargs", {
        "fake_good_two": GOOD_PLUGIN,
        "fake_badargs": """\
            from gateway import hookimpl

            @hookimpl
            def turn_completed(no_such_argument):
                pass
            """,
    })
    with caplog.at_level(logging.ERROR, logger="gateway.plugins.manager"):
        pm = make_plugin_manager()

    assert pm.get_plugin("fake_badargs") is None
    assert pm.get_plugin("fake_good_two") is not None
    assert len(load_failures(caplog, "fake_badargs")) == 1


def test_entry_point_with_unknown_hook_name_is_logged_and_skipped(
        site_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    install_distribution(site_dir, "cloudybot-typo", {
        "fake_good_three": GOOD_PLUGIN,
        "fake_typo": """\
            from gateway import hookimpl

            @hookimpl
            def turn_complete(reply):
                pass
            """,
    })
    with caplog.at_level(logging.ERROR, logger="gateway.plugins.manager"):
        pm = make_plugin_manager()

    assert pm.get_plugin("fake_typo") is None
    assert pm.get_plugin("fake_good_three") is not None
    assert set(BUILT_INS) <= {name for name, _ in pm.list_name_plugin()}
    failures = load_failures(caplog, "fake_typo")
    assert failures and "turn_complete" in "".join(
        r.getMessage() + str(r.exc_info and r.exc_info[1]) for r in failures)


# --- prompt_sections -----------------------------------------------------------------------------
async def pin(harness: Harness, auth: dict[str, str], key: str, value: str) -> None:
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        json={"key": key, "value": value}, headers=auth)
    assert response.status == 200


async def add_specialist(harness: Harness, auth: dict[str, str], name: str,
                         instructions: str) -> None:
    response = await harness.client.put(f"/api/specialists/{name}",
                                        json={"instructions": instructions}, headers=auth)
    assert response.status == 200


def system_parts(fake_llm: FakeLLM) -> list[str]:
    """The last chat request's system message, split into its sections."""
    return fake_llm.chat_requests[-1].system_text.split("\n\n")


def part_after(parts: list[str], predicate: Callable[[str], bool]) -> str:
    index = next(i for i, part in enumerate(parts) if predicate(part))
    return parts[index + 1]


async def test_prompt_section_after_pinned_follows_the_pinned_block(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class Weather:
        @hookimpl
        def prompt_sections(self, turn):
            return [PromptSection(position="after_pinned", text="It is raining.")]

    pm.register(Weather(), name="weather")
    harness = await start_gateway()
    auth = await harness.user()
    await pin(harness, auth, "city", "Paris")
    await add_specialist(harness, auth, "chef", "Talk about food.")

    response = await harness.chat(auth, "hi", specialist="chef")

    assert response.status == 200, await response.text()
    parts = system_parts(fake_llm)
    assert part_after(parts, lambda p: p.endswith("</pinned>")) == "It is raining."
    assert part_after(parts, lambda p: p == "It is raining.").endswith("Talk about food.")


async def test_async_prompt_section_works_the_same(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class AsyncWeather:
        @hookimpl
        async def prompt_sections(self, host, turn):
            return [PromptSection(position="after_pinned", text=f"Hello {turn.user_id}.")]

    pm.register(AsyncWeather(), name="async-weather")
    harness = await start_gateway()
    auth = await harness.user()
    await pin(harness, auth, "city", "Paris")
    await add_specialist(harness, auth, "chef", "Talk about food.")

    response = await harness.chat(auth, "hi", specialist="chef")

    assert response.status == 200, await response.text()
    parts = system_parts(fake_llm)
    assert part_after(parts, lambda p: p.endswith("</pinned>")) == "Hello alice."
    assert part_after(parts, lambda p: p == "Hello alice.").endswith("Talk about food.")


async def test_prompt_sections_land_in_position_order(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class Everywhere:
        @hookimpl
        def prompt_sections(self, turn):
            # Declared out of order on purpose: position, not list order, decides placement.
            return [PromptSection(position=p, text=f"PLUGIN[{p}]")
                    for p in reversed(SECTION_POSITIONS)]

    pm.register(Everywhere(), name="everywhere")
    # summarize_at=2: the first turn is folded into a summary before the second one.
    harness = await start_gateway(summarize_at=2, keep_recent=1)
    auth = await harness.user()
    await pin(harness, auth, "city", "Paris")
    await add_specialist(harness, auth, "chef", "Talk about food.")
    login = await harness.client.put("/api/user/browser-credentials", headers=auth,
                                     json={"site": "example.com", "username": "al",
                                           "password": "pw-123456"})
    assert login.status == 200
    assert (await harness.chat(auth, "first")).status == 200
    await harness.gateway.drain()

    response = await harness.chat(auth, "second", specialist="chef")
    await harness.gateway.drain()  # this turn's summarization must not outlive the fake LLM

    assert response.status == 200, await response.text()
    parts = system_parts(fake_llm)
    builtin = {
        "after_instructions": lambda p: p.startswith(harness.gateway.settings.system_prompt),
        "after_pinned": lambda p: p.endswith("</pinned>"),
        "after_specialist": lambda p: p.endswith("Talk about food."),
        "after_summary": lambda p: p.startswith("Summary of the earlier conversation:"),
        "after_hints": lambda p: "example.com" in p,
    }
    for position, is_builtin in builtin.items():
        assert part_after(parts, is_builtin) == f"PLUGIN[{position}]"
    plugin_parts = [p for p in parts if p.startswith("PLUGIN[")]
    assert plugin_parts == [f"PLUGIN[{p}]" for p in SECTION_POSITIONS]


async def test_hook_returning_a_non_list_is_ignored_with_an_error_log(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM,
        caplog: pytest.LogCaptureFixture) -> None:
    class Sloppy:
        @hookimpl
        def prompt_sections(self, turn):
            return PromptSection(position="after_instructions", text="NOT A LIST")

    class Tidy:
        @hookimpl
        def prompt_sections(self, turn):
            return [PromptSection(position="after_instructions", text="IN A LIST")]

    pm.register(Sloppy(), name="sloppy")
    pm.register(Tidy(), name="tidy")
    harness = await start_gateway()
    auth = await harness.user()

    with caplog.at_level(logging.ERROR, logger="gateway.plugins.hooks"):
        response = await harness.chat(auth, "hi")

    assert response.status == 200, await response.text()
    system = fake_llm.chat_requests[-1].system_text
    assert "NOT A LIST" not in system
    assert "IN A LIST" in system
    assert any(r.levelno == logging.ERROR and "sloppy" in r.getMessage()
               and "prompt_sections" in r.getMessage() for r in caplog.records)


async def test_raising_prompt_section_plugin_does_not_fail_the_turn(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM,
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        @hookimpl
        def prompt_sections(self, turn):
            raise RuntimeError("section plugin exploded")

    pm.register(Broken(), name="broken-sections")
    harness = await start_gateway()
    auth = await harness.user()

    with caplog.at_level(logging.ERROR, logger="gateway.plugins.hooks"):
        response = await harness.chat(auth, "hi")

    assert response.status == 200, await response.text()
    assert any("broken-sections" in r.getMessage() for r in caplog.records)


# --- gateway_stopping --------------------------------------------------------------------------
async def test_gateway_stopping_lets_plugins_release_with_the_store_still_open(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    seen: list[str] = []

    class Holder:
        @hookimpl
        async def gateway_stopping(self, host):
            user = await host.account("alice")  # the store is still open
            assert user is not None
            seen.append(user.user_id)

    class Exploder:
        @hookimpl
        def gateway_stopping(self):
            raise RuntimeError("cannot release")

    pm.register(Holder(), name="holder")
    pm.register(Exploder(), name="exploder")  # registered last: pluggy calls it first
    harness = await start_gateway()
    await harness.user()  # the gateway runs (the test client started it)
    assert seen == []
    await harness.gateway.stop()
    assert seen == ["alice"]  # once, after the one that failed


async def test_a_plugin_that_never_releases_cannot_hold_the_stop_past_the_grace_period(
        start_gateway: StartGateway, pm: PluginManager,
        caplog: pytest.LogCaptureFixture) -> None:
    released: list[str] = []
    never = asyncio.Event()

    class Hanger:
        @hookimpl
        async def gateway_stopping(self):
            await never.wait()

    class Holder:
        @hookimpl
        async def gateway_stopping(self, host):
            released.append((await host.account("alice")).user_id)

    pm.register(Hanger(), name="hanger")
    pm.register(Holder(), name="holder")  # called first: it is not held by the other either
    harness = await start_gateway(shutdown_grace_seconds=1.0)
    await harness.user()
    with caplog.at_level(logging.WARNING, logger="gateway.plugins.hooks"):
        await asyncio.wait_for(harness.gateway.stop(), 10)  # not forever
    assert released == ["alice"]
    assert any("'hanger' did not finish gateway_stopping()" in r.getMessage()
               for r in caplog.records)
    assert not never.is_set()


# --- turn_completed ------------------------------------------------------------------------------
async def test_raising_turn_completed_observer_does_not_stop_others_nor_the_turn(
        start_gateway: StartGateway, pm: PluginManager,
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, str, str]] = []

    class Recorder:
        @hookimpl
        def turn_completed(self, turn, reply):
            seen.append((turn.user_id, turn.thread_id, reply))

    class Exploder:
        @hookimpl
        async def turn_completed(self, reply):
            raise RuntimeError("observer exploded")

    pm.register(Recorder(), name="recorder")
    pm.register(Exploder(), name="exploder")  # registered last: pluggy calls it first
    harness = await start_gateway()
    auth = await harness.user()

    with caplog.at_level(logging.ERROR, logger="gateway.plugins.hooks"):
        response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    assert (await response.json())["reply"] == "echo: hello"
    assert seen == [("alice", "t1", "echo: hello")]
    assert any("exploder" in r.getMessage() and "turn_completed" in r.getMessage()
               for r in caplog.records)
    thread = await harness.client.get("/api/threads/t1", headers=auth)
    assert len((await thread.json())["messages"]) == 2


async def test_turn_completed_sees_the_reply_as_stored_with_credentials_redacted(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    seen: list[str] = []

    class Recorder:
        @hookimpl
        def turn_completed(self, reply):
            seen.append(reply)

    pm.register(Recorder(), name="recorder")
    harness = await start_gateway()
    auth = await harness.user()
    saved = await harness.client.put("/api/user/browser-credentials", headers=auth,
                                     json={"site": "example.com", "username": "al",
                                           "password": "pw-secret-9"})
    assert saved.status == 200
    fake_llm.script.append(Scripted(body=completion("Your password is pw-secret-9.")))

    response = await harness.chat(auth, "what is my password?")

    assert response.status == 200, await response.text()
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    stored_reply = thread["messages"][-1]["content"]
    assert "pw-secret-9" not in stored_reply
    assert seen == [stored_reply]


async def test_turn_completed_is_not_called_for_a_failed_turn(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    seen: list[str] = []

    class Recorder:
        @hookimpl
        def turn_completed(self, reply):
            seen.append(reply)

    pm.register(Recorder(), name="recorder")
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script.append(Scripted(status=500, body={"error": {"message": "boom"}}))

    response = await harness.chat(auth, "hello")

    assert response.status == 502
    assert seen == []


async def test_sections_at_one_position_follow_pluggy_call_order(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    def section_plugin(text: str, **marker: bool) -> object:
        class Plugin:
            @hookimpl(**marker)
            def prompt_sections(self, turn):
                return [PromptSection(position="after_instructions", text=text)]
        return Plugin()

    pm.register(section_plugin("FIRST", tryfirst=True), name="first")
    pm.register(section_plugin("LAST", trylast=True), name="last")
    pm.register(section_plugin("EARLY"), name="early")
    pm.register(section_plugin("LATE"), name="late")  # registered later: called earlier
    harness = await start_gateway()
    auth = await harness.user()

    assert (await harness.chat(auth, "hi")).status == 200

    parts = system_parts(fake_llm)
    assert [p for p in parts if p in {"FIRST", "LATE", "EARLY", "LAST"}] == [
        "FIRST", "LATE", "EARLY", "LAST"]


# --- register_tools / session_rotated ------------------------------------------------------------
def tool_call_answer(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A chat.completion in which the model asks for one tool call."""
    body = completion("", prompt_tokens=10, completion_tokens=5)
    body["choices"][0]["finish_reason"] = "tool_calls"
    body["choices"][0]["message"] = {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": arguments}}]}
    return body


async def test_plugin_tool_is_offered_run_and_its_result_sent_back(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    calls: list[tuple[dict[str, Any], str]] = []

    async def weather(arguments: dict[str, Any], context: Any) -> str:
        calls.append((arguments, context.user_id))
        return f"raining in {arguments['city']}"

    class WeatherTool:
        @hookimpl
        def register_tools(self, host):
            return [Tool(name="weather_now", description="Current weather in a city.",
                         parameters={"type": "object",
                                     "properties": {"city": {"type": "string"}},
                                     "required": ["city"]},
                         run=weather)]

    pm.register(WeatherTool(), name="weather-tool")
    harness = await start_gateway()
    auth = await harness.user()
    fake_llm.script.append(Scripted(body=tool_call_answer("call_1", "weather_now",
                                                          '{"city": "Paris"}')))

    response = await harness.chat(auth, "weather in Paris?")

    assert response.status == 200, await response.text()
    offered = [t["function"]["name"] for t in fake_llm.requests[0].body.get("tools", [])]
    assert "weather_now" in offered
    assert calls == [({"city": "Paris"}, "alice")]
    result = fake_llm.requests[1].messages[-1]
    assert result["role"] == "tool"
    assert result["tool_call_id"] == "call_1"
    assert result["content"] == "raining in Paris"
    assert (await response.json())["reply"] == "echo: raining in Paris"


async def test_session_rotated_observer_sees_a_cleared_thread(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    rotations: list[Any] = []

    class Watcher:
        @hookimpl
        async def session_rotated(self, rotation):
            rotations.append(rotation)

    pm.register(Watcher(), name="watcher")
    harness = await start_gateway()
    auth = await harness.user()
    assert (await harness.chat(auth, "hello")).status == 200
    assert rotations == []

    cleared = await harness.client.post("/api/threads/t1/clear", headers=auth)

    assert cleared.status == 200
    assert len(rotations) == 1
    assert rotations[0].key == "alice--t1"
    assert rotations[0].reason == "cleared"
    status = await harness.gateway.sessions.session_status("alice--t1")
    assert [archive.name for archive in status.archives] == [rotations[0].name]


# --- register_providers / register_channels ------------------------------------------------------
class Canned(Provider):
    """A provider that always says the same thing."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text

    async def complete(self, request: CompletionRequest) -> Completion:
        return Completion(self.text, "canned", prompt_tokens=1, completion_tokens=1)


async def test_third_party_provider_is_used_when_configured(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class CannedPlugin:
        @hookimpl
        def register_providers(self, host):
            return [Canned("canned", "canned answer")]

    pm.register(CannedPlugin(), name="canned")
    harness = await start_gateway(llm_provider="canned")
    auth = await harness.user()

    response = await harness.chat(auth, "hello")

    assert response.status == 200, await response.text()
    assert (await response.json())["reply"] == "canned answer"
    assert fake_llm.requests == []


async def test_two_providers_with_one_name_is_a_startup_error(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    class Impostor:
        @hookimpl
        def register_providers(self, host):
            return [Canned("offline", "not the real offline")]

    pm.register(Impostor(), name="impostor")
    with pytest.raises(PluginError, match="offline"):
        await start_gateway()


async def test_unknown_provider_name_is_a_config_error_naming_it(
        tmp_path: Path, pm: PluginManager) -> None:
    settings = load_settings(None, env={"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"),
                                        "CLOUDYBOT_LLM_PROVIDER": "no-such-provider"})
    gateway = Gateway(settings, pm)
    with pytest.raises(ConfigError) as raised:
        await gateway.start()
    assert "no-such-provider" in raised.value.message
    assert "CLOUDYBOT_LLM_PROVIDER" in raised.value.message
    assert not gateway.accepting


async def test_third_party_channel_routes_are_served_and_it_starts_and_stops(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    events: list[str] = []

    class Pigeon(Channel):
        name = "pigeon"

        def routes(self) -> list[web.RouteDef]:
            return [web.get("/pigeon/ping", self.ping)]

        async def ping(self, request: web.Request) -> web.Response:
            return web.json_response({"coo": True})

        async def start(self) -> None:
            events.append("start")

        async def stop(self) -> None:
            events.append("stop")

    class PigeonPlugin:
        @hookimpl
        def register_channels(self, host):
            return [Pigeon()]

    pm.register(PigeonPlugin(), name="pigeon")
    harness = await start_gateway()

    response = await harness.client.get("/pigeon/ping")

    assert response.status == 200
    assert await response.json() == {"coo": True}
    assert events == ["start"]
    assert {"dashboard", "pigeon"} <= set(harness.gateway.channels)
    await harness.client.close()
    assert events == ["start", "stop"]


# --- switching a plugin off ---------------------------------------------------------------------
def offered_tools(fake_llm: FakeLLM) -> set[str]:
    """The tools the last chat request offered the model."""
    return {tool["function"]["name"] for tool in fake_llm.chat_requests[-1].body.get("tools", [])}


@pytest.mark.parametrize(("disabled", "offered"), [("", True), ("tools", False),
                                                   (" commands , tools ", False)])
async def test_a_disabled_builtin_tool_is_not_offered_to_the_model(
        start_gateway: StartGateway, fake_llm: FakeLLM, disabled: str, offered: bool) -> None:
    harness = await start_gateway(plugins_disabled=disabled)  # CLOUDYBOT_PLUGINS_DISABLED
    auth = await harness.user()

    response = await harness.chat(auth, "what time is it?")

    assert response.status == 200, await response.text()
    assert ({"calculator", "current_time"} <= offered_tools(fake_llm)) is offered
    assert ("calculator" in harness.gateway.tools) is offered
    assert (harness.gateway.pm.get_plugin("tools") is not None) is offered


@pytest.mark.parametrize("disabled", ["", "slack"])
async def test_a_disabled_channel_serves_no_routes(
        start_slack: StartGateway, disabled: str) -> None:
    harness = await start_slack(plugins_disabled=disabled)

    response = await harness.client.post("/slack/events", data=b"{}")

    assert (response.status == 404) is bool(disabled), response.status
    assert ("slack" in harness.gateway.channels) is not bool(disabled)


async def test_a_disabled_plugin_is_never_imported(site_dir: Path) -> None:
    install_distribution(site_dir, "cloudybot-fake-off", {
        "fake_off_broken": 'raise ImportError("no module named pigeons")\n',
        "fake_off_good": GOOD_PLUGIN,
    })
    pm = make_plugin_manager(disabled={"fake_off_broken", "fake_off_good"})

    assert pm.load_failures == {}
    assert "fake_off_broken" not in sys.modules
    assert pm.get_plugin("fake_off_good") is None
    settings = load_settings(None, env={
        "CLOUDYBOT_PLUGINS_DISABLED": "fake_off_broken,fake_off_good"}, installed={
        "fake_off_broken", "fake_off_good"})
    gateway = Gateway(settings, pm)
    await gateway.load_plugins()  # a failed import would refuse here
    infos = {info.name: info for info in await describe_plugins(gateway)}
    assert infos["fake_off_broken"].disabled
    assert infos["fake_off_broken"].module == "fake_off_broken"
    assert infos["fake_off_broken"].distribution == "cloudybot-fake-off 1.0"
    assert infos["fake_off_good"].hooks == ()


async def test_a_gateway_blocks_what_its_settings_disable_in_a_manager_that_loaded_it(
        pm: PluginManager, tmp_path: Path) -> None:
    assert pm.get_plugin("tools") is not None
    settings = load_settings(None, env={"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"),
                                        "CLOUDYBOT_PLUGINS_DISABLED": "tools"},
                             installed={"tools"})
    gateway = Gateway(settings, pm)
    await gateway.load_plugins()

    assert pm.get_plugin("tools") is None
    assert "calculator" not in gateway.tools


async def test_a_disabled_provider_selected_is_a_config_error_naming_it(
        tmp_path: Path, pm: PluginManager) -> None:
    settings = load_settings(None, env={"CLOUDYBOT_DATA_DIR": str(tmp_path / "data"),
                                        "CLOUDYBOT_LLM_PROVIDER": "anthropic",
                                        "CLOUDYBOT_PLUGINS_DISABLED": "anthropic"},
                             installed={"anthropic"})
    gateway = Gateway(settings, pm)
    with pytest.raises(ConfigError) as raised:
        await gateway.start()
    assert raised.value.message.startswith("CLOUDYBOT_LLM_PROVIDER is 'anthropic', a disabled "
                                           "plugin: enable it (cloudybot plugins enable "
                                           "anthropic")
    assert not gateway.accepting


# --- the public surface ------------------------------------------------------------------------
# Every built-in plugin (channels, providers, tools, commands) and the example plugin: they are
# written as a third party would write them, on ``gateway``'s public names alone.
PLUGIN_SOURCES = sorted([*(ROOT / "examples").glob("*/*/__init__.py"),
                         *(ROOT / "channels").rglob("*.py"),
                         *(ROOT / "plugins").rglob("*.py")])


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_import_only_the_names_gateway_exports(path: Path) -> None:
    import ast

    import gateway

    tree = ast.parse(path.read_text(encoding="utf-8"))
    imports = [node for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom | ast.Import)]
    deep = [ast.unparse(node) for node in imports
            if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gateway."))
            or (isinstance(node, ast.Import)
                and any(a.name.startswith("gateway") for a in node.names))]
    assert deep == [], f"{path.name} reaches inside the gateway package: {deep}"
    names = [alias.name for node in imports
             if isinstance(node, ast.ImportFrom) and node.module == "gateway"
             for alias in node.names]
    assert set(names) <= set(gateway.__all__), \
        f"{path.name} imports names gateway does not export: {set(names) - set(gateway.__all__)}"


def test_every_hook_argument_type_is_exported() -> None:
    import inspect
    import typing

    import gateway
    from gateway import hookspecs

    hints = {name: typing.get_type_hints(function, vars(gateway))
             for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
             if hasattr(function, "cloudybot_spec")}
    assert "prompt_sections" in hints and "register_channels" in hints
    for hook, types in hints.items():
        for argument, kind in types.items():
            for part in typing.get_args(kind) or (kind,):
                if isinstance(part, type) and part.__module__.startswith("gateway"):
                    assert getattr(gateway, part.__name__, None) is part, \
                        f"{hook}({argument}): {part.__name__} is not exported from gateway"


def test_hooks_receive_a_host_not_the_gateway() -> None:
    import inspect

    from gateway import hookspecs

    for name, function in inspect.getmembers(hookspecs, inspect.isfunction):
        if hasattr(function, "cloudybot_spec"):
            assert "gateway" not in inspect.signature(function).parameters, name


def test_everything_public_is_importable_from_gateway() -> None:
    import gateway

    for name in gateway.__all__:
        assert getattr(gateway, name) is not None, name


@pytest.mark.parametrize("marker", [hookimpl(wrapper=True), hookimpl(hookwrapper=True)],
                         ids=["wrapper", "hookwrapper"])
def test_a_hook_wrapper_is_refused_at_registration_with_a_clear_error(
        pm: PluginManager, marker: Any) -> None:
    class Wrapping:
        @marker
        def turn_completed(self, reply: str) -> Iterator[None]:
            yield

    with pytest.raises(PluginError, match="turn_completed is a hook wrapper"):
        pm.register(Wrapping(), name="wrapping")
    assert pm.get_plugin("wrapping") is None


async def test_a_prompt_plugin_returning_garbage_does_not_break_turns(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class Broken:
        @hookimpl
        def prompt_sections(self) -> list[Any]:
            return ["not a section", PromptSection(position="after_instructions", text="KEPT")]

    pm.register(Broken(), name="broken")
    harness = await start_gateway()
    auth = await harness.user()
    assert (await harness.chat(auth, "hi")).status == 200
    assert "KEPT" in fake_llm.requests[-1].system_text
