"""Discord end to end: the gateway's Discord channel (discord.py) against the kit's fake
Discord on 127.0.0.1 — mentions, DMs, threads, who is ignored, replies that ping nobody."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest

from gateway import ConfigError, Gateway
from gateway.config.settings import Settings
from gateway.plugins.manager import PluginManager
from gateway.testing.discord import (
    BOT_ID,
    CHANNEL_ID,
    DM,
    GUILD_ID,
    OTHER_BOT_ID,
    OTHER_CHANNEL_ID,
    OTHER_USER_ID,
    ROLE_ID,
    THREAD_ID,
    USER_ID,
    FakeDiscord,
)
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import until

StartDiscord = Callable[..., Awaitable[Harness]]
NO_PINGS = {"everyone": [], "users": [], "roles": []}


async def test_a_mention_in_a_channel_is_answered_in_a_reply_that_pings_nobody(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    dc.gateway.inbox.typing_delay_seconds = 0  # "typing…" at once, even for a fast reply
    question = await fake_discord.message(f"<@{BOT_ID}> what is on\nmy list?")
    [sent] = await fake_discord.wait_for_messages(1)
    assert sent["content"] == "echo: what is on\nmy list?"
    assert sent["channel_id"] == str(CHANNEL_ID)
    assert sent["message_reference"]["message_id"] == question["id"]
    assert sent["allowed_mentions"] == {"parse": []}  # no @everyone, role, user or reply ping
    assert fake_discord.pinged(sent) == NO_PINGS
    assert fake_discord.typing == [CHANNEL_ID]
    await dc.gateway.drain()
    key = f"discord:{GUILD_ID}:{CHANNEL_ID}"
    thread = await dc.gateway.store.get_thread(key)
    assert thread is not None and thread.ref.user_id == f"discord:{USER_ID}"
    assert fake_llm.chat_requests[0].messages[-1]["content"] == "what is on\nmy list?"


async def test_a_message_without_a_mention_is_not_answered(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    message = await fake_discord.message("just chatting")
    await dc.assert_no_reply("discord", message["id"])
    assert fake_llm.chat_requests == [] and fake_discord.sent == []


async def test_a_reply_to_the_bots_message_is_answered_without_a_mention(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    await fake_discord.message(f"<@{BOT_ID}> first")
    [answer] = await fake_discord.wait_for_messages(1)
    await fake_discord.message("and then?", reply_to=int(answer["id"]))
    sent = await fake_discord.wait_for_messages(2)
    assert sent[1]["content"] == "echo: and then?"


async def test_respond_mode_all_answers_every_message_in_the_allowed_channels(
        start_discord: StartDiscord, fake_discord: FakeDiscord) -> None:
    harness = await start_discord(discord_respond_mode="all",
                                  discord_channels=str(CHANNEL_ID))
    await fake_discord.message("no mention here")
    elsewhere = await fake_discord.message("nor here", channel_id=OTHER_CHANNEL_ID)
    [sent] = await fake_discord.wait_for_messages(1)
    assert sent["content"] == "echo: no mention here"
    await harness.assert_no_reply("discord", elsewhere["id"])


async def test_a_dm_is_answered_in_the_dm_without_quoting(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    await fake_discord.message("hello in private", channel_id=DM)
    [sent] = await fake_discord.wait_for_messages(1)
    assert sent["content"] == "echo: hello in private"
    assert int(sent["channel_id"]) in fake_discord.dm_channels
    assert "message_reference" not in sent
    await dc.gateway.drain()
    assert await dc.gateway.store.get_thread(f"discord:dm:{USER_ID}") is not None


async def test_a_thread_is_its_own_conversation_and_goes_on_without_a_mention(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    await fake_discord.message(f"<@{BOT_ID}> start here", channel_id=THREAD_ID)
    await fake_discord.wait_for_messages(1)
    await fake_discord.message("more, no mention", channel_id=THREAD_ID)
    sent = await fake_discord.wait_for_messages(2)
    assert [m["channel_id"] for m in sent] == [str(THREAD_ID)] * 2
    await dc.gateway.drain()
    key = f"discord:{GUILD_ID}:{CHANNEL_ID}:{THREAD_ID}"
    page = await dc.gateway.store.display_page(key, 10, None)
    assert [m.content for m in page.messages if m.role == "user"] == ["start here",
                                                                      "more, no mention"]


async def test_a_thread_the_bot_is_not_in_is_not_answered_without_a_mention(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    message = await fake_discord.message("talking among ourselves", channel_id=THREAD_ID)
    await dc.assert_no_reply("discord", message["id"])
    assert fake_llm.chat_requests == []


async def test_bots_and_the_bot_itself_are_ignored(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    other = await fake_discord.message(f"<@{BOT_ID}> hi bot", author=OTHER_BOT_ID)
    itself = await fake_discord.message(f"<@{BOT_ID}> talking to myself", author=BOT_ID)
    await dc.assert_no_reply("discord", other["id"])
    await dc.assert_no_reply("discord", itself["id"])
    assert fake_llm.chat_requests == []


async def test_a_mention_alone_starts_no_turn(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    message = await fake_discord.message(f"<@{BOT_ID}>")
    await dc.assert_no_reply("discord", message["id"])


async def test_other_mentions_reach_the_model_as_names(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    await fake_discord.message(f"<@{BOT_ID}> ask <@{OTHER_USER_ID}> and <@&{ROLE_ID}> "
                               f"in <#{CHANNEL_ID}>")
    await fake_discord.wait_for_messages(1)
    assert fake_llm.chat_requests[0].messages[-1]["content"] == \
        "ask @grace and @moderators in #general"


async def test_servers_and_channels_outside_the_allow_lists_are_not_answered(
        start_discord: StartDiscord, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    harness = await start_discord(discord_guilds="42")
    message = await fake_discord.message(f"<@{BOT_ID}> hello?")
    await harness.assert_no_reply("discord", message["id"])
    direct = await fake_discord.message("a DM is always answered", channel_id=DM)
    await fake_discord.wait_for_messages(1)
    assert fake_discord.sent[0]["content"] == "echo: a DM is always answered"
    assert direct["id"] != message["id"]


async def test_a_reply_naming_everyone_a_role_and_users_pings_nobody(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    fake_llm.script = [Scripted(body=completion(
        f"@everyone @here look: <@{OTHER_USER_ID}> <@!{USER_ID}> and <@&{ROLE_ID}>"))]
    await fake_discord.message(f"<@{BOT_ID}> ping them all")
    [sent] = await fake_discord.wait_for_messages(1)
    assert "@everyone" in sent["content"]  # the text passes through as written...
    assert fake_discord.pinged(sent) == NO_PINGS  # ...and notifies nobody


async def test_a_refused_token_stops_start_up_without_revealing_it(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fake_discord.token = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkEd.another-token-than-the-configured"
    gateway = Gateway(make_settings(
        discord_bot_token="MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkEd.fake-but-not-what-discord-has",
        discord_api_base=fake_discord.api_base), pm)
    with pytest.raises(ConfigError) as refused:
        await gateway.start()
    assert "refused" in str(refused.value)
    assert "fake-but-not" not in str(refused.value)
    assert not [r for r in caplog.records if "fake-but-not" in r.getMessage()]


async def test_a_malformed_token_is_a_config_error_before_any_request(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_discord: FakeDiscord) -> None:
    gateway = Gateway(make_settings(discord_bot_token="not a token",
                                    discord_api_base=fake_discord.api_base), pm)
    with pytest.raises(ConfigError):
        await gateway.start()
    assert fake_discord.calls == []


async def test_the_bot_token_never_reaches_the_logs(
        dc: Harness, fake_discord: FakeDiscord, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await fake_discord.message(f"<@{BOT_ID}> hi")
    await fake_discord.wait_for_messages(1)
    await dc.gateway.drain()
    ours = [r.getMessage() for r in caplog.records if r.name != "aiohttp.access"]
    assert ours
    assert not [line for line in ours if fake_discord.token in line]


async def test_a_thread_discord_py_has_not_cached_is_looked_up_once(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    new_thread = THREAD_ID + 100
    fake_discord.guild_channels[new_thread] = {**fake_discord.guild_channels[THREAD_ID],
                                               "id": str(new_thread), "name": "new"}
    await fake_discord.message(f"<@{BOT_ID}> in a new thread", channel_id=new_thread)
    await fake_discord.message(f"<@{BOT_ID}> again", channel_id=new_thread)
    await fake_discord.wait_for_messages(2)
    await dc.gateway.drain()
    assert await dc.gateway.store.get_thread(
        f"discord:{GUILD_ID}:{CHANNEL_ID}:{new_thread}") is not None
    assert len(fake_discord.calls_to("GET /channels/{id}")) == 1


async def test_without_the_message_content_switch_the_log_says_what_to_turn_on(
        start_gateway: StartDiscord, fake_discord: FakeDiscord,
        caplog: pytest.LogCaptureFixture) -> None:
    fake_discord.privileged_intents = False
    harness = await start_gateway(discord_bot_token=fake_discord.token,
                                  discord_api_base=fake_discord.api_base)
    await until(lambda: any("Message Content Intent" in r.getMessage()
                            for r in caplog.records), timeout=10)
    assert harness.gateway.accepting  # the rest of the gateway runs on


async def test_a_dropped_connection_is_made_again_to_the_same_server(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    await fake_discord.disconnect(code=4000)  # Discord asks clients to reconnect
    await fake_discord.wait_for(lambda: len(fake_discord.resumed) == 1)
    await fake_discord.wait_until_ready()
    assert len(fake_discord.identified) == 1  # resumed, not identified again
    await fake_discord.message(f"<@{BOT_ID}> still there?")
    [sent] = await fake_discord.wait_for_messages(1)
    assert sent["content"] == "echo: still there?"


async def test_stop_and_start_again_answers_each_later_message_once(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    channel = dc.gateway.channels["discord"]
    await channel.stop()
    await fake_discord.wait_for(lambda: not fake_discord.connected())
    await channel.start()
    await channel.start()  # starting a started channel adds no second connection
    await fake_discord.wait_until_ready()
    await fake_discord.message(f"<@{BOT_ID}> after the restart")
    await fake_discord.wait_for_messages(1)
    await dc.gateway.drain()
    assert fake_discord.texts() == ["echo: after the restart"]
    assert fake_discord.connected() == 1


async def test_discord_out_of_reach_does_not_stop_the_gateway(
        start_gateway: StartDiscord, caplog: pytest.LogCaptureFixture) -> None:
    from tests.process import free_port
    harness = await start_gateway(
        discord_bot_token="MTEwMDAwMDAwMDAwMDAwMDAwMQ.GfAkEd.fake-discord-bot-token_0123",
        discord_api_base=f"http://127.0.0.1:{free_port()}/api/v10")
    assert harness.gateway.accepting
    assert any("cannot reach Discord" in r.getMessage() for r in caplog.records)
