"""A webhook event committed is delivered, whatever kills the gateway: real ``cloudybot serve``
processes killed with SIGKILL mid-delivery, then started again (SQLite), or left to another
process that takes their deliveries over (PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.testing.fake_llm import FakeLLM
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.process import ServeProcess
from tests.test_cli import acloudybot, last_line
from tests.test_crash_recovery import processes  # noqa: F401 (a fixture)

SECRET = "one-secret-key-for-every-process"


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    await server.close()


def child_env(fake_llm: FakeLLM, **extra: str) -> dict[str, str]:
    return {"CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
            "CLOUDYBOT_SECRET_KEY": SECRET, "CLOUDYBOT_WEBHOOKS_ALLOW_PRIVATE": "true",
            "CLOUDYBOT_WEBHOOKS_RETRY_SECONDS": "0.05", **extra}


async def token_for(process: ServeProcess, user_id: str) -> dict[str, str]:
    database = process.overrides.get("CLOUDYBOT_DATABASE_URL")
    added = await acloudybot(process.data_dir, "users", "add", user_id,
                             **({"CLOUDYBOT_DATABASE_URL": database} if database else {}))
    assert added.returncode == 0, added.stderr
    return {"Authorization": f"Bearer {last_line(added)}"}


async def post(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
               body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url, json=body, headers=headers) as response:
        assert response.status in (200, 201), await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


async def test_a_delivery_cut_by_sigkill_arrives_after_restart_with_its_webhook_id(
        tmp_path: Path, fake_llm: FakeLLM, receiver: WebhookReceiver,
        processes: list[ServeProcess]) -> None:  # noqa: F811
    first = ServeProcess(tmp_path / "data", child_env(fake_llm))
    processes.append(first)
    headers = await token_for(first, "alice")
    await first.start()
    receiver.hold.clear()  # the endpoint takes the first attempt and never answers it
    async with aiohttp.ClientSession() as session:
        created = await post(session, f"{first.url}/api/webhooks", headers,
                             {"url": await receiver.start(), "events": ["message.created"]})
        receiver.secret = created["secret"]
        await post(session, f"{first.url}/chat", headers,
                   {"threadId": "t1", "message": "survive this"})
        cut = await receiver.next()
        await first.kill()  # with the attempt in flight: nothing recorded it

        receiver.hold.set()
        second = first.again()
        processes.append(second)
        await second.start()
        again = await receiver.next(timeout=30)
        for _ in range(200):  # the outcome is recorded a moment after the answer
            async with session.get(f"{second.url}/api/webhooks/{created['id']}/deliveries",
                                   headers=headers) as response:
                logged = (await response.json())["deliveries"]
            if logged[0]["status"] == "delivered":
                break
            await asyncio.sleep(0.05)  # a bounded poll of the child's delivery log

    assert cut.verified and again.verified
    assert again.webhook_id == cut.webhook_id
    assert again.event is not None and again.event["data"]["reply"] == "echo: survive this"
    assert [(d["id"], d["status"]) for d in logged] == [(cut.webhook_id, "delivered")]


async def test_a_dead_process_s_deliveries_are_taken_over_by_another(
        tmp_path: Path, postgres_url: str, fake_llm: FakeLLM, receiver: WebhookReceiver,
        processes: list[ServeProcess]) -> None:  # noqa: F811
    env = child_env(fake_llm, CLOUDYBOT_DATABASE_URL=postgres_url,
                    CLOUDYBOT_LEADER_RETRY_SECONDS="0.2")
    dying, surviving = (ServeProcess(tmp_path / f"gateway-{n}", env) for n in range(2))
    processes += [dying, surviving]
    await dying.start()
    await surviving.start()
    headers = await token_for(dying, "alice")
    receiver.hold.clear()
    async with aiohttp.ClientSession() as session:
        created = await post(session, f"{dying.url}/api/webhooks", headers,
                             {"url": await receiver.start(), "events": ["message.created"]})
        receiver.secret = created["secret"]
        await post(session, f"{dying.url}/chat", headers,
                   {"threadId": "t1", "message": "carry on"})
        cut = await receiver.next()
        await dying.kill()
        receiver.hold.set()
        again = await receiver.next(timeout=30)  # from the surviving process, which took it

    assert again.webhook_id == cut.webhook_id and again.verified
    assert again.event is not None and again.event["data"]["reply"] == "echo: carry on"
