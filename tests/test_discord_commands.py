"""Discord's application (slash) commands: registered only when they changed, acknowledged
("thinking…") well within 3 seconds, answered by a follow-up only their user sees."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.testing.discord import (
    APPLICATION_ID,
    EPHEMERAL,
    GUILD_ID,
    THREAD_ID,
    USER_ID,
    FakeDiscord,
    Interaction,
)
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.helpers import until

StartDiscord = Callable[..., Awaitable[Harness]]
BUILT_IN = ["forget", "help", "jobs", "memory", "new", "remember", "remind", "usage"]


async def answered(fake: FakeDiscord, interaction: Interaction,
                   count: int = 1) -> list[str]:
    """The follow-ups' texts, once ``count`` arrived."""
    await fake.wait_for(lambda: len(interaction.followups) >= count)
    return [message["content"] for message in interaction.followups]


async def test_the_chat_commands_are_registered_once_and_not_again_when_unchanged(
        start_discord: StartDiscord, fake_discord: FakeDiscord) -> None:
    first = await start_discord()
    await until(lambda: fake_discord.command_puts == 1)
    assert sorted(c["name"] for c in fake_discord.commands) == BUILT_IN
    [remember] = [c for c in fake_discord.commands if c["name"] == "remember"]
    assert remember["options"] == [{"type": 3, "name": "key_value", "required": True,
                                    "description": "KEY VALUE"}]
    assert remember["contexts"] == [0, 1]
    await first.client.close()  # a restart: Discord already has these commands

    await start_discord()
    await until(lambda: len(fake_discord.calls_to(
        "GET /applications/{application}/commands")) == 2)
    assert fake_discord.command_puts == 1  # compared, not written again


async def test_changed_commands_are_registered_again(
        start_discord: StartDiscord, fake_discord: FakeDiscord) -> None:
    fake_discord.commands = [{"id": "1", "application_id": str(APPLICATION_ID), "type": 1,
                              "name": "help", "description": "an older text",
                              "version": "1", "contexts": [0, 1],
                              "integration_types": [0]}]
    await start_discord()
    await until(lambda: fake_discord.command_puts == 1)
    assert sorted(c["name"] for c in fake_discord.commands) == BUILT_IN


async def test_a_command_is_deferred_within_3_seconds_and_answered_privately(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    await until(lambda: fake_discord.command_puts == 1)
    interaction = await fake_discord.slash("usage")
    [answer] = await answered(fake_discord, interaction)
    assert interaction.callback is not None and interaction.callback_after is not None
    assert interaction.callback["type"] == 5  # deferred: "thinking…"
    assert interaction.callback["data"]["flags"] & EPHEMERAL  # only its user sees it
    assert interaction.callback_after < 3.0
    assert answer.startswith("Plan: free.")
    assert interaction.followups[0]["flags"] & EPHEMERAL
    assert fake_discord.pinged(interaction.followups[0]) == {"everyone": [], "users": [],
                                                             "roles": []}
    assert fake_llm.chat_requests == []  # a command is no LLM turn


async def test_commands_act_on_the_conversation_they_are_sent_in(
        dc: Harness, fake_discord: FakeDiscord, fake_llm: FakeLLM) -> None:
    await until(lambda: fake_discord.command_puts == 1)
    assert await answered(fake_discord, await fake_discord.slash(
        "remember", "name Ada", channel_id=THREAD_ID)) == ["Pinned name."]
    assert await answered(fake_discord, await fake_discord.slash(
        "memory", channel_id=THREAD_ID)) == ["Pinned facts:\n• name: Ada"]
    elsewhere = await answered(fake_discord, await fake_discord.slash("memory"))
    assert elsewhere[0].startswith("Nothing is pinned")
    in_private = await answered(fake_discord, await fake_discord.slash("memory", dm=True))
    assert in_private[0].startswith("Nothing is pinned")
    await dc.gateway.drain()
    pinned = await dc.gateway.store.get_thread(
        f"discord:{GUILD_ID}:{THREAD_ID - 2}:{THREAD_ID}")
    assert pinned is not None and pinned.ref.user_id == f"discord:{USER_ID}"


async def test_a_command_redelivered_is_answered_once(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    interaction = await fake_discord.slash("help")
    await answered(fake_discord, interaction)
    await fake_discord.dispatch("INTERACTION_CREATE", interaction.payload)  # the same id
    await dc.gateway.drain()
    assert len(interaction.followups) == 1


async def test_a_command_stored_slowly_is_deferred_first_and_answered_after(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    dc.gateway.channels["discord"].ack_seconds = 0.0  # type: ignore[attr-defined]
    interaction = await fake_discord.slash("usage")
    [answer] = await answered(fake_discord, interaction)
    assert interaction.callback is not None and interaction.callback["type"] == 5
    assert answer.startswith("Plan: free.")


async def test_an_interaction_acknowledged_too_late_is_not_retried_forever(
        dc: Harness, fake_discord: FakeDiscord) -> None:
    dc.gateway.outbox.backoff_seconds = 0.01
    fake_discord.ack_seconds = 0.0  # every callback comes "after 3 s"
    interaction = await fake_discord.slash("help")
    await until(lambda: ("POST /webhooks/{application}/{token}", 404) in fake_discord.refused)
    await dc.gateway.drain()
    assert interaction.followups == []
    assert len(fake_discord.calls_to("POST /webhooks/{application}/{token}")) == 1
