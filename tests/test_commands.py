"""Chat commands are a hook: a plugin's command is routed by every channel and by /chat."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gateway import ChatCommand, CommandContext, PluginHost, hookimpl
from gateway.base.errors import PluginError
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.telegram import FakeTelegram
from tests.conftest import Harness
from tests.test_slack_threads_and_delivery import post_command
from tests.test_telegram import payload, post_update

StartGateway = Callable[..., Awaitable[Harness]]


async def weather(context: CommandContext) -> str:
    city = context.argument or "nowhere"
    return f"Sunny in {city} for {context.user.user_id} in {context.ref.session_key}."


async def roll(context: CommandContext) -> str:
    await context.memory.put("dice", "6")
    return "Rolled a 6 and pinned it."


class WeatherPlugin:
    @hookimpl
    def register_commands(self, host: PluginHost) -> list[ChatCommand]:
        return [ChatCommand("weather", "[CITY]", "today's weather", weather,
                            aliases=("wx",)),
                ChatCommand("roll", "", "roll a die and pin it", roll,
                            per_conversation=True)]


@pytest.fixture
def weather_pm(pm: PluginManager) -> PluginManager:
    pm.register(WeatherPlugin(), name="weather")
    return pm


async def test_telegram_routes_a_plugins_command_and_help_lists_it(
        weather_pm: PluginManager, start_telegram: StartGateway,
        fake_telegram: FakeTelegram, fake_llm: FakeLLM) -> None:
    tg = await start_telegram()
    for index, text in enumerate(["/weather Paris", "/WX", "/help"]):
        await post_update(tg, payload("tg_private_text.json", update_id=902348000 + index,
                                      text=text))
    answers = [call.params["text"] for call in await fake_telegram.wait_for_messages(3)]
    assert answers[0] == "Sunny in Paris for telegram:777000111 in telegram:777000111."
    assert answers[1].startswith("Sunny in nowhere")
    assert "weather [CITY] — today's weather" in answers[2]
    assert "remember KEY VALUE — pin a fact" in answers[2]  # the built-ins, listed alike
    help_lines = [line.strip() for line in answers[2].splitlines()]
    names = [line.split()[0] for line in help_lines if " — " in line]
    scheduling = {"remind", "jobs"}  # the scheduling plugin's, a built-in too
    assert [name for name in names if name not in scheduling] == [
        "help", "new", "remember", "forget", "memory", "usage", "weather", "roll"]
    assert scheduling <= set(names)
    assert fake_llm.requests == []


async def test_slack_routes_it_and_refuses_a_per_conversation_one_in_a_channel(
        weather_pm: PluginManager, start_slack: StartGateway, fake_llm: FakeLLM) -> None:
    slack = await start_slack()
    response = await post_command(slack, "weather Oslo", "trigger-weather")
    assert (await response.text()).startswith("Sunny in Oslo for slack:")
    response = await post_command(slack, "roll", "trigger-roll", channel="C0LAN2Q65")
    text = await response.text()
    assert "per thread" in text and "/cloudybot roll" in text
    response = await post_command(slack, "weather Oslo", "trigger-weather-c",
                                  channel="C0LAN2Q65")
    assert (await response.text()).startswith("Sunny in Oslo")  # not per conversation
    assert fake_llm.requests == []


async def test_chat_routes_a_registered_slash_command_and_nothing_else(
        weather_pm: PluginManager, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    auth = await harness.user()

    response = await harness.chat(auth, "/roll")
    body = await response.json()
    assert response.status == 200, body
    assert body["reply"] == "Rolled a 6 and pinned it."
    assert body["command"] == "roll"
    assert body["usage"] == {"promptTokens": 0, "completionTokens": 0, "credits": 0}
    memory = await harness.client.get("/api/user/memory", params={"threadId": "t1"},
                                      headers=auth)
    assert (await memory.json())["memory"] == {"dice": "6"}
    assert fake_llm.requests == []

    for text in ("/etc/hosts is missing", "/nosuchcommand please", "see /roll"):
        response = await harness.chat(auth, text)
        body = await response.json()
        assert "command" not in body and body["reply"] == f"echo: {text}"
    assert len(fake_llm.chat_requests) == 3


@pytest.mark.parametrize(("commands", "error"), [
    ([ChatCommand("Weather", "", "x", weather)], "not 1-32 of a-z 0-9 _"),
    ([ChatCommand("weather", "", "x", weather, aliases=("new",))], "two commands"),
    ([ChatCommand("a" * 33, "", "x", weather)], "not 1-32"),
])
async def test_a_bad_or_taken_command_name_stops_start_up(
        pm: PluginManager, start_gateway: StartGateway, commands: list[ChatCommand],
        error: str) -> None:
    class Bad:
        @hookimpl
        def register_commands(self, host: PluginHost) -> list[ChatCommand]:
            return commands

    pm.register(Bad(), name="bad-commands")
    with pytest.raises(PluginError, match=error):
        await start_gateway()
