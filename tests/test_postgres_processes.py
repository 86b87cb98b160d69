"""Several ``cloudybot serve`` processes on one PostgreSQL database (SPEC §18): turns of one
thread run one at a time across processes, each stored once; a process killed with SIGKILL
takes its thread locks with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
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


async def test_a_user_hammering_both_processes_overspends_by_one_call_at_most(
        two_processes: list[ServeProcess], fake_llm: FakeLLM) -> None:
    added = await acloudybot(two_processes[0].data_dir, "users", "add", "bob", "--plan", "team",
                             "--credits", "5",
                             CLOUDYBOT_DATABASE_URL=two_processes[0].overrides[
                                 "CLOUDYBOT_DATABASE_URL"])
    assert added.returncode == 0, added.stderr
    headers = {"Authorization": f"Bearer {last_line(added)}"}
    call_cost = 2  # 10 prompt tokens at 1 credit / 1,000 and 500 completion tokens at 3
    fake_llm.responder = lambda request: Scripted(body=completion("ok", 10, 500), delay=0.02)

    async def turn(session: aiohttp.ClientSession, process: ServeProcess, index: int) -> int:
        async with session.post(f"{process.url}/chat",
                                json={"threadId": f"t{index}", "message": "hi"},
                                headers=headers) as response:
            body = await response.json()
            if response.status != 200:
                assert (response.status, body["error"]["code"]) in {
                    (429, "credits_busy"), (402, "out_of_credits")}, body
            return response.status

    async with aiohttp.ClientSession() as session:
        for _ in range(4):  # waves until the credits are spent
            statuses = await asyncio.gather(*(turn(session, two_processes[index % 2], index)
                                              for index in range(30)))
        async with session.get(f"{two_processes[1].url}/api/user/credits",
                               headers=headers) as response:
            balance = (await response.json())["credits"]
    assert statuses.count(200) == 0  # spent: the last wave was refused
    answered = len(fake_llm.chat_requests)
    assert balance == 5 - call_cost * answered
    assert balance >= -call_cost  # never more than one call's overrun


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegramChats]:
    server = FakeTelegramChats(TELEGRAM_TOKEN)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def two_webhook_processes(tmp_path: Path, postgres_url: str, fake_llm: FakeLLM,
                                telegram: FakeTelegramChats,
                                ) -> AsyncIterator[list[ServeProcess]]:
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": SECRET,
           "CLOUDYBOT_LLM_BASE_URL": fake_llm.url, "CLOUDYBOT_LLM_API_KEY": "sk-test",
           "CLOUDYBOT_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
           "CLOUDYBOT_TELEGRAM_API_BASE": telegram.base_url,
           "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
           "CLOUDYBOT_LEADER_RETRY_SECONDS": "0.3"}
    processes = [ServeProcess(tmp_path / f"webhook-{index}", env) for index in range(2)]
    try:
        await asyncio.gather(*(process.start() for process in processes))
        yield processes
    finally:
        for process in processes:
            await process.ensure_stopped()


WEBHOOK_SECRET = "one-webhook-secret"


async def post_update(session: aiohttp.ClientSession, process: ServeProcess,
                      update: dict[str, object]) -> int:
    async with session.post(f"{process.url}/telegram/webhook", json=update,
                            headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}
                            ) as response:
        return response.status


async def test_a_telegram_update_delivered_to_both_processes_is_answered_once(
        two_webhook_processes: list[ServeProcess], telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(post_update(session, process, private_update(9001, "hi"))
                                          for process in two_webhook_processes))
        assert statuses == [200, 200]  # both acknowledge: the update is durable either way
        [sent] = await telegram.wait_for_messages(1, timeout=20)
        assert sent.params["text"] == "echo: hi"
        # A later update is answered too, and the first was not answered twice meanwhile.
        assert await post_update(session, two_webhook_processes[1],
                                 private_update(9002, "next")) == 200
        sent_now = await telegram.wait_for_messages(2, timeout=20)
    assert [call.params["text"] for call in sent_now] == ["echo: hi", "echo: next"]
    assert len(fake_llm.chat_requests) == 2


async def test_the_unanswered_messages_of_a_killed_process_are_taken_over(
        two_webhook_processes: list[ServeProcess], telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    first, second = two_webhook_processes
    held = asyncio.Event()
    fake_llm.script = [Scripted(body=completion("never sent"), release=held)]
    async with aiohttp.ClientSession() as session:
        assert await post_update(session, first, private_update(9101, "take me over")) == 200
        while not fake_llm.chat_requests:  # the first process is answering it
            await asyncio.sleep(0.01)
        await first.kill()
        held.set()
        # The acknowledged update is not lost: the other process finds it orphaned and
        # answers it (within a few CLOUDYBOT_LEADER_RETRY_SECONDS).
        [sent] = await telegram.wait_for_messages(1, timeout=20)
    assert sent.params["text"] == "echo: take me over"
    assert "left unanswered by a stopped run" in second.log.read_text()


def update_in_chat(update_id: int, chat: int, text: str) -> dict[str, object]:
    update = private_update(update_id, text)
    message = update["message"]
    assert isinstance(message, dict)
    message["chat"] = {**message["chat"], "id": chat}
    message["from"] = {**message["from"], "id": chat}
    return update


async def test_a_killed_process_s_messages_are_answered_before_later_ones_of_their_chat(
        two_webhook_processes: list[ServeProcess], telegram: FakeTelegramChats,
        fake_llm: FakeLLM) -> None:
    """Each chat's first message is acknowledged by a process that is then killed mid-turn,
    its second by the other process at once: the taker answers the first before the second."""
    first, second = two_webhook_processes
    chats = range(501, 509)
    held = asyncio.Event()

    def echo(request: Recorded) -> Scripted:
        return Scripted(body=completion(f"echo: {request.messages[-1]['content']}"),
                        release=None if held.is_set() else held)

    fake_llm.responder = echo
    async with aiohttp.ClientSession() as session:
        for chat in chats:
            assert await post_update(session, first, update_in_chat(chat * 10, chat,
                                                                    f"first {chat}")) == 200
        while len(fake_llm.chat_requests) < len(chats):  # each first message is being answered
            await asyncio.sleep(0.01)
        await first.kill()
        held.set()
        for chat in chats:
            assert await post_update(session, second, update_in_chat(chat * 10 + 1, chat,
                                                                     f"second {chat}")) == 200
        sent = await telegram.wait_for_messages(2 * len(chats), timeout=30)
    for chat in chats:
        texts = [call.params["text"] for call in sent
                 if str(call.params["chat_id"]) == str(chat)]
        assert texts == [f"echo: first {chat}", f"echo: second {chat}"]
