"""``POST /chat``: one turn, answered as JSON or, with ``Accept: text/event-stream``, streamed.

A provider's failure is answered in plain words (:data:`PROVIDER_FAILED`): its details (the
provider's address, its HTTP status) go to the log only. The OpenAI-compatible endpoint keeps
its OpenAI-style messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any

from aiohttp import web

from gateway.api.context import caller, json_answer, trace_of
from gateway.api.events import ReplyDeltas, stream_answer, stream_turn, wants_events
from gateway.api.middleware import read_json_object
from gateway.api.pictures import named, pictures
from gateway.api.stops import running_turns_key
from gateway.base import validation
from gateway.base.errors import BadRequest, EmptyReply, ProviderError
from gateway.commands import slash_command
from gateway.turn.agent import TurnResult
from gateway.turn.request import Turn

log = logging.getLogger(__name__)
PROVIDER_FAILED = "The model could not answer just now; nothing was charged. Try again."
EMPTY_ANSWER = ("The model answered with nothing at all; nothing was charged. Try again, "
                "perhaps in other words.")


def _answer(thread_id: str, result: TurnResult) -> dict[str, Any]:
    """The ``/chat`` answer of a turn."""
    return {
        "threadId": thread_id,
        "reply": result.reply,
        "usage": {"promptTokens": result.prompt_tokens,
                  "completionTokens": result.completion_tokens,
                  "credits": result.credits},
        "summarized": result.summarized,
        "sessionRotated": result.session_rotated,
        "stopped": result.stopped,
    }


class PlainProviderError(ProviderError):
    """A provider's failure as a user reads it: same status and code, no internals."""

    def __init__(self, cause: ProviderError) -> None:
        super().__init__(EMPTY_ANSWER if isinstance(cause, EmptyReply) else PROVIDER_FAILED,
                         code=cause.code)
        self.status = cause.status


async def _plainly(turn: Awaitable[TurnResult]) -> TurnResult:
    """``turn``'s result; a provider's failure logged with its details and raised plain."""
    try:
        return await turn
    except PlainProviderError:
        raise
    except ProviderError as exc:
        log.warning("turn failed at the provider (%s): %s", exc.code, exc.message)
        raise PlainProviderError(exc) from None


async def post_chat(request: web.Request) -> web.StreamResponse:
    """Run a turn and answer with the reply and its usage (streamed when asked for)."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    ref = await gateway.resolve_thread(user.user_id, body.get("threadId"))
    images = pictures(body.get("images"), gateway.settings)
    message = validation.text(body.get("message", "" if images else None), "message",
                              gateway.settings.max_message_chars, allow_empty=bool(images))
    specialist = body.get("specialist")
    if specialist is not None:
        specialist = validation.name(specialist, "specialist")
    replace_last = body.get("replaceLast", False)
    if not isinstance(replace_last, bool):
        raise BadRequest("replaceLast must be true or false", code="invalid_replace_last",
                         param="replaceLast")
    streamed = wants_events(request)
    command = slash_command(message, gateway.commands) if not (images or replace_last) \
        else None
    if command is not None:  # the composer's "/remember name Ada": no LLM, no credits
        reply = await gateway.run_command(command, user, ref)
        answer = {**_answer(ref.thread_id, TurnResult(reply, 0, 0, 0, False, False)),
                  "command": command.name}
        return await stream_answer(request, reply, answer) if streamed \
            else json_answer(answer)
    turn = Turn(user.user_id, ref, named(message, images), specialist, images=images,
                trace=trace_of(request), replace_last=replace_last)
    if not streamed:
        return json_answer(_answer(ref.thread_id, await _plainly(gateway.run(turn))))
    deltas = ReplyDeltas()
    stop = asyncio.Event()
    # Its own task: a client that disconnects stops the stream, never the turn; only
    # POST /api/threads/{threadId}/stop does (it sets the turn's stop).
    task = gateway.spawn(_plainly(gateway.run(
        replace(turn, on_text=deltas.on_text, stop=stop))))
    request.app[running_turns_key].watch(ref.session_key, task, stop)
    return await stream_turn(request, task, deltas,
                             lambda result: _answer(ref.thread_id, result))
