"""``POST /chat``: one turn."""

from __future__ import annotations

from aiohttp import web

from .. import validation
from ..commands import run_command, slash_command
from .context import caller
from .middleware import read_json_object


async def post_chat(request: web.Request) -> web.Response:
    """Run a turn and answer with the reply and its usage."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    ref = await gateway.resolve_thread(user.user_id, body.get("threadId"))
    message = validation.text(body.get("message"), "message", gateway.settings.max_message_chars)
    specialist = body.get("specialist")
    if specialist is not None:
        specialist = validation.name(specialist, "specialist")
    command = slash_command(message, gateway.commands)
    if command is not None:  # the composer's "/remember name Ada": no LLM, no credits
        return web.json_response({
            "threadId": ref.thread_id,
            "reply": await run_command(gateway, command, user, ref),
            "command": command.name,
            "usage": {"promptTokens": 0, "completionTokens": 0, "credits": 0},
            "summarized": False,
            "sessionRotated": False,
        })
    result = await gateway.chat(user.user_id, ref, message, specialist)
    return web.json_response({
        "threadId": ref.thread_id,
        "reply": result.reply,
        "usage": {"promptTokens": result.prompt_tokens,
                  "completionTokens": result.completion_tokens,
                  "credits": result.credits},
        "summarized": result.summarized,
        "sessionRotated": result.session_rotated,
    })
