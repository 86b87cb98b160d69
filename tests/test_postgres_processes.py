"""Several ``cloudybot serve`` processes on one PostgreSQL database (SPEC §18): turns of one
thread run one at a time across processes, each stored once; a process killed with SIGKILL
takes its thread locks with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.telegram import TOKEN as TELEGRAM_TOKEN
from gateway.testing.telegram import FakeTelegramChats
from tests.process import ServeProcess
from tests.test_cli import acloudybot, last_line

SECRET = "one-secret-key-for-every-process"


@pytest.fixture
async def two_processes(tmp_path: Path, postgres_url: str,
                        fake_llm: FakeLLM) -> AsyncIterator[list[ServeProcess]]:
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": SECRET,
           "CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
           "SUMMARIZE_AT": "1000"}
    processes = [ServeProcess(tmp_path / f"gateway-{index}", env) for index in range(2)]
    try:
        await asyncio.gather(*(process.start() for process in processes))  # migrate together
        yield processes
    finally:
        for process in processes:
            await process.ensure_stopped()


async def token_for(process: ServeProcess, user_id: str) -> str:
    added = await acloudybot(process.data_dir, "users", "add", user_id, "--plan", "team",
                             CLOUDYBOT_DATABASE_URL=process.overrides["CLOUDYBOT_DATABASE_URL"])
    assert added.returncode == 0, added.stderr
    return last_line(added)


async def test_turns_of_one_thread_run_one_at_a_time_across_processes(
        two_processes: list[ServeProcess], fake_llm: FakeLLM) -> None:
    token = await token_for(two_processes[0], "alice")
    headers = {"Authorization": f"Bearer {token}"}
    # Each answer takes a moment: unserialized turns would overlap and miss each other.
    fake_llm.responder = lambda request: Scripted(
        body=completion(f"echo: {request.messages[-1]['content']}"), delay=0.01)

    async def turn(session: aiohttp.ClientSession, process: ServeProcess, index: int) -> None:
        async with session.post(f"{process.url}/chat",
                                json={"threadId": "shared", "message": f"m{index:02d}"},
                                headers=headers) as response:
            assert response.status == 200, await response.text()

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(turn(session, two_processes[index % 2], index)
                               for index in range(50)))
        async with session.get(f"{two_processes[1].url}/api/threads/shared",
                               params={"limit": "500"}, headers=headers) as response:
            thread = await response.json()
    # Every turn saw every turn before it (system message, history, the new message): none
    # ran beside another, whichever process served it.
    assert sorted(len(r.messages) for r in fake_llm.chat_requests) == [
        2 + 2 * index for index in range(50)]
    contents = [m["content"] for m in thread["display_messages"]]
    assert [m["role"] for m in thread["display_messages"]] == ["user", "assistant"] * 50
    assert all(answer == f"echo: {question}"
               for question, answer in zip(contents[::2], contents[1::2], strict=True))
    assert sorted(contents[::2]) == [f"m{index:02d}" for index in range(50)]


async def test_a_killed_process_takes_its_thread_locks_with_it(
        two_processes: list[ServeProcess], fake_llm: FakeLLM) -> None:
    token = await token_for(two_processes[0], "alice")
    headers = {"Authorization": f"Bearer {token}"}
    held = asyncio.Event()
    fake_llm.script = [Scripted(body=completion("never sent"), release=held)]
    async with aiohttp.ClientSession() as session:
        stuck = asyncio.ensure_future(session.post(
            f"{two_processes[0].url}/chat", json={"threadId": "t", "message": "first"},
            headers=headers))
        while not fake_llm.chat_requests:  # the first process holds the thread's lock now
            await asyncio.sleep(0.01)
        await two_processes[0].kill()
        held.set()
        with pytest.raises(aiohttp.ClientError):
            await stuck
        async with session.post(f"{two_processes[1].url}/chat",
                                json={"threadId": "t", "message": "second"},
                                headers=headers) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["reply"] == "echo: second"


def polling_line(process: ServeProcess) -> bool:
    return "this process long-polls the Bot API" in process.log.read_text()


async def test_one_process_long_polls_telegram_and_another_takes_over(
        tmp_path: Path, postgres_url: str, fake_llm: FakeLLM) -> None:
    telegram = FakeTelegramChats(TELEGRAM_TOKEN)
    await telegram.start()
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": SECRET,
           "CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
           "CLOUDYBOT_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
           "CLOUDYBOT_TELEGRAM_API_BASE": telegram.base_url,
           "CLOUDYBOT_LEADER_RETRY_SECONDS": "0.3"}
    processes = [ServeProcess(tmp_path / f"poller-{index}", env) for index in range(2)]
    try:
        await asyncio.gather(*(process.start() for process in processes))
        await telegram.updates.put(private_update(8001, "first"))
        [first] = await telegram.wait_for_messages(1, timeout=20)
        assert first.params["text"] == "echo: first"
        while telegram.polls < 20:  # long enough for two pollers to have overlapped
            await asyncio.sleep(0.05)
        assert telegram.most_concurrent_polls == 1
        leaders = [process for process in processes if polling_line(process)]
        assert len(leaders) == 1
        [other] = [process for process in processes if process is not leaders[0]]

        await leaders[0].kill()
        await telegram.updates.put(private_update(8002, "second"))
        sent = await telegram.wait_for_messages(2, timeout=30)  # the takeover bound
        assert [call.params["text"] for call in sent] == ["echo: first", "echo: second"]
        assert polling_line(other)
    finally:
        for process in processes:
            await process.ensure_stopped()
        await telegram.close()


def private_update(update_id: int, text: str) -> dict[str, object]:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1767225600, "text": text,
        "chat": {"id": 42, "type": "private", "first_name": "Ada"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ada"}}}
