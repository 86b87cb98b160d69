"""The rules chat APIs hold a request's messages to, as checks: the fakes answer 400 when one
fails, and a provider plugin's tests can assert its requests pass them.

:func:`anthropic_violation` checks a Messages API request body (``POST /v1/messages``) and
:func:`openai_violation` a chat completions body; each returns the first rule broken, in the
API's words, or None. They follow the APIs' documented rules, so that a fake using them cannot
pass what the real API refuses (they may be stricter where a rule is unclear).
"""

from __future__ import annotations

import re
from typing import Any

# Anthropic's pattern for a tool_use id.
TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")


def anthropic_violation(body: Any) -> str | None:
    """The first Messages API rule ``body`` breaks (the API's message), or None.

    ``messages`` is a non-empty list; the first message is ``user`` and roles alternate
    ``user`` / ``assistant``; no content is empty (an empty string or list, or a text block
    without non-whitespace text), except that a final assistant message may be empty, and
    when it is not its text may not end in whitespace; ``tool_use`` blocks are in assistant
    messages, with unique ids of ``[a-zA-Z0-9_-]+``, and each is answered by a
    ``tool_result`` in the next message; ``tool_result`` blocks are in user messages, come
    before any other block there, and each answers a ``tool_use`` of the message just before
    (once).
    """
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"{where}.role: Input should be 'user' or 'assistant'"
        role = message["role"]
        if index == 0 and role != "user":
            return 'messages: first message must use the "user" role'
        if index and messages[index - 1].get("role") == role:
            return ('messages: roles must alternate between "user" and "assistant", but found '
                    f'multiple "{role}" roles in a row')
        final = index == len(messages) - 1
        blocks = _blocks(message.get("content"))
        if blocks is None:
            return f"{where}.content: Input should be a valid string or list of blocks"
        if not blocks:
            if final and role == "assistant":
                continue
            return (f"{where}: all messages must have non-empty content except for the "
                    "optional final assistant message")
        problem = _block_violation(where, blocks, role, seen_ids)
        problem = problem or _pairing_violation(messages, index, blocks)
        if problem:
            return problem
        if final and role == "assistant" and blocks[-1].get("type") == "text" \
                and blocks[-1]["text"] != blocks[-1]["text"].rstrip():
            return "messages: final assistant content cannot end with trailing whitespace"
    return None


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    """A message's content as blocks (a string is one text block); None if it is neither."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list) and all(isinstance(block, dict) for block in content):
        return content
    return None


def _block_violation(where: str, blocks: list[dict[str, Any]], role: str,
                     seen_ids: set[str]) -> str | None:
    """A rule one message's blocks break on their own (``seen_ids``: tool_use ids so far)."""
    results_over = False
    for number, block in enumerate(blocks):
        at, kind = f"{where}.content.{number}", block.get("type")
        if kind == "text" and not (isinstance(block.get("text"), str) and block["text"].strip()):
            return "messages: text content blocks must contain non-whitespace text"
        if kind == "tool_use":
            if role != "assistant":
                return f"{at}: tool_use blocks may only appear in assistant messages"
            block_id = block.get("id")
            if not isinstance(block_id, str) or not TOOL_USE_ID.fullmatch(block_id):
                return f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if block_id in seen_ids:
                return f"{at}: `tool_use` ids must be unique"
            seen_ids.add(block_id)
            if not isinstance(block.get("name"), str) or not block["name"] \
                    or not isinstance(block.get("input"), dict):
                return f"{at}: a tool_use block needs a name and an input object"
        if kind == "tool_result":
            if role != "user":
                return f"{at}: tool_result blocks may only appear in user messages"
            if results_over:
                return (f"{at}: tool_result blocks must come first in a user message, before "
                        "any other content")
            content = block.get("content")
            if content is not None and not _blocks(content):
                return f"{at}.content: tool_result content must not be empty"
        else:
            results_over = True
    return None


def _pairing_violation(messages: list[dict[str, Any]], index: int,
                       blocks: list[dict[str, Any]]) -> str | None:
    """A tool_result that answers no tool_use of the message before, or a tool_use the next
    message does not answer."""
    if messages[index]["role"] == "user":
        before = (_blocks(messages[index - 1].get("content")) or []) if index else []
        asked = {b.get("id") for b in before if b.get("type") == "tool_use"}
        answered: set[Any] = set()
        for number, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                continue
            use_id = block.get("tool_use_id")
            if use_id not in asked or use_id in answered:
                return (f"messages.{index}.content.{number}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {use_id}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message.")
            answered.add(use_id)
        return None
    after = messages[index + 1].get("content") if index + 1 < len(messages) else []
    answers = {b.get("tool_use_id") for b in _blocks(after) or []
               if b.get("type") == "tool_result"}
    missing = [b.get("id") for b in blocks
               if b.get("type") == "tool_use" and b.get("id") not in answers]
    if missing:
        return (f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(map(str, missing))}. Each `tool_use` block "
                "must have a corresponding `tool_result` block in the next message.")
    return None


def openai_violation(body: Any) -> tuple[str, str] | None:
    """The first chat completions rule ``body`` breaks, as (message, param), or None.

    ``messages`` is a non-empty list of objects with a known role; an assistant message
    without ``tool_calls`` has content (not null); a ``tool`` message answers a call of the
    assistant message with ``tool_calls`` just before it (only other answers between them),
    each once; and such an assistant message is followed by answers to all its calls.
    """
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return "[] is too short - 'messages'", "messages"
    open_calls: list[Any] = []  # calls of the last assistant message not yet answered
    calling = False  # between an assistant message with tool_calls and its last answer
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', " \
                   "'user', 'tool'.", f"messages.[{index}].role"
        if role == "tool":
            if not calling or message.get("tool_call_id") not in open_calls:
                return ("Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.", f"messages.[{index}].role")
            open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            return _unanswered(open_calls)
        calls = message.get("tool_calls") if role == "assistant" else None
        calling = bool(calls)
        open_calls = [call.get("id") for call in calls or () if isinstance(call, dict)]
        if role == "assistant" and not calls and message.get("content") is None:
            return ("Invalid value for 'content': expected a string, got null.",
                    f"messages.[{index}].content")
    return _unanswered(open_calls) if open_calls else None


def _unanswered(calls: list[Any]) -> tuple[str, str]:
    return ("An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(map(str, calls))}", "messages")
