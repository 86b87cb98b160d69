"""A chat history every chat API accepts: tool exchanges made whole before a provider maps it.

The gateway keeps history in OpenAI's chat shape, and what it sends is cut in several places:
rolling memory keeps only the last ``KEEP_RECENT`` messages after a summary, the prompt drops
its oldest units under ``MAX_CONTEXT``, and a session file may have lost lines. So the
messages a provider is given can hold a ``tool`` result whose call was cut off, or an
assistant's tool calls whose results were. Chat APIs refuse both (OpenAI: a ``tool`` message
must answer the ``tool_calls`` just before it, and those calls must all be answered;
Anthropic: every ``tool_result`` must match a ``tool_use`` of the turn before, and every
``tool_use`` must be answered in the turn after).

:func:`whole_tool_exchanges` repairs that without dropping what the model should know:

- a result that answers no call open just before it becomes a user message saying what an
  earlier tool call returned (its text is kept; only the link to a call that is no longer
  there goes);
- a call left without its result gets a result saying none was kept, placed right after the
  call, so the model knows it asked and that the answer is gone (rather than the call
  vanishing, or the model being refused);
- an assistant message with neither text nor tool calls says nothing and is left out.

A well-formed history comes out equal, in order (less any assistant message that says nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ORPHAN_RESULT = "An earlier tool call (no longer shown) returned:\n"
NO_RESULT = "No result: the result of this tool call was not kept."


def whole_tool_exchanges(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` (OpenAI's chat shape) with every tool call answered right after it and
    every tool result answering a call: see the module docstring."""
    repaired: list[dict[str, Any]] = []
    open_calls: list[str] = []  # ids of the calls just made, not yet answered, in order

    def close_calls() -> None:
        repaired.extend({"role": "tool", "tool_call_id": call_id, "content": NO_RESULT}
                        for call_id in open_calls)
        open_calls.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
                repaired.append(dict(message))
            else:
                if open_calls:
                    close_calls()
                repaired.append({"role": "user",
                                 "content": ORPHAN_RESULT + _text(message.get("content"))})
            continue
        if open_calls:  # most messages: none open (a closure call per message costs)
            close_calls()
        if role != "assistant" or ("tool_calls" not in message and message.get("content")):
            repaired.append(dict(message))  # nothing to repair
            continue
        calls = _answerable_calls(message.get("tool_calls"))
        content = message.get("content")
        if not calls and not content:
            continue  # says nothing
        kept = {key: value for key, value in message.items() if key != "tool_calls"}
        if calls:
            kept["tool_calls"] = calls
        elif content is None:
            kept["content"] = ""
        repaired.append(kept)
        open_calls.extend(call["id"] for call in calls)
    close_calls()
    return repaired


def _answerable_calls(calls: Any) -> list[dict[str, Any]]:
    """The tool calls that can be answered: objects with an id not seen before in the
    message (a call without one could never be matched by a result)."""
    answerable: list[dict[str, Any]] = []
    seen: set[str] = set()
    for call in calls if isinstance(calls, list) else ():
        call_id = call.get("id") if isinstance(call, dict) else None
        if isinstance(call_id, str) and call_id and call_id not in seen:
            seen.add(call_id)
            answerable.append(call)
    return answerable


def _text(content: Any) -> str:
    """A message's content as text: a string as is, the text parts of a list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return ""
