"""The OpenAI-compatible endpoint (SPEC §16): ``POST /v1/chat/completions`` and
``GET /v1/models``, so that the official ``openai`` SDKs talk to the gateway unchanged.

The user's API token is the API key. The thread is named by ``X-CloudyBot-Thread`` or
``metadata.thread_id``; the request's last ``user`` message is the turn's message and the
thread's memory supplies the rest, exactly as for ``/chat`` (earlier messages in the request are
not stored). Errors are OpenAI-shaped (``{"error": {"message", "type", "code"}}``, see the
errors middleware).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from aiohttp import web

from gateway.api.context import caller, json_answer, trace_of
from gateway.api.events import EventWriter, ReplyDeltas, wait_for_turn
from gateway.api.middleware import read_json_object
from gateway.api.openai_errors import openai_error
from gateway.base import jsonio, validation
from gateway.base.errors import BadRequest, GatewayError, NotFound
from gateway.turn.agent import TurnResult
from gateway.turn.request import Turn

PREFIX = "/v1/"
THREAD_HEADER = "X-CloudyBot-Thread"
SPECIALIST_MODEL_PREFIX = "cloudybot/"
TURN_MESSAGE = ("the last user message is the turn's message: its content, or its text parts "
                "joined, must hold text that is not all whitespace, no NUL, within the /chat "
                "message limit")


async def get_models(request: web.Request) -> web.Response:
    """The configured model, and one ``cloudybot/{name}`` model per specialist of the user."""
    gateway, user = caller(request)
    specialists = await gateway.store.list_specialists(user.user_id)
    names = [gateway.settings.llm_model,
             *(SPECIALIST_MODEL_PREFIX + name for name in sorted(specialists))]
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "cloudybot"}
        for name in names]})


def _well_formed(message: object) -> bool:
    """An object with a string ``role`` and a ``content`` that is a string, a list of part
    objects or null (or absent)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        return False
    content = message.get("content")
    return content is None or isinstance(content, str) or (
        isinstance(content, list) and all(isinstance(part, dict) for part in content))


def _message(messages: object, limit: int) -> str:
    """The text of the last ``user`` message (a string, or text parts)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array", code="invalid_messages",
                         param="messages")
    if not all(_well_formed(m) for m in messages):
        raise BadRequest("each message must be an object with a string role and a content "
                         "that is a string or a list of part objects", code="invalid_messages",
                         param="messages")
    last = next((m for m in reversed(messages) if m["role"] == "user"), None)
    if last is None:
        raise BadRequest("messages holds no user message", code="invalid_messages",
                         param="messages")
    content = last.get("content")
    if isinstance(content, list):
        content = "\n".join(part["text"] for part in content
                            if part.get("type") == "text" and isinstance(part.get("text"), str))
    return validation.text(content, "message", limit)


def _one_choice(n: object) -> None:
    """``n`` absent, null or 1: the gateway answers one choice per turn (a turn is stored,
    billed and remembered once), so ``n > 1`` is refused rather than quietly answered once."""
    if n is None or (type(n) is int and n == 1):
        return
    if type(n) is int and n > 1:
        raise BadRequest(f"n={n} is not supported: the gateway answers one choice per request "
                         "(send n=1 or leave it out)", code="unsupported_value", param="n")
    raise BadRequest("n must be the integer 1", code="invalid_value", param="n")


def _object(body: dict[str, object], name: str) -> dict[str, object]:
    """The optional object field ``name`` (``{}`` when absent or null); 400 if not an
    object."""
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{name} must be an object", code="invalid_value", param=name)
    return value


def _flag(body: dict[str, object], name: str, param: str) -> bool:
    """The optional boolean field ``name`` (false when absent or null); 400 if not one."""
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"{param} must be true or false", code="invalid_value", param=param)
    return value is True


def _thread(request: web.Request, body: dict[str, object]) -> object:
    """The thread's id: the header's, else ``metadata.thread_id`` (checked even when the header
    wins, so that no malformed field passes unseen)."""
    metadata = _object(body, "metadata")
    named = validation.thread_id(metadata["thread_id"]) if "thread_id" in metadata else None
    header = request.headers.get(THREAD_HEADER)
    if header is not None:
        return header
    if named is not None:
        return named
    raise BadRequest(f"name the thread: the {THREAD_HEADER} header or metadata.thread_id",
                     code="missing_thread")


def _specialist(model: object, configured: str) -> str | None:
    if model is None or model == configured:
        return None
    if not isinstance(model, str):
        raise BadRequest("model must be a string", code="invalid_value", param="model")
    if model.startswith(SPECIALIST_MODEL_PREFIX):
        return validation.name(model[len(SPECIALIST_MODEL_PREFIX):], "specialist")
    raise NotFound(f"the model {model!r} does not exist: use {configured!r} or "
                   f"'{SPECIALIST_MODEL_PREFIX}<specialist>'", code="model_not_found")


def _usage(result: TurnResult) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}


async def post_chat_completions(request: web.Request) -> web.StreamResponse:
    """One turn of the named thread, answered as an OpenAI chat completion (or its chunks)."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    _one_choice(body.get("n"))
    streamed = _flag(body, "stream", "stream")
    with_usage = _flag(_object(body, "stream_options"), "include_usage",
                       "stream_options.include_usage")
    ref = await gateway.resolve_thread(user.user_id, _thread(request, body))
    message = _message(body.get("messages"), gateway.settings.max_message_chars)
    model = body.get("model")
    specialist = _specialist(model, gateway.settings.llm_model)
    shown_model = model if isinstance(model, str) else gateway.settings.llm_model
    completion_id = f"chatcmpl-{secrets.token_hex(12)}"
    created = int(time.time())
    if not streamed:
        result = await gateway.run(Turn(user.user_id, ref, message, specialist,
                                        trace=trace_of(request)))
        return json_answer({
            "id": completion_id, "object": "chat.completion", "created": created,
            "model": shown_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result.reply},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": _usage(result)})
    deltas = ReplyDeltas()
    turn = gateway.spawn(gateway.run(Turn(user.user_id, ref, message, specialist,
                                          on_text=deltas.on_text, trace=trace_of(request))))
    chunks = _Chunks(request, completion_id, created, shown_model)
    try:
        async for texts in wait_for_turn(turn, deltas):
            if texts:  # each is the reply so far: the last says all
                await chunks.text(texts[-1])
        result = turn.result()
    except GatewayError as exc:
        if not chunks.started:
            raise
        return await chunks.finish([openai_error(exc.status, exc.code, exc.message,
                                                 exc.param)])
    await chunks.last_text(result.reply)
    last = [chunks.chunk({}, "stop")]
    if with_usage:
        last.append({**chunks.chunk({}, None), "choices": [], "usage": _usage(result)})
    return await chunks.finish(last)


class _Chunks:
    """The stream of ``chat.completion.chunk`` objects as Server-Sent Events ending in
    ``data: [DONE]``. A reply that starts over (text written before a tool round) cannot be
    taken back in OpenAI's format: the stream pauses, and the finished reply follows what was
    sent after a blank line."""

    def __init__(self, request: web.Request, completion_id: str, created: int,
                 model: str) -> None:
        self.base = {"id": completion_id, "object": "chat.completion.chunk",
                     "created": created, "model": model}
        self.sent = ""
        self.writer = EventWriter(request)  # the stream itself, as /chat's

    @property
    def started(self) -> bool:
        """Whether the stream's headers went out."""
        return self.writer.started

    def chunk(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        """One chunk object."""
        return {**self.base, "choices": [{"index": 0, "delta": delta,
                                          "finish_reason": finish, "logprobs": None}]}

    async def text(self, text: str) -> None:
        """Send what ``text`` (the reply so far) adds to what was sent."""
        shown = text.strip()
        if shown.startswith(self.sent) and shown != self.sent:
            await self._send(shown[len(self.sent):], shown)

    async def last_text(self, reply: str) -> None:
        """The finished reply: the rest of it, or (it started over) all of it, after a
        blank line."""
        if reply.startswith(self.sent):
            await self.text(reply)
        else:
            await self._send("\n\n" + reply, reply)

    async def _send(self, content: str, now_sent: str) -> None:
        delta: dict[str, Any] = {"content": content}
        if not self.sent:
            delta = {"role": "assistant", **delta}
        self.sent = now_sent
        await self._write([self.chunk(delta, None)])

    async def finish(self, last: list[dict[str, Any]]) -> web.StreamResponse:
        """The last objects, then ``[DONE]``."""
        await self._write(last, done=True)
        assert self.writer.response is not None
        return self.writer.response

    async def _write(self, objects: list[dict[str, Any]], done: bool = False) -> None:
        data = b"".join(b"data: " + jsonio.dumps(obj) + b"\n\n" for obj in objects)
        await self.writer.write(data + b"data: [DONE]\n\n" if done else data, last=done)
