"""``GET /api/threads/{threadId}/context``: what the model would see on the thread's next turn,
layer by layer, with tokens against ``MAX_CONTEXT`` (the context inspector)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.accounts.secrets import redact
from gateway.api.context import caller, thread_from_path
from gateway.base import validation
from gateway.turn.prompt import Prompt

HIDDEN = "[hidden]"


def _hidden(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with each saved password shown as ``[hidden]`` (other encodings redacted)."""
    for secret in secrets:
        text = text.replace(secret, HIDDEN)
    return redact(text, secrets)


def _message_text(message: dict[str, Any], secrets: tuple[str, ...]) -> str:
    """One recent message as a line of the ``recent`` layer: its values hidden, never the
    role or the words around them (a password may be ``assistant``)."""
    calls = message.get("tool_calls") or []
    if calls:
        named = ", ".join(f"{_hidden(call['function']['name'], secrets)}"
                          f"({_hidden(call['function']['arguments'], secrets)})"
                          for call in calls)
        return f"{message['role']} called {named}"
    return f"{message['role']}: {_hidden(message.get('content') or '', secrets)}"


def _layers(prompt: Prompt, count: Any, secrets: tuple[str, ...]) -> list[dict[str, Any]]:
    layers = [{"name": name, "tokens": count(text), "text": _hidden(text, secrets)}
              for name, text in prompt.layers]
    if prompt.units:
        text = "\n".join(_message_text(m, secrets) for unit in prompt.units for m in unit)
        layers.append({"name": "recent", "tokens": sum(prompt.unit_costs), "text": text})
    return layers


async def get_context(request: web.Request) -> web.Response:
    """The next turn's prompt (``?specialist=`` as if the turn named one): each layer's text
    and tokens in prompt order, the whole prompt's tokens (message framing and the tool
    schemas included) and how many recent messages are kept or dropped.

    Any valid thread id answers, used or not (a new thread's first turn, as the dashboard
    shows it); 404 only for someone else's channel thread."""
    gateway, user = caller(request)
    ref = await thread_from_path(request)
    specialist = request.query.get("specialist")
    if specialist is not None:
        specialist = validation.name(specialist, "specialist")
    prompt, secrets = await gateway.agent.next_prompt(ref, user.user_id, specialist)
    return web.json_response({
        "threadId": ref.thread_id,
        "maxContext": gateway.settings.max_context,
        "totalTokens": prompt.prompt_tokens,
        "layers": _layers(prompt, gateway.counter.count, secrets),
        "recent": {"kept": len(prompt.units), "dropped": prompt.dropped},
    })
