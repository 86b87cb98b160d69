"""A fake Anthropic Messages API on 127.0.0.1: checks the key and version headers, records
each request, refuses (400 ``invalid_request_error``) one that breaks the API's rules on
messages (:func:`gateway.testing.chat_rules.anthropic_violation`), answers scripted messages
(as JSON, or as Anthropic's event stream when the request says ``stream: true``); with
nothing scripted it echoes the last user text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.testing.chat_rules import anthropic_violation
from gateway.testing.loopback import LoopbackServer

KEY = "sk-ant-test-key"


def message(*blocks: dict[str, Any], input_tokens: int = 21,
            output_tokens: int = 7) -> dict[str, Any]:
    """A Messages answer holding ``blocks``."""
    return {"id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
            "content": list(blocks), "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def text(value: str) -> dict[str, Any]:
    """A text block."""
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


@dataclass
class Scripted:
    """One answer: a status and a body (a message, or an error object)."""

    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class FakeAnthropic:
    """See the module docstring."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.script: list[Scripted] = []
        self.refusals: list[str] = []  # why requests were refused (400), in order
        self._server = LoopbackServer()
        self.url = ""

    async def start(self) -> None:
        """Listen on loopback."""
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        port = await self._server.serve(app)
        self.url = f"http://127.0.0.1:{port}"

    async def close(self) -> None:
        """Stop listening."""
        await self._server.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-api-key") != KEY or \
                request.headers.get("anthropic-version") != "2023-06-01":
            return web.json_response({"type": "error", "error": {
                "type": "authentication_error", "message": "invalid x-api-key"}}, status=401)
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        problem = anthropic_violation(body)
        if problem is not None:  # as the real API refuses a request its rules do not allow
            self.refusals.append(problem)
            return web.json_response({"type": "error", "error": {
                "type": "invalid_request_error", "message": problem}}, status=400)
        scripted = self.script.pop(0) if self.script else Scripted(message(
            text("echo: " + _last_user_text(body["messages"]))))
        if scripted.status != 200 or not body.get("stream"):
            return web.json_response(scripted.body, status=scripted.status,
                                     headers=scripted.headers)
        return await self._stream(request, scripted.body)

    @staticmethod
    async def _stream(request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(kind: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}"
                                 "\n\n".encode())
        usage = answer["usage"]
        await send("message_start", {"message": {**answer, "content": [],
                                                 "usage": {"input_tokens": usage["input_tokens"],
                                                           "output_tokens": 1}}})
        for index, block in enumerate(answer["content"]):
            if block["type"] == "text":
                await send("content_block_start", {"index": index,
                                                   "content_block": {"type": "text", "text": ""}})
                for start in range(0, len(block["text"]), 5):
                    await send("content_block_delta", {"index": index, "delta": {
                        "type": "text_delta", "text": block["text"][start:start + 5]}})
            else:
                await send("content_block_start", {"index": index, "content_block": {
                    "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}})
                arguments = json.dumps(block["input"])
                for start in range(0, len(arguments), 4):
                    await send("content_block_delta", {"index": index, "delta": {
                        "type": "input_json_delta", "partial_json": arguments[start:start + 4]}})
            await send("content_block_stop", {"index": index})
        await send("message_delta", {"delta": {"stop_reason": "end_turn"},
                                     "usage": {"output_tokens": usage["output_tokens"]}})
        await send("message_stop", {})
        await response.write_eof()
        return response


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for turn in reversed(messages):
        if turn["role"] == "user":
            for block in reversed(turn["content"]):
                if block["type"] == "text":
                    return str(block["text"])
    return ""
