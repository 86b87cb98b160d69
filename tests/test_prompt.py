"""What the model sees: the SPEC §4 order, one system message, budgeting under MAX_CONTEXT."""

from __future__ import annotations

from gateway.base.tokens import TokenCounter
from gateway.store import StoredMessage
from gateway.testing.fake_llm import FakeLLM
from gateway.turn.prompt import ROTATION_HINT, PromptInputs, assemble
from tests.conftest import Harness

BASE = "You are CloudyBot, a helpful assistant. Answer clearly and concisely."


async def _fill_and_summarize(harness: Harness, auth: dict[str, str], turns: int) -> None:
    for i in range(turns):
        response = await harness.chat(auth, f"message {i}")
        assert response.status == 200
    await harness.gateway.drain()


async def test_prompt_has_every_section_in_spec_order(harness: Harness,
                                                      fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    client = harness.client
    await _fill_and_summarize(harness, auth, 5)  # 10 messages stored -> summarized, 5 kept
    for key, value in (("name", "Ada"), ("city", "Paris <north>")):
        response = await client.put("/api/user/memory?threadId=t1",
                                    json={"key": key, "value": value}, headers=auth)
        assert response.status == 200
    response = await client.put("/api/specialists/planner",
                                json={"instructions": "Plan trips step by step."}, headers=auth)
    assert response.status == 200
    response = await client.put("/api/user/browser-credentials", headers=auth,
                                json={"site": "example.com", "username": "ada",
                                      "password": "pw-123456"})
    assert response.status == 200

    response = await harness.chat(auth, "plan my week", specialist="planner")
    assert response.status == 200

    sent = fake_llm.chat_requests[-1].messages
    thread = await (await client.get("/api/threads/t1", headers=auth)).json()
    summary = thread["summary"]
    assert summary.startswith("SUMMARY[")
    assert [m["role"] for m in sent].count("system") == 1
    assert sent[0] == {"role": "system", "content": "\n\n".join([
        f"{BASE}\nYou are answering as the model fake-model.",
        "Pinned facts for this conversation (always true unless the user changes them):\n"
        "<pinned>\n- city: Paris &lt;north&gt;\n- name: Ada\n</pinned>",
        "You are acting as the specialist 'planner'. Its instructions:\nPlan trips step by step.",
        f"Summary of the earlier conversation:\n{summary}",
        "Saved browser logins, for the browser tool only (never repeat a password to the "
        "user):\n- example.com: username ada, password pw-123456",
    ])}
    # then the 5 kept recent messages verbatim, then the new user message
    kept = thread["messages"][:-2]
    assert sent[1:-1] == kept
    assert len(kept) == 5
    assert sent[-1] == {"role": "user", "content": "plan my week"}


async def test_prompt_without_optional_sections_is_instructions_only(
        harness: Harness, fake_llm: FakeLLM) -> None:
    auth = await harness.user()
    await harness.chat(auth, "hi")
    sent = fake_llm.requests[-1].messages
    assert sent == [
        {"role": "system", "content": f"{BASE}\nYou are answering as the model fake-model."},
        {"role": "user", "content": "hi"},
    ]


def _message(i: int, role: str, text: str, counter: TokenCounter) -> StoredMessage:
    return StoredMessage(i, role, text, counter.count(text))


def _inputs(counter: TokenCounter, recent: list[StoredMessage], user: str) -> PromptInputs:
    return PromptInputs(instructions="Be brief.", model="m", pinned={}, specialist=None,
                        summary="", credentials=(), session_rotated=False, sections=(),
                        recent=recent, user_message=user, user_tokens=counter.count(user))


def test_budget_drops_oldest_recent_messages_first() -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    recent = [_message(i, "user" if i % 2 == 0 else "assistant", f"message number {i} " * 5,
                       counter) for i in range(6)]
    full = assemble(_inputs(counter, recent, "new question"), counter, 10_000)
    assert full.dropped == 0
    assert full.prompt_tokens == counter.messages(full.messages)

    per_message = counter.message("user", recent[0].tokens)
    tight = full.prompt_tokens - 2 * per_message  # room for all but two
    trimmed = assemble(_inputs(counter, recent, "new question"), counter, tight)
    assert trimmed.dropped == 2
    assert [m["content"] for m in trimmed.messages[1:-1]] == [m.content for m in recent[2:]]
    assert trimmed.messages[0]["role"] == "system"
    assert trimmed.messages[-1] == {"role": "user", "content": "new question"}
    assert trimmed.prompt_tokens <= tight
    assert counter.messages(trimmed.messages) == trimmed.prompt_tokens

    exact = assemble(_inputs(counter, recent, "new question"), counter, full.prompt_tokens)
    assert exact.dropped == 0
    off_by_one = assemble(_inputs(counter, recent, "new question"), counter,
                          full.prompt_tokens - 1)
    assert off_by_one.dropped == 1


def test_rotation_hint_goes_in_section_five() -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    inputs = _inputs(counter, [], "hi")
    rotated = PromptInputs(**{**inputs.__dict__, "session_rotated": True, "summary": "S"})
    text = assemble(rotated, counter, 8000).system_text
    assert text.endswith(ROTATION_HINT)
    assert text.index("Summary of the earlier conversation") < text.index(ROTATION_HINT)


async def test_max_context_drops_oldest_over_http_and_keeps_them_stored(
        start_gateway, fake_llm: FakeLLM, pm) -> None:
    pm.unregister(name="tools")  # no tool schemas: the whole budget is for messages
    pm.unregister(name="scheduling")
    harness = await start_gateway(max_context=250)
    auth = await harness.user()
    for i in range(4):
        response = await harness.chat(auth, f"turn {i}: " + "lorem ipsum " * 12)
        assert response.status == 200
    sent = fake_llm.requests[-1].messages
    counter = harness.gateway.counter
    assert "tools" not in fake_llm.requests[-1].body
    assert counter.messages(sent) <= 250
    assert sent[-1]["content"].startswith("turn 3:")
    history = [m["content"] for m in sent[1:-1]]
    assert len(history) < 6  # something had to go...
    assert history  # ...but not everything
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    stored = [m["content"] for m in thread["messages"]]
    assert stored[-len(history) - 2:-2] == history  # the newest ones were kept, in order
    assert len(stored) == 8  # dropping from the prompt never deletes memory


async def test_system_and_message_alone_over_budget_is_413_and_stores_nothing(
        start_gateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(max_context=60)
    auth = await harness.user()
    before = (await (await harness.client.get("/api/user/credits", headers=auth)).json())
    response = await harness.chat(auth, "word " * 200)
    assert response.status == 413
    body = await response.json()
    assert body["error"]["code"] == "context_too_large"
    assert fake_llm.requests == []
    assert (await harness.client.get("/api/threads/t1", headers=auth)).status == 404
    after = (await (await harness.client.get("/api/user/credits", headers=auth)).json())
    assert after == before


async def test_tool_schemas_count_against_max_context(start_gateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    schema_tokens = harness.gateway.agent.toolbox.schema_tokens
    assert schema_tokens > 0
    assert fake_llm.requests == []
    auth = await harness.user()
    await harness.chat(auth, "hi")
    body = fake_llm.requests[-1].body
    assert {t["function"]["name"] for t in body["tools"]} == {"calculator", "current_time",
                                                                  "schedule"}
    fits = harness.gateway.counter.messages(body["messages"]) + schema_tokens
    small = await start_gateway(max_context=fits - 1)
    auth = await small.user("bob")
    response = await small.chat(auth, "hi")
    assert response.status == 413
