"""The kit's fake Discord (gateway.testing.discord), driven by a bare ``discord.Client``: it
logs in, identifies, gets READY and the test guild, receives a message and answers it."""

from __future__ import annotations

import asyncio

import discord
import pytest

from gateway.testing.discord import (
    BOT_ID,
    CHANNEL_ID,
    DM,
    GUILD_ID,
    USER_ID,
    FakeDiscord,
    discord_py_at,
)


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The kit's fake Discord (``cloudybot_fake_discord``)."""
    return fake_discord


class EchoClient(discord.Client):
    """Answers every message of someone else with its content."""

    def __init__(self) -> None:
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = True
        intents.message_content = True
        super().__init__(intents=intents)
        self.seen: list[discord.Message] = []

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id == BOT_ID:
            return
        self.seen.append(message)
        await message.channel.send(f"you said: {message.content}",
                                   allowed_mentions=discord.AllowedMentions.none())


async def run(client: discord.Client, token: str) -> asyncio.Task[None]:
    task = asyncio.ensure_future(client.start(token))
    return task


async def stop(client: discord.Client, task: asyncio.Task[None]) -> None:
    await client.close()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_real_client_connects_receives_and_sends(fake: FakeDiscord) -> None:
    with discord_py_at(fake):
        client = EchoClient()
        task = await run(client, fake.token)
        try:
            await asyncio.wait_for(client.wait_until_ready(), 10)
            assert client.user is not None and client.user.id == BOT_ID
            guild = client.get_guild(GUILD_ID)
            assert guild is not None and guild.get_channel(CHANNEL_ID) is not None
            assert fake.identified[0]["intents"] & (1 << 15)  # message_content asked for
            await fake.message(f"<@{BOT_ID}> hello there")
            [sent] = await fake.wait_for_messages(1)
            assert sent["content"] == f"you said: <@{BOT_ID}> hello there"
            assert sent["channel_id"] == str(CHANNEL_ID)
            assert fake.pinged(sent) == {"everyone": [], "users": [], "roles": []}
            [seen] = client.seen
            assert seen.author.id == USER_ID and client.user in seen.mentions
            await fake.message("in private", channel_id=DM)
            await fake.wait_for_messages(2)
            assert isinstance(client.seen[1].channel, discord.DMChannel)
        finally:
            await stop(client, task)


async def test_a_wrong_token_is_refused_at_login(fake: FakeDiscord) -> None:
    with discord_py_at(fake):
        client = EchoClient()
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
        await client.close()


async def test_message_content_without_the_portal_switch_closes_4014(fake: FakeDiscord) -> None:
    fake.privileged_intents = False
    with discord_py_at(fake):
        client = EchoClient()
        with pytest.raises(discord.PrivilegedIntentsRequired):
            await asyncio.wait_for(client.start(fake.token), 10)
        await client.close()


async def test_content_over_2000_characters_is_refused_like_discord(fake: FakeDiscord) -> None:
    with discord_py_at(fake):
        client = EchoClient()
        await client.login(fake.token)
        try:
            channel = client.get_partial_messageable(CHANNEL_ID)
            with pytest.raises(discord.HTTPException) as refused:
                await channel.send("x" * 2001)
            assert refused.value.status == 400 and refused.value.code == 50035
            await channel.send("x" * 2000)
            assert len(fake.sent) == 1
        finally:
            await client.close()


async def test_a_429_is_waited_out_by_discord_py_and_the_message_goes_out(
        fake: FakeDiscord) -> None:
    fake.rate_limit("POST /channels/{id}/messages", times=2, retry_after=0.1)
    with discord_py_at(fake):
        client = EchoClient()
        await client.login(fake.token)
        try:
            await client.get_partial_messageable(CHANNEL_ID).send("after the wait")
        finally:
            await client.close()
    assert [m["content"] for m in fake.sent] == ["after the wait"]
    assert len(fake.calls_to("POST /channels/{id}/messages")) == 3


async def test_a_bucket_is_followed_before_it_refuses(fake: FakeDiscord) -> None:
    from gateway.testing.discord import Bucket
    fake.buckets["POST /channels/{id}/messages"] = Bucket(limit=2, per=0.5)
    with discord_py_at(fake):
        client = EchoClient()
        await client.login(fake.token)
        try:
            channel = client.get_partial_messageable(CHANNEL_ID)
            for number in range(5):
                await channel.send(f"m{number}")
        finally:
            await client.close()
    assert len(fake.sent) == 5
    assert ("POST /channels/{id}/messages", 429) not in fake.refused
