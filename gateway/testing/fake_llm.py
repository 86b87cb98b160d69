"""An OpenAI-compatible chat-completions server on 127.0.0.1 that records every request and
refuses, as OpenAI does, messages that break the API's rules."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.testing.chat_rules import openai_violation
from gateway.testing.loopback import LoopbackServer


@dataclass
class Recorded:
    """One request the fake received."""

    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of the request."""
        messages: list[dict[str, Any]] = self.body["messages"]
        return messages

    @property
    def system_text(self) -> str:
        """The system message's text ('' if there is none)."""
        first = self.messages[0]
        return str(first["content"]) if first["role"] == "system" else ""

    @property
    def is_summary(self) -> bool:
        """Whether this is a summarization request (by its system instructions)."""
        return "running summary" in self.system_text


@dataclass
class Scripted:
    """A canned answer: an HTTP status with a JSON body, optional headers and a delay.

    ``raw`` sends those bytes as the body instead of ``body`` as JSON (answers JSON cannot
    encode, such as arrays nested 100,000 deep); ``release`` holds the answer until the event
    is set (after ``delay``), for tests that need calls in flight at a known moment.

    A request with ``"stream": true`` gets a 200 ``body`` as Server-Sent Events, the way OpenAI
    streams: the content in pieces of ``piece_chars`` characters, ``piece_delay`` seconds apart,
    then the tool calls, then (with ``stream_options.include_usage``) the usage, then
    ``data: [DONE]``; with ``break_after``, a broken event follows that many pieces instead;
    with ``pause_after``, the stream waits on ``resume`` after that many pieces (a client can
    act mid-stream at a known moment); with ``drop_after``, the connection is dropped after
    that many pieces (as a provider that fails mid-answer).
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    release: asyncio.Event | None = None
    piece_chars: int = 8
    piece_delay: float = 0.0
    break_after: int | None = None
    pause_after: int | None = None
    resume: asyncio.Event | None = None
    drop_after: int | None = None


def completion(text: str, prompt_tokens: int | None = 10, completion_tokens: int | None = 5,
               model: str = "fake-model") -> dict[str, Any]:
    """A chat.completion body as OpenAI sends it."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1767225600,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
    }
    if prompt_tokens is not None:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + (completion_tokens or 0)}
    return body


def default_reply(request: Recorded) -> Scripted:
    """Summaries say what they folded; chat replies echo the user's last message."""
    last = request.messages[-1]["content"]
    if isinstance(last, list):  # text and pictures: echo the text
        last = " ".join(part["text"] for part in last if part.get("type") == "text")
    if request.is_summary:
        return Scripted(body=completion(f"SUMMARY[{len(last)} chars folded]"))
    return Scripted(body=completion(f"echo: {last}"))


class FakeLLM:
    """The fake server. Queue answers in ``script`` (used first) or set ``responder``.

    A request whose messages break OpenAI's rules (a ``tool`` message that answers no
    ``tool_calls`` just before it, calls left unanswered: :func:`~gateway.testing.chat_rules.
    openai_violation`) is recorded, then refused with OpenAI's 400 ``invalid_request_error``,
    its reason kept in ``refusals``."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: list[Scripted] = []
        self.responder: Callable[[Recorded], Scripted] = default_reply
        self.refusals: list[str] = []  # why requests were refused (400), in order
        self.url = ""
        self._server = LoopbackServer()

    @property
    def chat_requests(self) -> list[Recorded]:
        """The requests that were chat turns (not summarizations)."""
        return [r for r in self.requests if not r.is_summary]

    @property
    def summary_requests(self) -> list[Recorded]:
        """The summarization requests."""
        return [r for r in self.requests if r.is_summary]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        recorded = Recorded(body, dict(request.headers))
        self.requests.append(recorded)
        refused = openai_violation(body)
        if refused is not None:  # as OpenAI refuses messages its rules do not allow
            message, param = refused
            self.refusals.append(message)
            return web.json_response({"error": {"message": message, "type":
                                                "invalid_request_error", "param": param,
                                                "code": None}}, status=400)
        answer = self.script.pop(0) if self.script else self.responder(recorded)
        if answer.delay:
            await asyncio.sleep(answer.delay)
        if answer.release is not None:
            await answer.release.wait()
        if answer.raw is not None:  # JSON unless the answer's headers say otherwise
            headers = {"Content-Type": "application/json", **answer.headers}
            return web.Response(body=answer.raw, status=answer.status, headers=headers)
        if body.get("stream") is True and answer.status == 200 and isinstance(answer.body, dict):
            return await self._stream(request, answer, body)
        return web.json_response(answer.body, status=answer.status, headers=answer.headers)

    @staticmethod
    async def _stream(request: web.Request, answer: Scripted,
                      asked: dict[str, Any]) -> web.StreamResponse:
        """``answer.body`` (a chat.completion) as OpenAI's chunked event stream."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               **answer.headers})
        await response.prepare(request)

        async def event(data: Any) -> None:
            await response.write(f"data: {json.dumps(data)}\n\n".encode())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-test", "object": "chat.completion.chunk",
                    "model": answer.body.get("model"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        message = answer.body["choices"][0]["message"]
        text = message.get("content") or ""
        await event(chunk({"role": "assistant", "content": ""}))
        for number, start in enumerate(range(0, len(text), max(1, answer.piece_chars))):
            if number == answer.break_after:
                await response.write(b"data: {the stream broke\n\n")
                await response.write_eof()
                return response
            if number == answer.drop_after and request.transport is not None:
                request.transport.abort()
                return response
            if number == answer.pause_after and answer.resume is not None:
                await answer.resume.wait()
            if answer.piece_delay:
                await asyncio.sleep(answer.piece_delay)
            await event(chunk({"content": text[start:start + answer.piece_chars]}))
        for index, call in enumerate(message.get("tool_calls") or []):
            await event(chunk({"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            await event(chunk({"tool_calls": [{
                "index": index, "function": {"arguments": call["function"]["arguments"]}}]}))
        await event(chunk({}, answer.body["choices"][0].get("finish_reason") or "stop"))
        if (asked.get("stream_options") or {}).get("include_usage") and "usage" in answer.body:
            await event({"id": "chatcmpl-test", "object": "chat.completion.chunk",
                         "model": answer.body.get("model"), "choices": [],
                         "usage": answer.body["usage"]})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        port = await self._server.serve(app)
        self.url = f"http://127.0.0.1:{port}/v1"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()


def tool_call_completion(calls: list[tuple[str, str, str]], content: str | None = None,
                         prompt_tokens: int | None = 10, completion_tokens: int | None = 5,
                         model: str = "fake-model") -> dict[str, Any]:
    """A chat.completion in which the model asks for tools: ``calls`` = (id, name, arguments).

    OpenAI's exact shape: ``content`` null, ``tool_calls`` of type ``function`` whose
    ``arguments`` is JSON text, ``finish_reason`` ``tool_calls``.
    """
    body = completion("", prompt_tokens, completion_tokens, model)
    choice = body["choices"][0]
    choice["finish_reason"] = "tool_calls"
    choice["message"] = {
        "role": "assistant", "content": content,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": arguments}}
                       for call_id, name, arguments in calls],
    }
    return body
