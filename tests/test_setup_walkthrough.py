"""The channel set-up steps of docs/channels.md, followed as written: every ``sh`` block of a
"Setting it up" section is read from the page, its ``export`` lines become a real
``cloudybot serve`` child's environment (the placeholders replaced by the fakes' tokens), the
log line its comment promises must appear, and the bot must then answer a first message and
``help`` the way the page's last step says.

Only two things are added to what the page says: the API base of the fake platform (the real
one is the default) and the fake LLM. ``python3 dev.py serve`` is run as the ``cloudybot
serve`` it starts once the project is installed.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import discord as fake_discord_values
from gateway.testing import slack as fake_slack_values
from gateway.testing.discord import DM, FakeDiscord
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import FakeSlack, event_body, sign
from gateway.testing.telegram import BOT_USERNAME, FakeTelegramChats
from gateway.testing.telegram import TOKEN as TELEGRAM_TOKEN
from tests.helpers import until
from tests.process import ServeProcess
from tests.test_channel_durability import private_update
from tests.test_crash_recovery import llm_env, processes, serve

__all__ = ["processes"]  # the fixture
PAGE = Path(__file__).resolve().parents[1] / "docs" / "channels.md"
SERVE = "python3 dev.py serve"
LOG_SAYS = "the log says: "
# Each placeholder the page writes, and what the test gives in its place.
PLACEHOLDERS: dict[str, Callable[[], str]] = {
    "123456789:AA...": lambda: TELEGRAM_TOKEN,
    "$(openssl rand -hex 32)": lambda: secrets.token_hex(32),
    "xoxb-...": lambda: fake_slack_values.TOKEN,
    "xapp-...": lambda: fake_slack_values.APP_TOKEN,
    "...": lambda: fake_slack_values.SIGNING_SECRET,
    "MTEx...": lambda: fake_discord_values.TOKEN,
}


@dataclass
class Block:
    """One ``sh`` block of a set-up section: its environment and the log line it promises."""

    env: dict[str, str] = field(default_factory=dict)
    log_says: str = ""
    serves: bool = False


def setup_blocks(channel: str) -> list[Block]:
    """The ``sh`` blocks of the page's ``## {channel}`` section up to "How it behaves"."""
    section = PAGE.read_text().split(f"\n## {channel}\n", 1)[1].split("\n## ", 1)[0]
    steps = section.split("\n### How it behaves", 1)[0]
    blocks = []
    for code in re.findall(r"```sh\n(.*?)```", steps, re.S):
        block = Block()
        for line in code.splitlines():
            command, _, comment = line.strip().partition("#")
            command = command.strip()
            if command.startswith("export "):
                name, _, value = command.removeprefix("export ").partition("=")
                if value in PLACEHOLDERS:
                    value = PLACEHOLDERS[value]()
                assert "..." not in value and "$(" not in value, f"{name}: no test value"
                block.env[name] = value
            elif command:
                assert command == SERVE, f"a step the test does not follow: {command!r}"
                block.serves = True
                if LOG_SAYS in comment:
                    block.log_says = comment.split(LOG_SAYS, 1)[1].strip()
        blocks.append(block)
    return blocks


async def followed(block: Block, data_dir: Path, added: dict[str, str],
                   processes: list[ServeProcess]) -> ServeProcess:
    """Run the block's ``serve`` with its environment (and ``added``); wait for its log line."""
    assert block.serves, "the block never starts the gateway"
    process = await serve(data_dir, {**block.env, **added}, processes)
    if block.log_says:
        expected = block.log_says.replace("@yourbot", f"@{BOT_USERNAME}")
        await until(lambda: expected in process.log.read_text(), timeout=20)
    return process


def test_the_page_has_the_blocks_this_test_follows() -> None:
    telegram, slack, discord = (setup_blocks(name) for name in ("Telegram", "Slack",
                                                                  "Discord"))
    assert [sorted(block.env) for block in telegram] == [
        ["CLOUDYBOT_TELEGRAM_TOKEN"], ["CLOUDYBOT_TELEGRAM_TOKEN",
                                       "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET",
                                       "CLOUDYBOT_TELEGRAM_WEBHOOK_URL"]]
    assert [sorted(block.env) for block in slack] == [
        ["CLOUDYBOT_SLACK_APP_TOKEN", "CLOUDYBOT_SLACK_BOT_TOKEN"],
        ["CLOUDYBOT_SLACK_BOT_TOKEN", "CLOUDYBOT_SLACK_SIGNING_SECRET"]]
    assert [sorted(block.env) for block in discord] == [["CLOUDYBOT_DISCORD_BOT_TOKEN"]]
    assert all(block.serves for block in [*telegram, *slack, *discord])


# --- Telegram ------------------------------------------------------------------------------
async def test_telegram_by_long_polling_as_the_page_says(
        tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegramChats,
        processes: list[ServeProcess]) -> None:
    polling = setup_blocks("Telegram")[0]
    await followed(polling, tmp_path / "data", {
        **llm_env(fake_llm), "CLOUDYBOT_TELEGRAM_API_BASE": fake_telegram.base_url},
        processes)
    # Step 3: "Send your bot a message in Telegram: it answers. /help lists the commands."
    fake_telegram.updates.put_nowait(private_update(1, "hello"))
    fake_telegram.updates.put_nowait(private_update(2, "/help"))
    sent = await fake_telegram.wait_for_messages(2, timeout=20)
    assert sent[0].params["text"] == "echo: hello"
    assert "Commands:" in sent[1].params["text"]


async def test_telegram_by_webhook_as_the_page_says(
        tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegramChats,
        processes: list[ServeProcess]) -> None:
    webhook = setup_blocks("Telegram")[1]
    process = await followed(webhook, tmp_path / "data", {
        **llm_env(fake_llm), "CLOUDYBOT_TELEGRAM_API_BASE": fake_telegram.base_url},
        processes)
    # setWebhook was called with the page's URL and the secret (the fake refuses what
    # Telegram refuses: a URL that is not HTTPS on an allowed port, a malformed secret)
    assert fake_telegram.webhook == (webhook.env["CLOUDYBOT_TELEGRAM_WEBHOOK_URL"],
                                     webhook.env["CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET"])
    # What Telegram then posts to that URL (here, straight to the gateway's own port):
    headers = {"X-Telegram-Bot-Api-Secret-Token":
               webhook.env["CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET"]}
    async with aiohttp.ClientSession(base_url=process.url) as client:
        for update in (private_update(1, "hello"), private_update(2, "/help")):
            response = await client.post("/telegram/webhook", json=update, headers=headers)
            assert response.status == 200, await response.text()
    sent = await fake_telegram.wait_for_messages(2, timeout=20)
    assert sent[0].params["text"] == "echo: hello"
    assert "Commands:" in sent[1].params["text"]


# --- Slack ---------------------------------------------------------------------------------
DM_EVENT = {"type": "message", "channel_type": "im", "channel": "D0LAN2Q65", "user": "U0ADA",
            "text": "hello", "ts": "1767226000.000001"}


async def test_slack_in_socket_mode_as_the_page_says(
        tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack,
        processes: list[ServeProcess]) -> None:
    socket_mode = setup_blocks("Slack")[0]
    await followed(socket_mode, tmp_path / "data", {
        **llm_env(fake_llm), "CLOUDYBOT_SLACK_API_BASE": fake_slack.base_url}, processes)
    # Step 4: "write to it in its Messages tab: it answers ... /cloudybot help lists the
    # commands."
    await fake_slack.wait_for_ack(await fake_slack.send_event(DM_EVENT, "Ev1"), timeout=20)
    posted = await fake_slack.wait_for("chat.postMessage", 1, timeout=20)
    assert posted[0].params["text"] == "echo: hello"
    ack = await fake_slack.wait_for_ack(await fake_slack.send_command("help", "T1"),
                                        timeout=20)
    assert "Commands:" in json.dumps(ack)


async def test_slack_by_the_events_api_as_the_page_says(
        tmp_path: Path, fake_llm: FakeLLM, fake_slack: FakeSlack,
        processes: list[ServeProcess]) -> None:
    events_api = setup_blocks("Slack")[1]
    process = await followed(events_api, tmp_path / "data", {
        **llm_env(fake_llm), "CLOUDYBOT_SLACK_API_BASE": fake_slack.base_url}, processes)
    body = event_body(DM_EVENT, "Ev1")
    async with aiohttp.ClientSession(base_url=process.url) as client:
        response = await client.post("/slack/events", data=body, headers=sign(
            events_api.env["CLOUDYBOT_SLACK_SIGNING_SECRET"], body))
        assert response.status == 200, await response.text()
    posted = await fake_slack.wait_for("chat.postMessage", 1, timeout=20)
    assert posted[0].params["text"] == "echo: hello"


# --- Discord -------------------------------------------------------------------------------
@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The kit's fake Discord (``cloudybot_fake_discord``)."""
    return fake_discord


async def test_discord_as_the_page_says(tmp_path: Path, fake_llm: FakeLLM, fake: FakeDiscord,
                                        processes: list[ServeProcess]) -> None:
    (block,) = setup_blocks("Discord")
    await followed(block, tmp_path / "data", {
        **llm_env(fake_llm), "CLOUDYBOT_DISCORD_API_BASE": fake.api_base}, processes)
    await fake.wait_until_ready(timeout=20)
    await fake.message("hello", channel_id=DM)
    sent = await fake.wait_for_messages(1, timeout=20)
    assert sent[0]["content"] == "echo: hello"
