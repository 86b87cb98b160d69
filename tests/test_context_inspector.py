"""``GET /api/threads/{threadId}/context`` (SPEC §13): the next turn's prompt layer by layer, from
the same assembly code a turn uses, with tokens against MAX_CONTEXT and recent messages kept or
dropped; saved passwords shown as ``[hidden]``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway import PromptSection, TurnContext, hookimpl
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]
PASSWORD = "Hunter2-Pässwörd"


async def context(harness: Harness, auth: dict[str, str], thread: str = "t1",
                  **query: str) -> dict[str, Any]:
    response = await harness.client.get(f"/api/threads/{thread}/context", headers=auth,
                                        params=query)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def names(body: dict[str, Any]) -> list[str]:
    return [layer["name"] for layer in body["layers"]]


def system_of(body: dict[str, Any]) -> str:
    return "\n\n".join(layer["text"] for layer in body["layers"] if layer["name"] != "recent")


async def test_a_new_thread_shows_only_the_base_layer(harness: Harness) -> None:
    auth = await harness.user()
    body = await context(harness, auth, "fresh")
    assert body["threadId"] == "fresh"
    assert names(body) == ["base"]
    assert body["recent"] == {"kept": 0, "dropped": 0}
    assert body["maxContext"] == harness.gateway.settings.max_context
    assert body["totalTokens"] > body["layers"][0]["tokens"] > 0


async def test_layers_come_in_prompt_order_and_are_what_the_next_turn_sends(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    for text in ("first", "second"):
        assert (await harness.chat(auth, text)).status == 200
    await harness.client.put("/api/user/memory", params={"threadId": "t1"}, headers=auth,
                             json={"key": "name", "value": "Ada"})
    await harness.client.put("/api/specialists/chef", headers=auth,
                             json={"instructions": "Answer as a chef."})
    body = await context(harness, auth, specialist="chef")
    assert names(body) == ["base", "pinned", "specialist", "recent"]
    count = harness.gateway.counter.count
    for layer in body["layers"][:-1]:
        assert layer["tokens"] == count(layer["text"])
    assert "name: Ada" in body["layers"][1]["text"]
    assert body["recent"] == {"kept": 4, "dropped": 0}
    assert body["layers"][-1]["text"].splitlines() == [
        "user: first", "assistant: echo: first", "user: second", "assistant: echo: second"]

    # no usage reported: the turn bills its own count of the prompt it sent
    fake_llm.script = [Scripted(body=completion("ok", prompt_tokens=None))]
    assert (await harness.chat(auth, "third", specialist="chef")).status == 200
    sent = fake_llm.chat_requests[-1]
    assert sent.system_text == system_of(body)  # one assembly code path
    assert len(sent.messages) == 1 + body["recent"]["kept"] + 1
    charged = (await harness.gateway.store.ledger("alice"))[-1]
    assert charged.prompt_tokens == body["totalTokens"] + count("third")


async def test_the_summary_layer_follows_summarization(
        start_gateway: StartGateway) -> None:
    harness = await start_gateway(summarize_at=4, keep_recent=2)
    auth = await harness.user()
    for text in ("one", "two"):
        assert (await harness.chat(auth, text)).status == 200
    await harness.gateway.drain()
    body = await context(harness, auth)
    assert names(body) == ["base", "summary", "recent"]
    assert body["layers"][1]["text"].startswith("Summary of the earlier conversation:")
    assert body["recent"]["kept"] == 2


async def test_recent_messages_that_do_not_fit_are_counted_as_dropped(
        start_gateway: StartGateway, fake_llm: FakeLLM, pm: PluginManager) -> None:
    pm.unregister(name="scheduling")  # its tool's schema would take half the budget
    harness = await start_gateway(max_context=400, summarize_at=100)
    auth = await harness.user()
    for index in range(6):
        assert (await harness.chat(auth, f"message {index} " + "word " * 25)).status == 200
    body = await context(harness, auth)
    assert body["recent"]["dropped"] > 0
    assert body["recent"]["kept"] + body["recent"]["dropped"] == 12
    assert body["totalTokens"] <= 400
    assert (await harness.chat(auth, "x")).status == 200
    # the turn keeps as many as the inspector said, or fewer for its own message's tokens
    assert len(fake_llm.chat_requests[-1].messages) - 2 <= body["recent"]["kept"]


async def test_saved_passwords_show_as_hidden_in_the_hints(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": PASSWORD})
    assert response.status == 200
    response = await harness.client.get("/api/threads/t1/context", headers=auth)
    text = await response.text()
    assert PASSWORD not in text and "H\\u00e4" not in text
    body = await response.json()
    assert names(body) == ["base", "hints"]
    assert "example.com: username ada, password [hidden]" in body["layers"][1]["text"]
    # counted as the model gets it: with the real password
    assert body["layers"][1]["tokens"] == harness.gateway.counter.count(
        body["layers"][1]["text"].replace("[hidden]", PASSWORD))


async def test_a_plugin_section_is_part_of_the_layer_it_follows(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    class Weather:
        @hookimpl
        def prompt_sections(self, turn: TurnContext) -> list[PromptSection]:
            return [PromptSection(position="after_instructions", text="It is raining.")]

    pm.register(Weather(), name="weather")
    harness = await start_gateway()
    auth = await harness.user()
    body = await context(harness, auth)
    assert names(body) == ["base"]
    assert body["layers"][0]["text"].endswith("\n\nIt is raining.")


async def test_bad_requests_are_4xx(harness: Harness, start_gateway: StartGateway) -> None:
    auth = await harness.user()
    response = await harness.client.get("/api/threads/t1/context")
    await assert_json_error(response, 401, "unauthorized")
    response = await harness.client.get("/api/threads/t1/context", headers=auth,
                                        params={"specialist": "nobody"})
    await assert_json_error(response, 404, "specialist_not_found")
    response = await harness.client.get("/api/threads/t1/context", headers=auth,
                                        params={"specialist": "bad name!"})
    await assert_json_error(response, 400, "invalid_specialist")
    response = await harness.client.get("/api/threads/%2E%2E/context", headers=auth)
    assert response.status in (400, 404)
