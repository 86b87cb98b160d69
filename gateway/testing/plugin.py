"""pytest plugin for channel (and other) plugin authors; loaded through the ``pytest11`` entry
point of the ``cloudybot`` distribution.

Fixtures (all prefixed ``cloudybot_``; the gateway's own test suite is built on them too):

- ``cloudybot_fake_llm``: an OpenAI-compatible server on 127.0.0.1 that records requests and
  echoes ``echo: <last user message>`` (see :class:`gateway.testing.fake_llm.FakeLLM`);
- ``cloudybot_start``: ``await cloudybot_start(env, **settings)`` starts a gateway with every
  installed plugin, talking to the fake LLM, in a temporary data dir, behind an aiohttp test
  client, and returns a :class:`GatewayHarness`;
- ``cloudybot_fake_discord``: a fake Discord on 127.0.0.1 for a Discord-based plugin (see
  :mod:`gateway.testing.discord`);
- ``cloudybot_plugins``: the plugin manager it uses (register a test double on it first),
  ``cloudybot_settings``: the settings it builds, ``cloudybot_recorder``: delivered replies.

``GatewayHarness.exchange(send, channel=, message_id=)`` performs ``send()`` (for example a
signed POST to your channel's webhook) and waits until the gateway delivered the reply to that
inbound message through your channel; it returns the reply text, or fails saying why none came.
``GatewayHarness.assert_no_reply(channel, message_id)`` checks that nothing answered it.

Also here: :mod:`gateway.testing.fake_llm` (``FakeLLM``; ``Scripted`` and ``completion`` to
script its answers), :mod:`gateway.testing.telegram`, :mod:`gateway.testing.slack` and
:mod:`gateway.testing.discord` (fake Bot API, Web API and Discord REST + Gateway servers the
real python-telegram-bot, slack_sdk and discord.py talk to),
:class:`gateway.testing.loopback.LoopbackServer` (serve any aiohttp app on 127.0.0.1) and
:mod:`gateway.testing.processes` (the processes a gateway runs under it, from ``/proc``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.app import build_app
from gateway.config.settings import Settings, load_settings
from gateway.gateway import Gateway
from gateway.hookspecs import hookimpl
from gateway.plugins.manager import (
    PluginManager,
    declared_settings,
    make_plugin_manager,
    plugin_names,
)
from gateway.store import Delivery
from gateway.testing.discord import FakeDiscord
from gateway.testing.fake_llm import FakeLLM


class ReplyRecorder:
    """A plugin that records every reply the gateway delivered to a channel."""

    def __init__(self) -> None:
        self.replies: dict[tuple[str, str], str] = {}
        self._arrived = asyncio.Event()

    @hookimpl
    def reply_sent(self, message: Delivery, text: str) -> None:
        """Record the delivered reply."""
        self.replies[(message.channel, message.message_id)] = text
        self._arrived.set()

    async def wait(self, channel: str, message_id: str, timeout: float | None = None) -> str:
        """The reply to ``message_id``, once delivered (waiting at most ``timeout`` seconds
        if given: ``TimeoutError`` then)."""
        async def arrived() -> str:
            while (channel, message_id) not in self.replies:
                self._arrived.clear()
                await self._arrived.wait()
            return self.replies[(channel, message_id)]
        return await asyncio.wait_for(arrived(), timeout)


@dataclasses.dataclass
class GatewayHarness:
    """A running gateway behind an aiohttp test client."""

    gateway: Gateway
    client: Any  # aiohttp.test_utils.TestClient
    recorder: ReplyRecorder

    async def exchange(self, send: Callable[[], Awaitable[Any]], *, channel: str,
                       message_id: str, timeout: float = 10.0) -> str:
        """Run ``send()`` and return the reply delivered for ``(channel, message_id)``.

        When no reply comes — the gateway finished its work without one, or ``timeout``
        seconds passed — the test fails with why: the reply's delivery failed (and the
        channel's error), is still being retried, or was never queued (the message was not
        received, or was a redelivery)."""
        await send()
        arrival = asyncio.ensure_future(self.recorder.wait(channel, message_id))
        settled = asyncio.ensure_future(self.gateway.drain())
        try:
            await asyncio.wait({arrival, settled}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            settled.cancel()
            arrival.cancel()
        if (channel, message_id) in self.recorder.replies:
            return self.recorder.replies[(channel, message_id)]
        raise AssertionError(await self._no_reply(channel, message_id))

    async def assert_no_reply(self, channel: str, message_id: str) -> None:
        """Once the gateway's work is done, check that nothing was sent or queued in answer to
        ``(channel, message_id)`` (a message the channel ignores, a refused one)."""
        await self.gateway.drain()
        sent = self.recorder.replies.get((channel, message_id))
        assert sent is None, f"a reply was sent to {channel} message {message_id}: {sent!r}"
        queued = await self._delivery(channel, message_id)
        assert queued is None, (f"a reply to {channel} message {message_id} is "
                                f"{queued.state}: {queued.text!r}")

    async def _delivery(self, channel: str, message_id: str) -> Delivery | None:
        for delivery in await self.gateway.store.deliveries(limit=10_000):
            if (delivery.channel, delivery.message_id) == (channel, message_id):
                return delivery
        return None

    async def _no_reply(self, channel: str, message_id: str) -> str:
        delivery = await self._delivery(channel, message_id)
        if delivery is None:
            return (f"no reply was queued for {channel} message {message_id}: the gateway "
                    "did not receive it (did the channel await gateway.receive()?), refused "
                    "it, or took it for a redelivery")
        if delivery.state == "failed":
            return (f"the reply to {channel} message {message_id} could not be delivered: "
                    f"{delivery.last_error or 'no reason recorded'}")
        return (f"the reply to {channel} message {message_id} is still pending (retried "
                f"{delivery.attempts} time(s)); the channel's last error: "
                f"{delivery.last_error or 'none'}")


@pytest.fixture
async def cloudybot_fake_llm() -> AsyncIterator[FakeLLM]:
    """An OpenAI-compatible fake LLM server on 127.0.0.1."""
    server = FakeLLM()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def cloudybot_fake_discord() -> AsyncIterator[FakeDiscord]:
    """A fake Discord (REST and Gateway) on 127.0.0.1 that the real discord.py talks to: give
    a gateway ``CLOUDYBOT_DISCORD_API_BASE=fake.api_base`` (see
    :mod:`gateway.testing.discord`)."""
    server = FakeDiscord()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def cloudybot_recorder() -> ReplyRecorder:
    """The plugin that records every reply the test's gateways deliver."""
    return ReplyRecorder()


@pytest.fixture
def cloudybot_plugins(cloudybot_recorder: ReplyRecorder) -> PluginManager:
    """The plugin manager of the gateways ``cloudybot_start`` starts: every installed plugin
    and the reply recorder. Register a test's own plugins (a test double) before starting."""
    pm = make_plugin_manager()
    pm.register(cloudybot_recorder, name="cloudybot-test-recorder")
    return pm


@pytest.fixture
def cloudybot_settings(cloudybot_fake_llm: FakeLLM, cloudybot_plugins: PluginManager,
                       tmp_path: Path) -> Callable[..., Settings]:
    """Settings as ``cloudybot_start`` builds them: ``cloudybot_settings(env, **overrides)``,
    in a temporary data dir, talking to the fake LLM; ``env`` holds variables read as the
    gateway reads the environment, ``overrides`` replace core settings by field name."""
    def build(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        base = load_settings(None, env={
            "CLOUDYBOT_DATA_DIR": str(tmp_path / "cloudybot-data"),
            "CLOUDYBOT_LLM_BASE_URL": cloudybot_fake_llm.url,
            "CLOUDYBOT_LLM_API_KEY": "sk-test",
            "CLOUDYBOT_LLM_MODEL": "fake-model",
            **(env or {}),
        }, plugins=declared_settings(cloudybot_plugins),
            installed=plugin_names(cloudybot_plugins))
        return dataclasses.replace(base, **overrides)
    return build


@pytest.fixture
def cloudybot_start(cloudybot_fake_llm: FakeLLM, aiohttp_client: Any,
                    cloudybot_settings: Callable[..., Settings],
                    cloudybot_plugins: PluginManager,
                    cloudybot_recorder: ReplyRecorder) -> Callable[..., Awaitable[GatewayHarness]]:
    """Start a gateway with all installed plugins, talking to the fake LLM.

    ``env``: variables read as the gateway reads the environment (your plugin's
    ``CLOUDYBOT_{NAME}_{KEY}`` settings, say); ``clock``: the gateway's clock (epoch seconds),
    for tests of time; other keyword arguments override core settings by field name
    (``summarize_at=4``). Call it again to restart on the same data."""
    async def start(env: Mapping[str, str] | None = None, *,
                    clock: Callable[[], float] = time.time,
                    **overrides: Any) -> GatewayHarness:
        gateway = Gateway(cloudybot_settings(env, **overrides), cloudybot_plugins, clock=clock)
        client = await aiohttp_client(await build_app(gateway))
        return GatewayHarness(gateway, client, cloudybot_recorder)
    return start
