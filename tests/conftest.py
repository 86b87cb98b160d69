"""Shared fixtures: a fake LLM on loopback, settings in a temp dir, a running gateway."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway import Gateway
from gateway.app import build_app
from gateway.config import Settings, load_settings
from gateway.plugins import PluginManager, make_plugin_manager
from gateway.testing.fake_llm import FakeLLM

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                   "all_proxy")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback fakes must be reached directly (slack_sdk ignores NO_PROXY)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    server = FakeLLM()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
def make_settings(tmp_path: Path, fake_llm: FakeLLM) -> Callable[..., Settings]:
    """Settings in a temp data dir, talking to the fake LLM; keyword arguments override."""
    def make(**overrides: Any) -> Settings:
        base = load_settings(None, env={
            "CLOUDYBOT_DATA_DIR": str(tmp_path / "data"),
            "CLOUDYBOT_LLM_BASE_URL": fake_llm.url,
            "CLOUDYBOT_LLM_API_KEY": "sk-test-key",
            "CLOUDYBOT_LLM_MODEL": "fake-model",
            "CLOUDYBOT_LLM_TIMEOUT_SECONDS": "5",
        })
        return dataclasses.replace(base, **overrides)
    return make


@pytest.fixture
def pm() -> PluginManager:
    """A fresh plugin manager with the installed plugins; tests may register more."""
    return make_plugin_manager()


@dataclasses.dataclass
class Harness:
    """A running gateway behind a test client, with helpers to make accounts and chat."""

    gateway: Gateway
    client: TestClient

    async def user(self, user_id: str = "alice", **kwargs: Any) -> dict[str, str]:
        """Create an account; return its Authorization header."""
        _, token = await self.gateway.add_user(user_id, **kwargs)
        return {"Authorization": f"Bearer {token}"}

    async def chat(self, headers: dict[str, str], message: str, thread: str = "t1",
                   **extra: Any) -> Any:
        response = await self.client.post(
            "/chat", json={"threadId": thread, "message": message, **extra}, headers=headers)
        return response


@pytest.fixture
def start_gateway(fake_llm: FakeLLM, aiohttp_client: Any,
                  make_settings: Callable[..., Settings],
                  pm: PluginManager) -> Callable[..., Awaitable[Harness]]:
    """Start a gateway (settings overridable) and return a Harness.

    ``fake_llm`` comes first so that it is torn down last: the gateway stops (and drains its
    background summarizations) while the fake can still answer.
    """
    async def start(**overrides: Any) -> Harness:
        gateway = Gateway(make_settings(**overrides), pm)
        client = await aiohttp_client(await build_app(gateway))
        return Harness(gateway, client)
    return start


@pytest.fixture
async def harness(start_gateway: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway with default settings on the fake LLM."""
    return await start_gateway()
