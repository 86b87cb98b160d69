"""``/api/user/memory``: a thread's pinned keys (SPEC §2, §3, §7)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientResponse

from gateway.base.errors import BadRequest
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.helpers import assert_json_error

AuthHeaders = dict[str, str]
MEMORY = "/api/user/memory"


async def get_memory(harness: Harness, auth: AuthHeaders, thread: str = "t1") -> dict[str, str]:
    """GET the thread's memory, checking the answer's shape."""
    response = await harness.client.get(MEMORY, params={"threadId": thread}, headers=auth)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["threadId"] == thread
    memory: dict[str, str] = body["memory"]
    return memory


async def put_memory(harness: Harness, auth: AuthHeaders, key: Any, value: Any,
                     thread: str = "t1") -> ClientResponse:
    return await harness.client.put(MEMORY, params={"threadId": thread},
                                    json={"key": key, "value": value}, headers=auth)


# --- reading, writing, deleting -------------------------------------------------------------
async def test_unused_thread_has_empty_memory_but_no_thread(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.get(MEMORY, params={"threadId": "fresh"}, headers=auth)
    assert response.status == 200
    assert await response.json() == {"threadId": "fresh", "memory": {}}
    await assert_json_error(await harness.client.get("/api/threads/fresh", headers=auth), 404)


async def test_reading_memory_of_an_unused_thread_creates_nothing(harness: Harness) -> None:
    auth = await harness.user()
    assert await get_memory(harness, auth, "fresh") == {}
    listed = await (await harness.client.get("/api/threads", headers=auth)).json()
    assert listed["threads"] == []


async def test_put_answers_whole_memory_and_get_returns_it(harness: Harness) -> None:
    auth = await harness.user()
    first = await put_memory(harness, auth, "name", "Alice")
    assert first.status == 200
    assert await first.json() == {"threadId": "t1", "memory": {"name": "Alice"}}
    second = await put_memory(harness, auth, "city", "Lyon")
    assert await second.json() == {"threadId": "t1", "memory": {"name": "Alice", "city": "Lyon"}}
    assert await get_memory(harness, auth) == {"name": "Alice", "city": "Lyon"}


async def test_put_overwrites_an_existing_key(harness: Harness) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "city", "Lyon")
    response = await put_memory(harness, auth, "city", "Oslo")
    assert response.status == 200
    assert (await response.json())["memory"] == {"city": "Oslo"}
    assert await get_memory(harness, auth) == {"city": "Oslo"}


async def test_delete_with_key_removes_only_that_key(harness: Harness) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "a", "1")
    await put_memory(harness, auth, "b", "2")
    response = await harness.client.delete(MEMORY, params={"threadId": "t1", "key": "a"},
                                           headers=auth)
    assert response.status == 200
    assert await response.json() == {"threadId": "t1", "memory": {"b": "2"}}
    assert await get_memory(harness, auth) == {"b": "2"}


async def test_delete_without_key_removes_every_key_of_the_thread(harness: Harness) -> None:
    auth = await harness.user()
    for key in ("a", "b", "c"):
        await put_memory(harness, auth, key, key.upper())
    await put_memory(harness, auth, "other", "stays", thread="t2")
    response = await harness.client.delete(MEMORY, params={"threadId": "t1"}, headers=auth)
    assert response.status == 200
    assert await response.json() == {"threadId": "t1", "memory": {}}
    assert await get_memory(harness, auth) == {}
    assert await get_memory(harness, auth, "t2") == {"other": "stays"}


async def test_delete_on_an_unused_thread_is_empty_memory(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.delete(MEMORY, params={"threadId": "never"}, headers=auth)
    assert response.status == 200
    assert await response.json() == {"threadId": "never", "memory": {}}


# --- validation -------------------------------------------------------------------------------
async def test_key_of_64_chars_and_value_of_2000_chars_are_accepted(harness: Harness) -> None:
    auth = await harness.user()
    key, value = "k" * 64, "v" * 2000
    response = await put_memory(harness, auth, key, value)
    assert response.status == 200, await response.text()
    assert await get_memory(harness, auth) == {key: value}


async def test_key_with_every_allowed_character_class_is_accepted(harness: Harness) -> None:
    auth = await harness.user()
    response = await put_memory(harness, auth, "Az09_.-", "ok")
    assert response.status == 200
    assert await get_memory(harness, auth) == {"Az09_.-": "ok"}


BAD_KEYS: list[Any] = [
    pytest.param("k" * 65, id="65-chars"),
    pytest.param("", id="empty"),
    pytest.param("a b", id="space"),
    pytest.param("a/b", id="slash"),
    pytest.param("a:b", id="colon"),
    pytest.param("ключ", id="non-ascii"),
    pytest.param("k\x00", id="nul"),
    pytest.param("k\n", id="trailing-newline"),
    pytest.param(5, id="int"),
    pytest.param(None, id="null"),
    pytest.param(["k"], id="list"),
]


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_bad_key_is_400_and_stores_nothing(harness: Harness, key: Any) -> None:
    auth = await harness.user()
    await assert_json_error(await put_memory(harness, auth, key, "value"), 400)
    assert await get_memory(harness, auth) == {}


BAD_VALUES: list[Any] = [
    pytest.param("v" * 2001, id="2001-chars"),
    pytest.param(5, id="int"),
    pytest.param(1.5, id="float"),
    pytest.param(True, id="bool"),
    pytest.param(None, id="null"),
    pytest.param(["v"], id="list"),
    pytest.param({"v": "w"}, id="object"),
]


@pytest.mark.parametrize("value", BAD_VALUES)
async def test_bad_value_is_400_and_stores_nothing(harness: Harness, value: Any) -> None:
    auth = await harness.user()
    await assert_json_error(await put_memory(harness, auth, "key", value), 400)
    assert await get_memory(harness, auth) == {}


async def test_bad_value_does_not_overwrite_the_stored_one(harness: Harness) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "key", "good")
    await assert_json_error(await put_memory(harness, auth, "key", "v" * 2001), 400)
    assert await get_memory(harness, auth) == {"key": "good"}


@pytest.mark.parametrize("body", [
    pytest.param(b"", id="empty"), pytest.param(b"{", id="truncated"),
    pytest.param(b'["key", "value"]', id="array"), pytest.param(b'"value"', id="string"),
    pytest.param(b'{"value": "v"}', id="no-key"), pytest.param(b'{"key": "k"}', id="no-value"),
])
async def test_put_with_a_bad_body_is_400(harness: Harness, body: bytes) -> None:
    auth = await harness.user()
    response = await harness.client.put(MEMORY, params={"threadId": "t1"}, data=body,
                                        headers={**auth, "Content-Type": "application/json"})
    await assert_json_error(response, 400)
    assert await get_memory(harness, auth) == {}


async def test_delete_with_a_bad_key_is_400_and_deletes_nothing(harness: Harness) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "keep", "me")
    for key in ("", "a b", "k" * 65, "a/b"):
        response = await harness.client.delete(MEMORY, params={"threadId": "t1", "key": key},
                                               headers=auth)
        await assert_json_error(response, 400)
    assert await get_memory(harness, auth) == {"keep": "me"}


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_missing_thread_id_is_400(harness: Harness, method: str) -> None:
    auth = await harness.user()
    body = {"key": "k", "value": "v"} if method == "PUT" else None
    response = await harness.client.request(method, MEMORY, json=body, headers=auth)
    await assert_json_error(response, 400)
    listed = await (await harness.client.get("/api/threads", headers=auth)).json()
    assert listed["threads"] == []


# --- scope: per thread and per user -------------------------------------------------------------
async def test_memory_is_per_thread(harness: Harness) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "colour", "teal", thread="t1")
    await put_memory(harness, auth, "size", "large", thread="t2")
    assert await get_memory(harness, auth, "t1") == {"colour": "teal"}
    assert await get_memory(harness, auth, "t2") == {"size": "large"}


async def test_memory_is_per_user(harness: Harness) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await put_memory(harness, alice, "secret", "alice-only")
    assert await get_memory(harness, bob) == {}
    await put_memory(harness, bob, "secret", "bob-only")
    assert await get_memory(harness, alice) == {"secret": "alice-only"}
    assert await get_memory(harness, bob) == {"secret": "bob-only"}
    await harness.client.delete(MEMORY, params={"threadId": "t1"}, headers=bob)
    assert await get_memory(harness, alice) == {"secret": "alice-only"}


async def test_memory_of_another_users_session_key_is_not_theirs(harness: Harness) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await put_memory(harness, alice, "secret", "alice-only")
    assert await get_memory(harness, bob, "alice--t1") == {}


async def test_user_ids_that_would_make_session_keys_ambiguous_are_refused(
        harness: Harness) -> None:
    # 'alice-' + '--' + 't1' would be the key of alice's thread '-t1'.
    for bad in ("alice-", "a--b"):
        with pytest.raises(BadRequest):
            await harness.gateway.accounts.add_user(bad)


async def test_memory_never_crosses_users_whose_session_keys_look_alike(
        harness: Harness) -> None:
    alice = await harness.user("alice")
    # An account made before the user-id rule (straight in the store) must still be fenced off.
    await harness.gateway.store.create_user("alice-", "free", 100, 0)
    mallory = {"Authorization": f"Bearer {await harness.gateway.accounts.issue_token('alice-')}"}
    assert (await put_memory(harness, alice, "secret", "alice-only", thread="-t1")).status == 200
    response = await harness.client.get(MEMORY, params={"threadId": "t1"}, headers=mallory)
    assert response.status == 404
    assert "alice-only" not in await response.text()
    assert (await put_memory(harness, mallory, "secret", "overwritten", thread="t1")).status == 404
    assert await get_memory(harness, alice, "-t1") == {"secret": "alice-only"}


# --- pinned keys in the prompt ----------------------------------------------------------------
async def test_pinned_keys_reach_the_next_prompts_system_message(harness: Harness,
                                                                 fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "favourite_colour", "teal")
    await put_memory(harness, auth, "pet.name", "Biscuit")
    assert (await harness.chat(auth, "what do you know?")).status == 200
    request = fake_llm.requests[-1]
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert "favourite_colour" in request.system_text
    assert "teal" in request.system_text
    assert "pet.name" in request.system_text
    assert "Biscuit" in request.system_text
    assert "teal" not in request.messages[-1]["content"]


async def test_pinned_keys_of_one_thread_stay_out_of_another_threads_prompt(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "favourite_colour", "teal", thread="t1")
    assert (await harness.chat(auth, "hi", thread="t2")).status == 200
    assert "teal" not in json.dumps(fake_llm.requests[-1].body)


async def test_deleted_and_overwritten_keys_change_the_next_prompt(harness: Harness,
                                                                   fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await put_memory(harness, auth, "city", "Lyon")
    await put_memory(harness, auth, "gone", "forgotten-fact")
    assert (await harness.chat(auth, "one")).status == 200
    assert "forgotten-fact" in fake_llm.requests[-1].system_text
    await put_memory(harness, auth, "city", "Oslo")
    await harness.client.delete(MEMORY, params={"threadId": "t1", "key": "gone"}, headers=auth)
    assert (await harness.chat(auth, "two")).status == 200
    system_text = fake_llm.requests[-1].system_text
    assert "Oslo" in system_text
    assert "Lyon" not in system_text
    assert "forgotten-fact" not in system_text


async def test_other_users_pinned_keys_never_reach_the_prompt(harness: Harness,
                                                              fake_llm: FakeLLM) -> None:
    alice = await harness.user("alice")
    bob = await harness.user("bob")
    await put_memory(harness, alice, "secret", "alice-private-fact")
    assert (await harness.chat(bob, "hi")).status == 200
    assert "alice-private-fact" not in json.dumps(fake_llm.requests[-1].body)


# --- the too-many-keys limit ------------------------------------------------------------------
async def test_too_many_keys_is_400_and_keeps_the_existing_keys(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(max_pinned_keys=3)
    auth = await harness.user()
    for key in ("a", "b", "c"):
        assert (await put_memory(harness, auth, key, key)).status == 200
    await assert_json_error(await put_memory(harness, auth, "d", "d"), 400)
    assert await get_memory(harness, auth) == {"a": "a", "b": "b", "c": "c"}


async def test_overwriting_a_key_at_the_limit_is_allowed(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(max_pinned_keys=3)
    auth = await harness.user()
    for key in ("a", "b", "c"):
        await put_memory(harness, auth, key, key)
    response = await put_memory(harness, auth, "b", "B2")
    assert response.status == 200
    assert (await response.json())["memory"] == {"a": "a", "b": "B2", "c": "c"}


async def test_key_limit_is_per_thread_and_frees_up_after_delete(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(max_pinned_keys=3)
    auth = await harness.user()
    for key in ("a", "b", "c"):
        await put_memory(harness, auth, key, key)
    assert (await put_memory(harness, auth, "d", "d", thread="t2")).status == 200
    await harness.client.delete(MEMORY, params={"threadId": "t1", "key": "a"}, headers=auth)
    assert (await put_memory(harness, auth, "d", "d")).status == 200
    assert await get_memory(harness, auth) == {"b": "b", "c": "c", "d": "d"}
