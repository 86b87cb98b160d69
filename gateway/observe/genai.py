"""The OpenTelemetry GenAI semantic conventions as the gateway writes them: attribute names,
and a call's messages in the conventions' JSON shape for the opt-in content attributes
(``gen_ai.system_instructions``, ``gen_ai.input.messages``, ``gen_ai.output.messages``).

The content functions take messages already redacted by the caller (the turn knows its saved
passwords); they only reshape them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the earlier name of gen_ai.provider.name, for backends that read it
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_STREAM = "gen_ai.request.stream"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"

CHAT = "chat"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
AGENT = "cloudybot"
IMAGE_PART = {"type": "image", "content": "[picture not recorded]"}


def _arguments(text: str) -> Any:
    """A tool call's arguments as an object when they are JSON text of one, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _parts(content: object) -> list[dict[str, Any]]:
    """A chat message's content as parts: text, and pictures left out."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append({"type": "text", "content": str(part.get("text", ""))})
        else:
            parts.append(dict(IMAGE_PART))
    return parts


def tool_call_part(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """One tool call as a message part."""
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": _arguments(arguments)}


def _message(message: Mapping[str, Any]) -> dict[str, Any]:
    role = message.get("role", "user")
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response",
                                           "id": message.get("tool_call_id", ""),
                                           "response": message.get("content") or ""}]}
    parts = _parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(tool_call_part(call.get("id", ""), function.get("name", ""),
                                    function.get("arguments", "")))
    return {"role": role, "parts": parts}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def input_content(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``gen_ai.system_instructions`` (the system message) and ``gen_ai.input.messages``
    (the rest) of a chat call's ``messages`` (OpenAI's format), as JSON text."""
    system = [part for message in messages if message.get("role") == "system"
              for part in _parts(message.get("content"))]
    rest = [_message(message) for message in messages if message.get("role") != "system"]
    content = {INPUT_MESSAGES: _dumps(rest)}
    if system:
        content[SYSTEM_INSTRUCTIONS] = _dumps(system)
    return content


def output_content(text: str, calls: Iterable[tuple[str, str, str]],
                   finish_reason: str) -> str:
    """``gen_ai.output.messages`` of an answer: its ``text`` and tool ``calls`` (id, name,
    arguments), as JSON text."""
    parts = _parts(text) + [tool_call_part(*call) for call in calls]
    return _dumps([{"role": "assistant", "parts": parts, "finish_reason": finish_reason}])
