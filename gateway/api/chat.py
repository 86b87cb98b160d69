"""``POST /chat``: one turn, answered as JSON or, with ``Accept: text/event-stream``, streamed."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.context import caller, trace_of
from gateway.api.events import ReplyDeltas, stream_answer, stream_turn, wants_events
from gateway.api.middleware import read_json_object
from gateway.base import validation
from gateway.commands import slash_command
from gateway.turn.agent import TurnResult
from gateway.turn.request import Turn


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
    }


async def post_chat(request: web.Request) -> web.StreamResponse:
    """Run a turn and answer with the reply and its usage (streamed when asked for)."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    ref = await gateway.resolve_thread(user.user_id, body.get("threadId"))
    message = validation.text(body.get("message"), "message", gateway.settings.max_message_chars)
    specialist = body.get("specialist")
    if specialist is not None:
        specialist = validation.name(specialist, "specialist")
    streamed = wants_events(request)
    command = slash_command(message, gateway.commands)
    if command is not None:  # the composer's "/remember name Ada": no LLM, no credits
        reply = await gateway.run_command(command, user, ref)
        answer = {**_answer(ref.thread_id, TurnResult(reply, 0, 0, 0, False, False)),
                  "command": command.name}
        return await stream_answer(request, reply, answer) if streamed \
            else web.json_response(answer)
    if not streamed:
        return web.json_response(_answer(ref.thread_id, await gateway.run(
            Turn(user.user_id, ref, message, specialist, trace=trace_of(request)))))
    deltas = ReplyDeltas()
    # Its own task: a client that disconnects stops the stream, never the turn.
    turn = gateway.spawn(gateway.run(Turn(user.user_id, ref, message, specialist,
                                          on_text=deltas.on_text, trace=trace_of(request))))
    return await stream_turn(request, turn, deltas,
                             lambda result: _answer(ref.thread_id, result))
