"""The whole gateway on PostgreSQL (``CLOUDYBOT_DATABASE_URL``): the HTTP API end to end,
migrations that several processes may run at once, and a lost database answered with 503."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import asyncpg

from gateway.store import Earlier, InboxEntry
from gateway.store.postgres import PostgresStore
from gateway.store.postgres_migrations import MIGRATIONS
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.helpers import assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]


async def test_chat_memory_and_summaries_on_postgresql(
        start_gateway: StartGateway, postgres_url: str, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(database_url=postgres_url, summarize_at=4, keep_recent=2)
    assert isinstance(harness.gateway.store, PostgresStore)
    auth = await harness.user()
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        headers=auth, json={"key": "name", "value": "Ada"})
    assert response.status == 200
    for text in ("one", "two", "three"):
        assert (await harness.chat(auth, text)).status == 200
    await harness.gateway.drain()
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert [m["content"] for m in thread["display_messages"]] == [
        "one", "echo: one", "two", "echo: two", "three", "echo: three"]
    assert thread["summary"].startswith("SUMMARY")
    assert "name: Ada" in fake_llm.chat_requests[-1].system_text
    credits = await (await harness.client.get("/api/user/credits", headers=auth)).json()
    ledger = await harness.gateway.store.ledger("alice")
    assert credits["credits"] == -sum(row.credits for row in ledger)
    listed = await (await harness.client.get("/api/threads", headers=auth)).json()
    assert [t["threadId"] for t in listed["threads"]] == ["t1"]


async def test_processes_starting_together_migrate_once(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    await asyncio.gather(*(store.open() for store in stores))
    try:
        conn = await asyncpg.connect(postgres_url)
        try:
            versions = [row[0] for row in await conn.fetch("SELECT version FROM schema_version")]
        finally:
            await conn.close()
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        await stores[0].create_user("alice", "free", 10, 0)
        assert (await stores[3].get_user("alice")) is not None
    finally:
        await asyncio.gather(*(store.close() for store in stores))


async def test_a_lost_database_connection_is_a_503_and_later_turns_work(
        start_gateway: StartGateway, postgres_url: str) -> None:
    harness = await start_gateway(database_url=postgres_url)
    auth = await harness.user()
    assert (await harness.chat(auth, "before")).status == 200
    admin = await asyncpg.connect(postgres_url)
    try:
        # every connection of the gateway's pool is cut, as a database restart would
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    finally:
        await admin.close()
    first = await harness.chat(auth, "during")
    if first.status != 200:  # the pool may notice the dead connection before using it
        await assert_json_error(first, 503, "unavailable")
    assert (await harness.chat(auth, "after")).status == 200


async def test_a_role_has_one_player_until_it_steps_down_or_dies(postgres_url: str) -> None:
    first, second, third = (PostgresStore(postgres_url) for _ in range(3))
    for store in (first, second, third):
        await store.open()
    try:
        leader = await first.try_lead("telegram-polling")
        assert leader is not None and await leader.alive()
        assert await second.try_lead("telegram-polling") is None
        assert await second.try_lead("another-role") is not None  # roles are apart
        await leader.release()
        assert not await leader.alive()
        taken = await second.try_lead("telegram-polling")
        assert taken is not None
        await second.close()  # its process "dies": the connection goes, the role is free
        assert await third.try_lead("telegram-polling") is not None
    finally:
        for store in (first, second, third):
            await store.close()


async def test_a_live_process_keeps_its_messages_and_a_dead_ones_are_taken_over_once(
        postgres_url: str) -> None:
    first, second, third = (PostgresStore(postgres_url) for _ in range(3))
    for store in (first, second, third):
        await store.open()
    try:
        await first.create_user("alice", "free", 10, 0)
        entry = InboxEntry("telegram", "m1", "alice--t1", "{}", 4096, b"sealed")
        assert await first.inbox_add(entry) is not None
        assert await first.answer_inbox("telegram", "m1", "a reply") is True
        assert await first.inbox_add(InboxEntry("telegram", "m2", "alice--t1", "{}", 4096,
                                                b"sealed")) is not None
        # The first process is alive: its message and its reply are its own.
        assert await second.inbox_pending() == []
        assert await second.pending_deliveries() == []
        await first.close()  # its life lock ends, as a SIGKILL would end it
        taken = await asyncio.gather(second.inbox_pending(), third.inbox_pending())
        assert sorted(len(found) for found in taken) == [0, 1]  # one process takes it
        delivered = await asyncio.gather(second.pending_deliveries(), third.pending_deliveries())
        assert sorted(len(found) for found in delivered) == [0, 1]
        assert await second.inbox_pending() == [] and await third.inbox_pending() == []
    finally:
        for store in (first, second, third):
            await store.close()


async def test_a_message_behind_another_process_s_takes_them_over_once_that_one_dies(
        postgres_url: str) -> None:
    first, second = (PostgresStore(postgres_url) for _ in range(2))
    for store in (first, second):
        await store.open()
    try:
        def message(message_id: str, conversation: str = "telegram:42") -> InboxEntry:
            return InboxEntry("telegram", message_id, conversation, "{}", 4096, b"sealed")

        mine = await first.inbox_add(message("m1"))
        assert mine is not None and not mine.behind_others
        assert await first.inbox_add(message("o1", "telegram:7")) is not None
        later = await second.inbox_add(message("m2"))
        assert later is not None and later.behind_others
        elsewhere = await second.inbox_add(message("x1", "telegram:8"))
        assert elsewhere is not None and not elsewhere.behind_others  # another chat
        position = dataclasses.replace(message("m2"), id=later.id)
        # The first process lives: its message is its own to answer; the second waits.
        assert await second.inbox_take_earlier(position) == Earlier([], 1)
        await first.close()  # it dies
        earlier = await second.inbox_take_earlier(position)
        assert [entry.message_id for entry in earlier.taken] == ["m1"] and not earlier.elsewhere
        assert [e.message_id for e in await second.inbox_pending()] == ["o1"]  # not m1 again
    finally:
        for store in (first, second):
            await store.close()
