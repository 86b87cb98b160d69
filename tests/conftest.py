"""Shared fixtures: a fake LLM on loopback, settings in a temp dir, a running gateway."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import Gateway
from gateway.app import build_app
from gateway.config.settings import Settings
from gateway.plugins.manager import PluginManager
from gateway.testing.discord import FakeDiscord
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.plugin import GatewayHarness, ReplyRecorder
from gateway.testing.slack import SIGNING_SECRET as SLACK_SIGNING_SECRET
from gateway.testing.slack import TOKEN as SLACK_TOKEN
from gateway.testing.slack import FakeSlack
from gateway.testing.telegram import SECRET as TELEGRAM_SECRET
from gateway.testing.telegram import TOKEN as TELEGRAM_TOKEN
from gateway.testing.telegram import FakeTelegramChats
from tests.fakes.anthropic import FakeAnthropic
from tests.fakes.loop import LoopChannel
from tests.fakes.website import Website
from tests.helpers import Clock
from tests.postgres import postgres_database, postgres_url

# The whole suite runs on PostgreSQL instead of SQLite with CLOUDYBOT_TEST_BACKEND=postgresql.
ON_POSTGRES = os.environ.get("CLOUDYBOT_TEST_BACKEND") == "postgresql"
__all__ = ["postgres_database", "postgres_url"]  # fixtures, for every test module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, run the tests whose gateway's store is the one ``make_settings`` makes
    (every test of a gateway, its API and its channels): the others would run exactly as they
    did on SQLite. Skip, saying why, those that work on the SQLite file itself."""
    if not ON_POSTGRES:
        return
    skip = pytest.mark.skip(reason="works on the SQLite file itself; the suite runs on "
                            "PostgreSQL (CLOUDYBOT_TEST_BACKEND=postgresql)")
    kept, elsewhere = [], []
    for item in items:
        if "make_settings" not in getattr(item, "fixturenames", ()):
            elsewhere.append(item)
            continue
        if item.get_closest_marker("sqlite_only") is not None:
            item.add_marker(skip)
        kept.append(item)
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = kept


PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                   "all_proxy")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback fakes must be reached directly (slack_sdk ignores NO_PROXY)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    """A fake Anthropic Messages API on loopback, as strict as the real one."""
    fake = FakeAnthropic()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
def fake_llm(cloudybot_fake_llm: FakeLLM) -> FakeLLM:
    """The pytest kit's fake LLM (gateway.testing): this suite is built on the kit."""
    return cloudybot_fake_llm


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The data dir of ``make_settings``: a CLI run on it sees the test gateway's data."""
    return tmp_path / "data"


CORE_FIELDS = frozenset(field.name for field in dataclasses.fields(Settings))


def _variable_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@pytest.fixture
def make_settings(data_dir: Path, fake_llm: FakeLLM, request: pytest.FixtureRequest,
                  cloudybot_settings: Callable[..., Settings]) -> Callable[..., Settings]:
    """Settings in a temp data dir, talking to the fake LLM. Keyword arguments override: a
    core field by its name, a plugin's setting by its variable without ``CLOUDYBOT_``
    (``telegram_group_mode="all"``, ``llm_max_retries=0``; ``""`` unsets), read as the
    gateway reads the environment; the browser is off unless ``browser_enabled=True``. With
    ``CLOUDYBOT_TEST_BACKEND=postgresql``, the store is
    a fresh PostgreSQL schema of the test's own."""
    database = request.getfixturevalue("postgres_url") if ON_POSTGRES else ""

    def make(**overrides: Any) -> Settings:
        # The browser plugin's hint would make every prompt depend on whether this machine
        # has Chromium: tests/test_browser.py turns it on.
        overrides.setdefault("browser_enabled", False)
        if database and "database_url" not in overrides:
            overrides["database_url"] = database
        variables = {f"CLOUDYBOT_{key.upper()}": _variable_text(value)
                     for key, value in overrides.items() if key not in CORE_FIELDS}
        return cloudybot_settings({
            "CLOUDYBOT_DATA_DIR": str(data_dir),
            "CLOUDYBOT_LLM_API_KEY": "sk-test-key",
            "CLOUDYBOT_LLM_TIMEOUT_SECONDS": "5",
            **variables,
        }, **{key: value for key, value in overrides.items() if key in CORE_FIELDS})
    return make


@pytest.fixture
def pm(cloudybot_plugins: PluginManager) -> PluginManager:
    """The kit's plugin manager: the installed plugins (and its reply recorder); tests may
    register more before starting a gateway."""
    return cloudybot_plugins


@pytest.fixture
def loop(pm: PluginManager) -> LoopChannel:
    """The in-test ``loop`` channel, registered on ``pm``: start the gateway after asking for
    it (``start_gateway()`` in the test body)."""
    channel = LoopChannel()
    pm.register(channel, name="loop-channel")
    return channel


@dataclasses.dataclass
class Harness(GatewayHarness):
    """The kit's harness, with helpers to make accounts and chat over the HTTP API."""

    async def user(self, user_id: str = "alice", **kwargs: Any) -> dict[str, str]:
        """Create an account; return its Authorization header."""
        _, token = await self.gateway.accounts.add_user(user_id, **kwargs)
        return {"Authorization": f"Bearer {token}"}

    async def chat(self, headers: dict[str, str], message: str, thread: str = "t1",
                   **extra: Any) -> Any:
        response = await self.client.post(
            "/chat", json={"threadId": thread, "message": message, **extra}, headers=headers)
        return response


@pytest.fixture
def start_gateway(fake_llm: FakeLLM, aiohttp_client: Any,
                  make_settings: Callable[..., Settings], pm: PluginManager,
                  cloudybot_recorder: ReplyRecorder) -> Callable[..., Awaitable[Harness]]:
    """Start a gateway (settings overridable) and return a Harness.

    ``fake_llm`` comes first so that it is torn down last: the gateway stops (and drains its
    background summarizations) while the fake can still answer.
    """
    async def start(**overrides: Any) -> Harness:
        gateway = Gateway(make_settings(**overrides), pm)
        client = await aiohttp_client(await build_app(gateway))
        return Harness(gateway, client, cloudybot_recorder)
    return start


@pytest.fixture
async def website() -> AsyncIterator[Website]:
    """The browser tests' small website on loopback (tests/fakes/website.py)."""
    site = Website()
    await site.start()
    yield site
    await site.close()


@pytest.fixture
def clock() -> Clock:
    """A controllable clock (see tests.helpers.Clock)."""
    return Clock()


@pytest.fixture
def start_clocked(fake_llm: FakeLLM, aiohttp_client: Any, make_settings: Callable[..., Settings],
                  pm: PluginManager, clock: Clock,
                  cloudybot_recorder: ReplyRecorder) -> Callable[..., Awaitable[Harness]]:
    """Like ``start_gateway``, on the test's ``clock`` and with no periodic purge unless asked;
    call it again for a restart on the same data."""
    async def start(**overrides: Any) -> Harness:
        settings = make_settings(**{"purge_interval_minutes": 0.0, **overrides})
        gateway = Gateway(settings, pm, clock=clock)
        return Harness(gateway, await aiohttp_client(await build_app(gateway)),
                       cloudybot_recorder)
    return start


@pytest.fixture
async def harness(start_gateway: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway with default settings on the fake LLM."""
    return await start_gateway()


# --- channels: the real python-telegram-bot and slack-bolt against loopback fakes -------------
@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegramChats]:
    """A fake Bot API on 127.0.0.1 (see gateway/testing/telegram.py)."""
    server = FakeTelegramChats(TELEGRAM_TOKEN)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def start_telegram(fake_telegram: FakeTelegramChats,
                   start_gateway: Callable[..., Awaitable[Harness]],
                   ) -> Callable[..., Awaitable[Harness]]:
    """A gateway with Telegram in webhook mode on the fake (``telegram_webhook_secret=""``:
    polling). ``fake_telegram`` comes first: torn down after the gateway stopped using it."""
    async def start(**overrides: Any) -> Harness:
        return await start_gateway(**{"telegram_token": TELEGRAM_TOKEN,
                                      "telegram_api_base": fake_telegram.base_url,
                                      "telegram_webhook_secret": TELEGRAM_SECRET, **overrides})
    return start


@pytest.fixture
async def tg(start_telegram: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway with Telegram in webhook mode."""
    return await start_telegram()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    """A fake Slack Web API on 127.0.0.1 (see gateway/testing/slack.py)."""
    server = FakeSlack(SLACK_TOKEN)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def start_slack(fake_slack: FakeSlack, start_gateway: Callable[..., Awaitable[Harness]],
                ) -> Callable[..., Awaitable[Harness]]:
    """A gateway with Slack on the fake; ``fake_slack`` is torn down after the gateway."""
    async def start(**overrides: Any) -> Harness:
        return await start_gateway(**{"slack_bot_token": SLACK_TOKEN,
                                      "slack_signing_secret": SLACK_SIGNING_SECRET,
                                      "slack_api_base": fake_slack.base_url, **overrides})
    return start


@pytest.fixture
async def slack(start_slack: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway with Slack."""
    return await start_slack()


@pytest.fixture
def fake_discord(cloudybot_fake_discord: FakeDiscord) -> FakeDiscord:
    """The kit's fake Discord (REST and Gateway) on 127.0.0.1 (gateway/testing/discord.py)."""
    return cloudybot_fake_discord


@pytest.fixture
def start_discord(fake_discord: FakeDiscord, start_gateway: Callable[..., Awaitable[Harness]],
                  ) -> Callable[..., Awaitable[Harness]]:
    """A gateway with Discord on the fake, connected (READY) when it returns;
    ``fake_discord`` is torn down after the gateway."""
    async def start(**overrides: Any) -> Harness:
        harness = await start_gateway(**{"discord_bot_token": fake_discord.token,
                                         "discord_api_base": fake_discord.api_base,
                                         **overrides})
        await fake_discord.wait_until_ready()
        return harness
    return start


@pytest.fixture
async def dc(start_discord: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway with Discord."""
    return await start_discord()
