"""``POST /chat``: one turn."""

from __future__ import annotations

from aiohttp import web

from .. import validation
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
