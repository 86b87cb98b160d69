"""Streaming: the OpenAI-compatible provider streams from upstream, and a channel that can shows
the reply growing (throttled) before the stored reply replaces the preview. Nothing stored or
billed changes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable

import pytest

from gateway.kit.inbound import PROVIDER_APOLOGY
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from tests.conftest import Harness
from tests.fakes.loop import StreamingLoopChannel

StartGateway = Callable[..., Awaitable[Harness]]
REPLY = ("Streaming lets the reader follow along while the model is still writing, "
         "which feels much faster than waiting for the whole answer at once.")


@pytest.fixture
def streaming_loop(pm: PluginManager) -> StreamingLoopChannel:
    channel = StreamingLoopChannel()
    pm.register(channel, name="streaming-loop-channel")
    return channel


async def test_the_reply_grows_in_a_preview_and_the_stored_reply_replaces_it(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.05
    fake_llm.script = [Scripted(body=completion(REPLY, 40, 30), piece_chars=10,
                                piece_delay=0.02)]
    await harness.gateway.receive(streaming_loop.message("m1", "why stream?"))
    await harness.gateway.drain()

    assert fake_llm.requests[0].body["stream"] is True
    assert fake_llm.requests[0].body["stream_options"] == {"include_usage": True}
    texts = [text for _, text in streaming_loop.previews]
    assert len(texts) >= 3  # it grew in steps
    assert all(REPLY.startswith(text) for text in texts)
    assert all(len(a) < len(b) for a, b in itertools.pairwise(texts))
    assert {handle for handle, _ in streaming_loop.previews} == {"preview-of-m1"}
    assert streaming_loop.texts() == [REPLY]  # the final text is exact
    assert streaming_loop.addresses[0]["preview"] == "preview-of-m1"
    # usage from the stream's last event is billed, as without streaming
    [charge] = [row for row in await harness.gateway.store.ledger("loop:ada")
                if row.kind == "chat"]
    assert (charge.prompt_tokens, charge.completion_tokens) == (40, 30)


async def test_previews_are_throttled_to_the_interval(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.25
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=2, piece_delay=0.01)]
    await harness.gateway.receive(streaming_loop.message("m1", "go"))
    await harness.gateway.drain()
    pieces = (len(REPLY) + 1) // 2  # about 70 pieces over about 0.7 s
    assert 1 <= len(streaming_loop.previews) <= 5 < pieces
    assert streaming_loop.texts() == [REPLY]


async def test_a_long_streamed_reply_replaces_the_preview_with_its_first_chunk_only(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.01
    long_reply = " ".join(f"word{i}" for i in range(120))
    fake_llm.script = [Scripted(body=completion(long_reply), piece_chars=50,
                                piece_delay=0.01)]
    await harness.gateway.receive(streaming_loop.message("m1", "long", max_chars=200))
    await harness.gateway.drain()
    assert len(streaming_loop.sent) > 2
    assert " ".join(streaming_loop.texts()) == long_reply
    assert [("preview" in address) for address in streaming_loop.addresses] == \
        [True] + [False] * (len(streaming_loop.sent) - 1)


async def test_a_tool_round_starts_the_preview_over_with_the_next_answer(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.01
    fake_llm.script = [
        Scripted(body=tool_call_completion([("c1", "calculator", '{"expression": "6*7"}')],
                                           "Let me work that out."), piece_delay=0.02),
        Scripted(body=completion("It is 42."), piece_delay=0.02)]
    await harness.gateway.receive(streaming_loop.message("m1", "6*7?"))
    await harness.gateway.drain()
    texts = [text for _, text in streaming_loop.previews]
    # the last preview is the second answer from its start (previews are throttled: the
    # final piece may come too soon after the one before for a preview of its own)
    assert texts[-1] and "It is 42.".startswith(texts[-1]), texts
    assert any("Let me work" in text for text in texts)
    assert streaming_loop.texts() == ["It is 42."]


async def test_a_stream_that_breaks_is_an_apology_that_replaces_the_preview_and_costs_nothing(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    harness.gateway.inbox.preview_interval_seconds = 0.05
    fake_llm.script = [Scripted(body=completion("Half an answer, and then the line dies"),
                                piece_chars=6, piece_delay=0.03, break_after=4)]
    await harness.gateway.receive(streaming_loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert streaming_loop.texts() == [PROVIDER_APOLOGY]
    assert streaming_loop.previews  # shown before the stream broke, then replaced
    assert all("Half an answer, and then".startswith(text)
               for _, text in streaming_loop.previews)
    assert streaming_loop.addresses[0]["preview"] == "preview-of-m1"
    ledger = await harness.gateway.store.ledger("loop:ada")
    assert [row.kind for row in ledger] == ["grant"]


async def test_a_server_that_cannot_stream_answers_in_one_piece(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.01
    # it ignores "stream": a plain JSON chat.completion
    fake_llm.script = [Scripted(raw=json.dumps(completion(REPLY)).encode())]
    await harness.gateway.receive(streaming_loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert streaming_loop.texts() == [REPLY]
    assert [text for _, text in streaming_loop.previews] in ([], [REPLY])


async def test_a_saved_password_never_shows_in_a_preview(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.01
    await harness.gateway.receive(streaming_loop.message("m0", "hi"))
    await harness.gateway.drain()
    token = await harness.gateway.accounts.issue_token("loop:ada")
    saved = await harness.client.put(
        "/api/user/browser-credentials", headers={"Authorization": f"Bearer {token}"},
        json={"site": "example.com", "username": "ada", "password": "Hunter2-Secret"})
    assert saved.status == 200
    answer = "Your password is Hunter2-Secret, keep it. " + "More words follow here. " * 12
    fake_llm.script = [Scripted(body=completion(answer), piece_chars=5, piece_delay=0.005)]
    await harness.gateway.receive(streaming_loop.message("m1", "what is my password?"))
    await harness.gateway.drain()
    assert streaming_loop.previews
    assert not any("Hunter2" in text for _, text in streaming_loop.previews)
    assert "Hunter2" not in streaming_loop.texts()[-1]


async def test_a_password_in_its_longest_spelling_never_shows_in_a_preview(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    # repr() of the UTF-8 bytes writes each € as \xe2\x82\xac: 12 characters for one.
    password = "€€€€-€€€€"
    spelled = str(password.encode("utf-8"))[2:-1]
    harness = await start_gateway()
    harness.gateway.inbox.preview_interval_seconds = 0.01
    await harness.gateway.receive(streaming_loop.message("m0", "hi"))
    await harness.gateway.drain()
    token = await harness.gateway.accounts.issue_token("loop:ada")
    saved = await harness.client.put(
        "/api/user/browser-credentials", headers={"Authorization": f"Bearer {token}"},
        json={"site": "example.com", "username": "ada", "password": password})
    assert saved.status == 200
    answer = f"The bytes are {spelled}, keep them. " + "More words follow here. " * 30
    fake_llm.script = [Scripted(body=completion(answer), piece_chars=4, piece_delay=0.002)]
    await harness.gateway.receive(streaming_loop.message("m1", "spell my password"))
    await harness.gateway.drain()
    assert streaming_loop.previews
    assert not any(spelled[:12] in text for _, text in streaming_loop.previews)
    assert streaming_loop.texts()[-1].startswith("The bytes are [redacted], keep them.")


@pytest.mark.parametrize("events", [
    pytest.param(b"data: []\n\n", id="event-not-an-object"),
    pytest.param(b'data: {"choices": "many"}\n\n', id="choices-not-a-list"),
    pytest.param(b'data: {"choices": [{"delta": {"tool_calls": [{"index": "a"}]}}]}\n\n',
                 id="tool-call-index-not-a-number"),
    pytest.param(b'data: {"choices": [{"delta": {"tool_calls": [{"index": 999}]}}]}\n\n',
                 id="too-many-tool-calls"),
    pytest.param(b'data: {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": '
                 b'{"name": "calculator", "arguments": "{}"}}]}}]}\n\ndata: [DONE]\n\n',
                 id="tool-call-without-id"),
    pytest.param(b"data: " + b"[" * 100_000 + b"\n\n", id="nested-100k-deep"),
])
async def test_a_malformed_stream_is_an_apology_and_costs_nothing(
        events: bytes, streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    fake_llm.script = [Scripted(raw=events, headers={"Content-Type": "text/event-stream"})]
    await harness.gateway.receive(streaming_loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert streaming_loop.texts() == [PROVIDER_APOLOGY]
    assert [row.kind for row in await harness.gateway.store.ledger("loop:ada")] == ["grant"]
    assert await harness.gateway.store.get_thread("loop:c1") is None  # nothing stored


async def test_a_stream_without_usage_is_billed_from_our_own_count(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    fake_llm.script = [Scripted(body=completion(REPLY, prompt_tokens=None))]
    await harness.gateway.receive(streaming_loop.message("m1", "hello"))
    await harness.gateway.drain()
    [charge] = [row for row in await harness.gateway.store.ledger("loop:ada")
                if row.kind == "chat"]
    assert charge.prompt_tokens > 0 and charge.completion_tokens > 0
    assert streaming_loop.texts() == [REPLY]


async def test_streaming_can_be_turned_off(
        streaming_loop: StreamingLoopChannel, start_gateway: StartGateway,
        fake_llm: FakeLLM) -> None:
    harness = await start_gateway(channel_streaming=False)
    harness.gateway.inbox.preview_interval_seconds = 0.01
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=10, piece_delay=0.02)]
    await harness.gateway.receive(streaming_loop.message("m1", "hello"))
    await harness.gateway.drain()
    assert "stream" not in fake_llm.requests[0].body
    assert streaming_loop.previews == []
    assert streaming_loop.texts() == [REPLY]
