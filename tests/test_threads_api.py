"""``/api/threads``: list, read with paging, clear, delete, and ownership (SPEC §2, §3, §7)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.helpers import assert_json_error

AuthHeaders = dict[str, str]


async def chat_ok(harness: Harness, auth: AuthHeaders, message: str, thread: str = "t1") -> None:
    """One successful turn."""
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()


async def get_thread(harness: Harness, auth: AuthHeaders, thread: str = "t1",
                     **query: Any) -> dict[str, Any]:
    response = await harness.client.get(f"/api/threads/{thread}", params=query, headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def list_threads(harness: Harness, auth: AuthHeaders) -> list[dict[str, Any]]:
    response = await harness.client.get("/api/threads", headers=auth)
    assert response.status == 200
    threads: list[dict[str, Any]] = (await response.json())["threads"]
    return threads


async def get_memory(harness: Harness, auth: AuthHeaders, thread: str = "t1") -> dict[str, str]:
    response = await harness.client.get("/api/user/memory", params={"threadId": thread},
                                        headers=auth)
    assert response.status == 200
    memory: dict[str, str] = (await response.json())["memory"]
    return memory


async def pin(harness: Harness, auth: AuthHeaders, key: str, value: str,
              thread: str = "t1") -> None:
    response = await harness.client.put("/api/user/memory", params={"threadId": thread},
                                        json={"key": key, "value": value}, headers=auth)
    assert response.status == 200


def contents(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


async def summarized_thread(harness: Harness, auth: AuthHeaders, turns: int = 5) -> None:
    """Run enough turns on t1 to trigger summarization, and wait for it."""
    for n in range(turns):
        await chat_ok(harness, auth, f"message {n}")
    await harness.gateway.drain()


# --- list --------------------------------------------------------------------------------------
async def test_list_is_empty_for_a_new_user(harness: Harness) -> None:
    auth = await harness.user()
    assert await list_threads(harness, auth) == []


async def test_list_is_most_recent_first_on_the_dashboard_channel(harness: Harness) -> None:
    auth = await harness.user()
    for thread in ("t1", "t2", "t3"):
        await chat_ok(harness, auth, "hi", thread=thread)
    await chat_ok(harness, auth, "again", thread="t1")
    threads = await list_threads(harness, auth)
    assert [t["threadId"] for t in threads] == ["t1", "t3", "t2"]
    assert {t["channel"] for t in threads} == {"dashboard"}
    updated = [t["updatedAt"] for t in threads]
    assert all(isinstance(u, str) and u for u in updated)
    assert updated == sorted(updated, reverse=True)


async def test_list_shows_only_the_callers_threads(harness: Harness) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await chat_ok(harness, alice, "hi", thread="a1")
    await chat_ok(harness, bob, "hi", thread="b1")
    assert [t["threadId"] for t in await list_threads(harness, alice)] == ["a1"]
    assert [t["threadId"] for t in await list_threads(harness, bob)] == ["b1"]


# --- read ----------------------------------------------------------------------------------------
async def test_unknown_thread_is_404(harness: Harness) -> None:
    auth = await harness.user()
    await assert_json_error(await harness.client.get("/api/threads/nope", headers=auth), 404)


async def test_thread_has_summary_messages_and_display_messages(harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hello there")
    thread = await get_thread(harness, auth)
    assert thread["threadId"] == "t1"
    assert thread["summary"] == ""
    assert thread["messages"] == [{"role": "user", "content": "hello there"},
                                  {"role": "assistant", "content": "echo: hello there"}]
    display = thread["display_messages"]
    assert [(m["role"], m["content"]) for m in display] == [
        ("user", "hello there"), ("assistant", "echo: hello there")]


async def test_summarized_thread_keeps_full_display_transcript(harness: Harness,
                                                               fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await summarized_thread(harness, auth)
    assert len(fake_llm.summary_requests) == 1
    thread = await get_thread(harness, auth)
    assert thread["summary"].startswith("SUMMARY[")
    assert len(thread["messages"]) == 5
    assert contents(thread["messages"])[-1] == "echo: message 4"
    display = contents(thread["display_messages"])
    assert display == [text for n in range(5) for text in (f"message {n}", f"echo: message {n}")]


# --- display paging -------------------------------------------------------------------------------
async def test_display_paging_walks_the_whole_transcript_exactly_once(harness: Harness) -> None:
    auth = await harness.user()
    for n in range(6):
        await chat_ok(harness, auth, f"m{n}")
    expected = [text for n in range(6) for text in (f"m{n}", f"echo: m{n}")]

    pages: list[list[dict[str, Any]]] = []
    query: dict[str, Any] = {"limit": 5}
    while True:
        body = await get_thread(harness, auth, **query)
        page = body["display_messages"]
        assert 0 < len(page) <= 5
        pages.append(page)
        if body["nextBefore"] is None:
            break
        query = {"limit": 5, "before": body["nextBefore"]}
        assert len(pages) < 10, "paging does not terminate"

    assert [len(p) for p in pages] == [5, 5, 2]
    walked = [m for page in reversed(pages) for m in page]
    assert contents(walked) == expected
    ids = [m["id"] for m in walked]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for page in pages:
        page_ids = [m["id"] for m in page]
        assert page_ids == sorted(page_ids)


async def test_first_page_is_the_newest_messages_oldest_first(harness: Harness) -> None:
    auth = await harness.user()
    for n in range(3):
        await chat_ok(harness, auth, f"m{n}")
    body = await get_thread(harness, auth, limit=2)
    assert contents(body["display_messages"]) == ["m2", "echo: m2"]
    assert body["nextBefore"] is not None


async def test_page_covering_everything_has_no_next_cursor(harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "only")
    body = await get_thread(harness, auth, limit=2)
    assert contents(body["display_messages"]) == ["only", "echo: only"]
    assert body["nextBefore"] is None


@pytest.mark.parametrize("query", [
    pytest.param({"limit": "0"}, id="limit-zero"),
    pytest.param({"limit": "-1"}, id="limit-negative"),
    pytest.param({"limit": "abc"}, id="limit-text"),
    pytest.param({"limit": "1.5"}, id="limit-float"),
    pytest.param({"limit": ""}, id="limit-empty"),
    pytest.param({"limit": "99999999999999999999999"}, id="limit-huge"),
    pytest.param({"before": "0"}, id="before-zero"),
    pytest.param({"before": "-3"}, id="before-negative"),
    pytest.param({"before": "x"}, id="before-text"),
    pytest.param({"before": ""}, id="before-empty"),
    pytest.param({"before": "99999999999999999999999999"}, id="before-huge"),
])
async def test_invalid_limit_or_before_is_400(harness: Harness, query: dict[str, str]) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hi")
    response = await harness.client.get("/api/threads/t1", params=query, headers=auth)
    await assert_json_error(response, 400)


@pytest.mark.parametrize("value", [pytest.param("1_0", id="underscore"),
                                   pytest.param(" 3", id="leading-space"),
                                   pytest.param("\uff13", id="fullwidth-digit")])
async def test_limit_must_be_plain_ascii_digits(harness: Harness, value: str) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hi")
    response = await harness.client.get("/api/threads/t1", params={"limit": value}, headers=auth)
    await assert_json_error(response, 400)


# --- ownership ----------------------------------------------------------------------------------
ALICE_SECRET = "alice-confidential-plan"


async def alice_thread(harness: Harness) -> tuple[AuthHeaders, AuthHeaders]:
    """Alice has thread t1 with a message and a pinned key; Bob has an account and nothing."""
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await chat_ok(harness, alice, f"my {ALICE_SECRET} is here")
    await pin(harness, alice, "plan", ALICE_SECRET)
    return alice, bob


async def assert_alice_intact(harness: Harness, alice: AuthHeaders) -> None:
    thread = await get_thread(harness, alice)
    assert contents(thread["messages"]) == [f"my {ALICE_SECRET} is here",
                                            f"echo: my {ALICE_SECRET} is here"]
    assert len(thread["display_messages"]) == 2
    assert await get_memory(harness, alice) == {"plan": ALICE_SECRET}


@pytest.mark.parametrize("thread", ["t1", "alice--t1"])
@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/api/threads/{thread}"),
    ("GET", "/api/threads/{thread}?limit=1"),
    ("POST", "/api/threads/{thread}/clear"),
    ("DELETE", "/api/threads/{thread}"),
])
async def test_foreign_thread_is_404_never_content(harness: Harness, method: str, path: str,
                                                   thread: str) -> None:
    alice, bob = await alice_thread(harness)
    response = await harness.client.request(method, path.format(thread=thread), headers=bob)
    text = await response.text()
    await assert_json_error(response, 404)
    for needle in (ALICE_SECRET, "is here", "echo:", "display_messages", "summary"):
        assert needle not in text
    await assert_alice_intact(harness, alice)


@pytest.mark.parametrize("thread", ["t1", "alice--t1"])
async def test_foreign_thread_memory_is_never_alices(harness: Harness, thread: str) -> None:
    alice, bob = await alice_thread(harness)
    client = harness.client
    query = {"threadId": thread}
    got = await client.get("/api/user/memory", params=query, headers=bob)
    assert got.status == 200
    assert ALICE_SECRET not in await got.text()
    assert (await got.json())["memory"] == {}
    await client.put("/api/user/memory", params=query, json={"key": "plan", "value": "bob's"},
                     headers=bob)
    await client.delete("/api/user/memory", params=query, headers=bob)
    await assert_alice_intact(harness, alice)


async def test_bobs_chat_on_the_same_thread_id_never_sees_alices_conversation(
        harness: Harness, fake_llm: FakeLLM) -> None:
    alice, bob = await alice_thread(harness)
    await chat_ok(harness, bob, "what was my plan?")
    request = fake_llm.requests[-1]
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert ALICE_SECRET not in json.dumps(request.body)
    await assert_alice_intact(harness, alice)
    bob_thread = await get_thread(harness, bob)
    assert ALICE_SECRET not in json.dumps(bob_thread)


async def test_lookalike_session_keys_never_share_a_conversation(harness: Harness,
                                                                  fake_llm: FakeLLM) -> None:
    alice = await harness.user("alice")
    # An account made before the user-id rule (straight in the store) must still be fenced off.
    await harness.gateway.store.create_user("alice-", "free", 100, 0)
    mallory = {"Authorization": f"Bearer {await harness.gateway.accounts.issue_token('alice-')}"}
    await chat_ok(harness, alice, f"my {ALICE_SECRET} is here", thread="-t1")
    requests_before = len(fake_llm.requests)
    response = await harness.chat(mallory, "what was said before?", thread="t1")
    assert response.status == 404
    assert ALICE_SECRET not in await response.text()
    assert len(fake_llm.requests) == requests_before
    alice_view = await get_thread(harness, alice, "-t1")
    assert contents(alice_view["messages"]) == [f"my {ALICE_SECRET} is here",
                                                f"echo: my {ALICE_SECRET} is here"]


# --- clear ----------------------------------------------------------------------------------------
async def test_clear_empties_summary_and_messages_keeps_pins_and_display(
        harness: Harness) -> None:
    auth = await harness.user()
    await pin(harness, auth, "colour", "teal")
    await summarized_thread(harness, auth)
    before = await get_thread(harness, auth)
    assert before["summary"] and before["messages"]

    response = await harness.client.post("/api/threads/t1/clear", headers=auth)
    assert response.status == 200

    after = await get_thread(harness, auth)
    assert after["summary"] == ""
    assert after["messages"] == []
    assert after["display_messages"] == before["display_messages"]
    assert await get_memory(harness, auth) == {"colour": "teal"}


async def test_next_prompt_after_clear_has_no_old_messages(harness: Harness,
                                                           fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await pin(harness, auth, "colour", "teal")
    await summarized_thread(harness, auth)
    await harness.client.post("/api/threads/t1/clear", headers=auth)
    await chat_ok(harness, auth, "fresh start")
    request = fake_llm.requests[-1]
    assert request.messages[1:] == [{"role": "user", "content": "fresh start"}]
    assert "SUMMARY[" not in request.system_text
    assert "message 4" not in json.dumps(request.body)
    assert "teal" in request.system_text


async def test_clear_of_an_unknown_thread_is_404(harness: Harness) -> None:
    auth = await harness.user()
    await assert_json_error(await harness.client.post("/api/threads/nope/clear", headers=auth),
                            404)
    assert await list_threads(harness, auth) == []


# --- delete ---------------------------------------------------------------------------------------
async def test_delete_is_204_then_everything_is_gone(harness: Harness) -> None:
    auth = await harness.user()
    await pin(harness, auth, "colour", "teal")
    await chat_ok(harness, auth, "remember this")
    await chat_ok(harness, auth, "other thread", thread="t2")

    response = await harness.client.delete("/api/threads/t1", headers=auth)
    assert response.status == 204
    assert await response.read() == b""

    await assert_json_error(await harness.client.get("/api/threads/t1", headers=auth), 404)
    assert await get_memory(harness, auth) == {}
    assert [t["threadId"] for t in await list_threads(harness, auth)] == ["t2"]
    await assert_json_error(await harness.client.delete("/api/threads/t1", headers=auth), 404)


async def test_chat_after_delete_starts_fresh(harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await pin(harness, auth, "colour", "teal")
    await summarized_thread(harness, auth)
    assert (await harness.client.delete("/api/threads/t1", headers=auth)).status == 204

    await chat_ok(harness, auth, "new beginning")
    request = fake_llm.requests[-1]
    assert request.messages[1:] == [{"role": "user", "content": "new beginning"}]
    assert "teal" not in request.system_text
    assert "SUMMARY[" not in request.system_text
    thread = await get_thread(harness, auth)
    assert thread["summary"] == ""
    assert contents(thread["messages"]) == ["new beginning", "echo: new beginning"]
    assert contents(thread["display_messages"]) == ["new beginning", "echo: new beginning"]


async def test_delete_of_an_unknown_thread_is_404(harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hi")
    await assert_json_error(await harness.client.delete("/api/threads/nope", headers=auth), 404)
    assert [t["threadId"] for t in await list_threads(harness, auth)] == ["t1"]


async def test_the_thread_list_is_paged_newest_first_with_ties_broken(
        start_clocked: Any, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()  # the clock stands still: every thread has one updatedAt
    auth = await harness.user()
    for number in range(7):
        await chat_ok(harness, auth, "hi", thread=f"t{number}")
    seen: list[str] = []
    before: str | None = None
    pages = 0
    while True:
        query = "?limit=3" + (f"&before={before}" if before else "")
        response = await harness.client.get(f"/api/threads{query}", headers=auth)
        assert response.status == 200
        body = await response.json()
        seen += [t["threadId"] for t in body["threads"]]
        pages += 1
        before = body["nextBefore"]
        if before is None:
            break
    assert pages == 3
    assert seen == [f"t{n}" for n in reversed(range(7))]  # newest first, each once


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "limit=x", "before=abc",
                                   "before=2026-01-01T00:00:00Z~x", "before=~1",
                                   "before=2026-01-01T00:00:00Z~" + "9" * 30])
async def test_a_bad_thread_list_page_is_400(harness: Harness, query: str) -> None:
    auth = await harness.user()
    response = await harness.client.get(f"/api/threads?{query}", headers=auth)
    await assert_json_error(response, 400)
