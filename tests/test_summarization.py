"""Rolling memory: summarize at SUMMARIZE_AT, keep KEEP_RECENT, never lose or corrupt anything."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import until


async def _thread(harness: Harness, auth: dict[str, str], thread: str = "t1") -> Any:
    response = await harness.client.get(f"/api/threads/{thread}?limit=500", headers=auth)
    assert response.status == 200
    return await response.json()


async def _turns(harness: Harness, auth: dict[str, str], count: int, start: int = 0) -> list:
    bodies = []
    for i in range(start, start + count):
        response = await harness.chat(auth, f"m{i}")
        assert response.status == 200
        bodies.append(await response.json())
    return bodies


async def test_summarizes_at_ten_keeps_five(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    bodies = await _turns(harness, auth, 5)
    assert [b["summarized"] for b in bodies] == [False, False, False, False, True]
    await harness.gateway.drain()

    thread = await _thread(harness, auth)
    assert len(thread["messages"]) == 5
    assert thread["summary"].startswith("SUMMARY[")
    assert [m["content"] for m in thread["messages"]] == [
        "echo: m2", "m3", "echo: m3", "m4", "echo: m4"]
    assert len(thread["display_messages"]) == 10  # the display transcript stays complete

    # only the folded entries (the oldest five) and the empty old summary went to the model
    [request] = fake_llm.summary_requests
    data = request.messages[-1]["content"]
    assert "<previous_summary></previous_summary>" in data
    for folded in ("m0", "echo: m0", "m1", "echo: m1", "m2"):
        assert f">{folded}</message>" in data
    for kept in ("echo: m2", "m3", "m4"):
        assert f">{kept}</message>" not in data

    await harness.chat(auth, "next")
    assert thread["summary"] in fake_llm.chat_requests[-1].system_text


async def test_second_summary_folds_old_summary_and_new_entries_only(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await _turns(harness, auth, 5)
    await harness.gateway.drain()
    first = (await _thread(harness, auth))["summary"]
    bodies = await _turns(harness, auth, 3, start=5)  # 5 kept + 6 new = 11 -> summarize again
    assert [b["summarized"] for b in bodies] == [False, False, True]
    await harness.gateway.drain()
    assert len(fake_llm.summary_requests) == 2
    data = fake_llm.summary_requests[-1].messages[-1]["content"]
    assert f"<previous_summary>{first}</previous_summary>" in data
    assert ">m0</message>" not in data  # already folded the first time
    assert ">echo: m2</message>" in data
    thread = await _thread(harness, auth)
    assert len(thread["messages"]) == 5
    assert len(thread["display_messages"]) == 16


async def test_summarization_is_charged_as_its_own_ledger_entry(harness: Harness) -> None:
    auth = await harness.user()
    bodies = await _turns(harness, auth, 5)
    await harness.gateway.drain()
    ledger = await harness.gateway.store.ledger("alice")
    kinds = [row.kind for row in ledger]
    assert kinds == ["grant", "chat", "chat", "chat", "chat", "chat", "summarize"]
    assert all(b["usage"]["credits"] == ledger[1].credits for b in bodies)
    credits = (await (await harness.client.get("/api/user/credits", headers=auth)).json())
    assert credits["credits"] == -sum(row.credits for row in ledger)


async def test_failed_summarization_changes_nothing_and_is_retried(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await _turns(harness, auth, 4)
    fake_llm.script = [Scripted(body=completion("echo: m4")),
                       Scripted(status=400, body={"error": {"message": "nope"}})]
    await _turns(harness, auth, 1, start=4)
    await harness.gateway.drain()
    thread = await _thread(harness, auth)
    assert thread["summary"] == ""
    assert len(thread["messages"]) == 10
    kinds = [row.kind for row in await harness.gateway.store.ledger("alice")]
    assert "summarize" not in kinds

    body = (await _turns(harness, auth, 1, start=5))[0]
    assert body["summarized"] is True
    await harness.gateway.drain()
    thread = await _thread(harness, auth)
    assert thread["summary"].startswith("SUMMARY[")
    assert len(thread["messages"]) == 5


async def test_empty_or_error_summary_is_never_stored(harness: Harness,
                                                      fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await _turns(harness, auth, 4)
    for bad in ("   ", "Error generating summary: rate limit"):
        fake_llm.script = [Scripted(body=completion("echo")), Scripted(body=completion(bad))]
        await harness.chat(auth, "again")
        await harness.gateway.drain()
        thread = await _thread(harness, auth)
        assert thread["summary"] == ""
    assert len(thread["messages"]) == 12


async def test_next_turn_waits_for_summarization_and_sees_it(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await _turns(harness, auth, 4)
    answers = iter([Scripted(body=completion("echo: m4")),
                    Scripted(body=completion("SLOW SUMMARY"), delay=0.3),
                    Scripted(body=completion("echo: m5"))])
    fake_llm.responder = lambda request: next(answers)
    body = (await _turns(harness, auth, 1, start=4))[0]
    assert body["summarized"] is True
    # No drain: the summarization is still running and holds the thread's lock.
    await harness.chat(auth, "m5")
    assert "SLOW SUMMARY" in fake_llm.chat_requests[-1].system_text
    assert fake_llm.requests[-1].messages[-1]["content"] == "m5"


async def test_thirty_concurrent_turns_on_one_thread_are_serialized(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user(plan="team", credits=100_000)  # team: no rate limit
    responses = await asyncio.gather(*(harness.chat(auth, f"c{i}") for i in range(30)))
    assert all(r.status == 200 for r in responses)
    replies = {(await r.json())["reply"] for r in responses}
    assert replies == {f"echo: c{i}" for i in range(30)}
    await harness.gateway.drain()

    thread = await _thread(harness, auth)
    display = [(m["role"], m["content"]) for m in thread["display_messages"]]
    assert len(display) == 60
    users = [content for role, content in display if role == "user"]
    assert sorted(users) == sorted(f"c{i}" for i in range(30))  # each stored exactly once
    for (role, content), (next_role, reply) in zip(display[::2], display[1::2], strict=True):
        assert (role, next_role) == ("user", "assistant")
        assert reply == f"echo: {content}"  # each reply right after its message
    # rolling memory is the tail of the transcript, after the last summarization
    recent = [(m["role"], m["content"]) for m in thread["messages"]]
    assert 5 <= len(recent) < 10
    assert display[-len(recent):] == recent
    assert thread["summary"]
    # every chat request saw a consistent history: ends with its own message only once
    for request in fake_llm.chat_requests:
        contents = [m["content"] for m in request.messages[1:]]
        assert len(contents) == len(set(contents))


async def test_different_threads_run_in_parallel(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()

    release = asyncio.Event()

    def responder(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"),
                        release=release if text == "slow" else None)

    fake_llm.responder = responder
    slow = asyncio.ensure_future(harness.chat(auth, "slow", thread="a"))
    await until(lambda: len(fake_llm.chat_requests) == 1)
    assert (await harness.chat(auth, "fast", thread="b")).status == 200  # while "slow" waits
    assert not slow.done()
    release.set()
    assert (await slow).status == 200
