"""Nothing Discord handed over is lost: a real ``cloudybot serve`` on the fake Discord, killed
with SIGKILL right after a backlog was committed to its inbox (Discord does not deliver an
event twice, so that commit is the acknowledgement), then started again on the same data dir:
every message is answered once, in order per conversation; every slash command that was
acknowledged ("thinking…") gets its answer."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from gateway.testing.discord import DM, FakeDiscord
from gateway.testing.fake_llm import FakeLLM
from tests.helpers import until
from tests.process import ServeProcess
from tests.test_crash_recovery import (
    BACKLOG,
    CHATS,
    kill_restart_and_check,
    llm_env,
    processes,
    serve,
    slow_llm,
)

__all__ = ["processes", "slow_llm"]  # fixtures
AUTHORS = [1400000000000000101 + n for n in range(CHATS)]
COMMANDS = 3
FOLLOW_UP = "POST /webhooks/{application}/{token}"


def committed(data_dir: Path) -> int:
    """How many Discord messages the child's inbox holds (each one acknowledged)."""
    try:
        with closing(sqlite3.connect(data_dir / "cloudybot.sqlite3", timeout=5)) as db:
            return int(db.execute(
                "SELECT count(*) FROM inbox WHERE channel = 'discord'").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The kit's fake Discord (``cloudybot_fake_discord``)."""
    return fake_discord


def replies(fake: FakeDiscord) -> list[tuple[str, str]]:
    """(conversation, text) of every message the bot sent in the DMs."""
    return [(f"discord:dm:{fake.dm_channels[int(m['channel_id'])]}", m["content"])
            for m in fake.sent if int(m["channel_id"]) in fake.dm_channels
            and "interaction_metadata" not in m]


async def test_a_discord_backlog_and_acknowledged_commands_survive_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, fake: FakeDiscord,
        processes: list[ServeProcess]) -> None:
    first = await serve(tmp_path / "data", {
        **llm_env(slow_llm), "CLOUDYBOT_DISCORD_BOT_TOKEN": fake.token,
        "CLOUDYBOT_DISCORD_API_BASE": fake.api_base}, processes)
    await fake.wait_until_ready(timeout=20)
    await until(lambda: fake.command_puts == 1, timeout=10)
    expected: dict[str, list[str]] = {f"discord:dm:{author}": [] for author in AUTHORS}
    for number in range(BACKLOG):
        author = AUTHORS[number % CHATS]
        text = f"message {number}"
        await fake.message(text, channel_id=DM, author=author)
        expected[f"discord:dm:{author}"].append(text)
    # the commands' answers are held up until the kill cuts them short: a long 429 on the
    # first, which discord.py waits out holding the application's webhook bucket
    fake.rate_limit(FOLLOW_UP, times=1, retry_after=30.0)
    interactions = [await fake.slash("usage", author=AUTHORS[n]) for n in range(COMMANDS)]
    await fake.wait_for(lambda: all(i.callback is not None for i in interactions), timeout=10)
    await until(lambda: committed(first.data_dir) == BACKLOG + COMMANDS, timeout=20)
    await until(lambda: len(fake.calls_to(FOLLOW_UP)) == 1, timeout=10)
    assert not any(i.followups for i in interactions)

    await kill_restart_and_check(first, processes, lambda: replies(fake), expected)
    await fake.wait_for(lambda: all(i.followups for i in interactions), timeout=20)
    for interaction in interactions:
        assert [m["content"][:11] for m in interaction.followups] == ["Plan: team."]


def holds_the_gateway(process: ServeProcess) -> bool:
    return "this process holds the Gateway connection" in process.log.read_text()


async def test_one_process_holds_the_gateway_connection_and_another_takes_over(
        tmp_path: Path, postgres_url: str, fake_llm: FakeLLM, fake: FakeDiscord,
        processes: list[ServeProcess]) -> None:
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": "one-secret-key",
           **llm_env(fake_llm), "CLOUDYBOT_DISCORD_BOT_TOKEN": fake.token,
           "CLOUDYBOT_DISCORD_API_BASE": fake.api_base, "CLOUDYBOT_LEADER_RETRY_SECONDS": "0.3"}
    both = [ServeProcess(tmp_path / f"gateway-{index}", env) for index in range(2)]
    processes.extend(both)
    await asyncio.gather(*(process.start() for process in both))
    await fake.wait_until_ready(timeout=20)
    await fake.message("first", channel_id=DM)
    await fake.wait_for_messages(1, timeout=20)
    await asyncio.sleep(1.0)  # long enough for a second connection to have shown up
    assert len(fake.identified) == 1 and fake.command_puts == 1
    [leader] = [process for process in both if holds_the_gateway(process)]
    [other] = [process for process in both if process is not leader]

    await leader.kill()
    await fake.wait_for(lambda: len(fake.identified) == 2, timeout=30)  # the other one
    await fake.wait_until_ready(timeout=10)
    await fake.message("second", channel_id=DM)
    await fake.wait_for_messages(2, timeout=20)
    assert fake.texts() == ["echo: first", "echo: second"]
    assert holds_the_gateway(other) and fake.command_puts == 1  # unchanged: not written again
