"""The ``anthropic`` provider: Anthropic's Messages API (``POST {base_url}/v1/messages``).

The gateway speaks OpenAI's chat shape inside; this maps it both ways. System messages become
the ``system`` text. Pictures become ``image`` blocks. An assistant's tool calls become
``tool_use`` blocks, and tool results become ``tool_result`` blocks in a user turn, with
consecutive turns of one role merged, since the API wants them alternating; any history the
gateway keeps (one starting with a reply, tool exchanges cut short, empty content) becomes a
request the API accepts (see :func:`to_anthropic`). The answer's
``text`` and ``tool_use`` blocks come back as the reply and its tool calls, and
``input_tokens`` / ``output_tokens`` are billed.

HTTP, retries (429, 5xx, 529 "overloaded", with ``Retry-After``), timeouts and the checks on
an untrusted answer are the ``openai`` provider's (this class is one of it, on another path).
Streaming reads Anthropic's events: ``content_block_delta`` text is handed on as it arrives;
tool input arrives as ``input_json_delta`` pieces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway import (
    Completion,
    CompletionRequest,
    HTTPClientError,
    Place,
    PluginHost,
    PluginSettings,
    Provider,
    ProviderUnavailable,
    Response,
    hookimpl,
    jsonio,
    options,
    setting,
    whole_tool_exchanges,
)
from plugins.openai import (
    MAX_STREAM_CHARS,
    OpenAIProvider,
    _json_body,
    _malformed,
    _token_count,
    _tool_call,
    stream_broke_off,
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
# The user turn put first when the history kept starts with the assistant (see to_anthropic).
EARLIER_MESSAGES = "(Earlier messages of this conversation are not shown here.)"
# Anthropic's stop reasons in the finish reasons traces use (OpenAI's words).
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                "tool_use": "tool_calls", "refusal": "content_filter", "pause_turn": "pause"}


class AnthropicProvider(OpenAIProvider):
    """Messages against ``{base_url}/v1/messages``."""

    name = "anthropic"
    path = "/v1/messages"

    def _headers(self) -> dict[str, str]:
        """Anthropic's key header and API version."""
        return {"Accept": "application/json, text/event-stream", "x-api-key": self._api_key,
                "anthropic-version": API_VERSION}

    def _payload(self, request: CompletionRequest) -> dict[str, Any]:
        system, messages = to_anthropic(request.messages)
        payload: dict[str, Any] = {"model": request.model, "max_tokens": request.max_tokens,
                                   "messages": messages}
        if system:
            payload["system"] = system
        if request.tools:
            payload["tools"] = [_tool(tool) for tool in request.tools]
        return payload

    async def stream(self, request: CompletionRequest,
                     on_text: Callable[[str], Awaitable[None]]) -> Completion:
        """As :meth:`complete`, with ``stream: true``: text handed to ``on_text`` as it comes."""
        payload = {**self._payload(request), "stream": True}

        async def read(response: Response) -> Completion:
            if response.content_type != "text/event-stream":
                completion = self._parse(await _json_body(response), request.model)
                if completion.text:
                    await on_text(completion.text)
                return completion
            return self._parse(await _gather_events(response, on_text), request.model)
        return await self._call(payload, read)

    @staticmethod
    def _parse(body: Any, model: str) -> Completion:
        """A Messages answer as a :class:`Completion`; anything else is a 502."""
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise _malformed("it has no content blocks")
        texts, calls = [], []
        for block in content:
            if block.get("type") == "text":
                if not isinstance(block.get("text"), str):
                    raise _malformed("a text block holds no text")
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                calls.append(_tool_call({"id": block.get("id"), "function": {
                    "name": block.get("name"), "arguments": _input_text(block.get("input"))}}))
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        reported = body.get("model")
        return Completion(
            text="".join(texts),
            model=reported if isinstance(reported, str) and reported else model,
            prompt_tokens=_token_count(usage, "input_tokens"),
            completion_tokens=_token_count(usage, "output_tokens"),
            tool_calls=tuple(calls), raw=body,
            finish_reason=STOP_REASONS.get(str(body.get("stop_reason"))))


def _input_text(value: Any) -> Any:
    """A tool_use block's input as the JSON text a tool call carries (an object is encoded;
    anything else is passed on, for the call's checks to refuse)."""
    return json.dumps(value) if isinstance(value, dict) else value


def _tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as an Anthropic tool."""
    function = tool.get("function", {})
    return {"name": function.get("name", ""), "description": function.get("description", ""),
            "input_schema": function.get("parameters") or {"type": "object"}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A message's content (text, or OpenAI parts with pictures) as content blocks; text
    that is empty or only whitespace is left out, since the API refuses it."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and str(part.get("text") or "").strip():
            blocks.append({"type": "text", "text": str(part["text"])})
        elif part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            head, _, data = url.partition(",")
            media = head.removeprefix("data:").removesuffix(";base64")
            blocks.append({"type": "image",
                           "source": {"type": "base64", "media_type": media, "data": data}})
    return blocks


class _ToolIds:
    """Tool call ids as the API takes them: ``[a-zA-Z0-9_-]+`` and unique in the request. An id
    that is already so is kept; another (from an OpenAI-compatible model, or used twice in a
    long thread) gets a stand-in, which the call's result, always right after it (see
    :func:`gateway.whole_tool_exchanges`), is given too."""

    def __init__(self) -> None:
        self._used: set[str] = set()
        self._latest: dict[str, str] = {}

    def call(self, call_id: str) -> str:
        """The id to send for a call with ``call_id``."""
        sent = re.sub(r"[^a-zA-Z0-9_-]", "_", call_id) or "call"
        if sent in self._used:
            sent = f"{sent}_{len(self._used)}"
        while sent in self._used:
            sent += "_"
        self._used.add(sent)
        self._latest[call_id] = sent
        return sent

    def result(self, call_id: str) -> str:
        """The id sent for the call a result with ``call_id`` answers."""
        return self._latest.get(call_id, call_id)


def to_anthropic(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shaped chat messages as Anthropic's ``system`` text and turns the Messages API
    accepts, whatever history the gateway kept.

    The history first has its tool exchanges made whole (:func:`gateway.whole_tool_exchanges`:
    a result whose call was cut off becomes user text, a call whose result was cut off is
    answered "no result"). Then system messages join the ``system`` text; empty content is
    left out; consecutive messages of one role are merged into one turn (tool results first in
    theirs, as they follow their calls). When the history kept begins with the assistant (after
    a summary rolling memory keeps the last messages, which may start with a reply; the prompt
    drops its oldest messages under ``MAX_CONTEXT``), a short user turn saying that earlier
    messages are not shown comes first: the API wants a user turn first, and folding the
    reply into the system text would lose its tool calls and its being the model's own words.
    A final assistant turn (never sent by the gateway) loses trailing whitespace, as the API
    wants.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    ids = _ToolIds()

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})

    for message in whole_tool_exchanges(messages):
        role = message.get("role")
        if role == "system":
            system.append(str(message.get("content") or ""))
        elif role == "user":
            add("user", _blocks(message.get("content")))
        elif role == "assistant":
            add("assistant", _blocks(message.get("content"))
                + [_tool_use(call, ids) for call in message.get("tool_calls") or ()])
        elif role == "tool":
            result: dict[str, Any] = {"type": "tool_result",
                                      "tool_use_id": ids.result(message["tool_call_id"])}
            content = str(message.get("content") or "")
            if content.strip():
                result["content"] = content
            add("user", [result])
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": EARLIER_MESSAGES}]})
    last = turns[-1]["content"][-1]
    if turns[-1]["role"] == "assistant" and last["type"] == "text":
        last["text"] = last["text"].rstrip()
    return "\n\n".join(text for text in system if text), turns


def _tool_use(call: dict[str, Any], ids: _ToolIds) -> dict[str, Any]:
    """An OpenAI tool call as a ``tool_use`` block (arguments that are not a JSON object are
    sent as an empty input)."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (TypeError, ValueError):
        arguments = {}
    return {"type": "tool_use", "id": ids.call(call["id"]),
            "name": str(function.get("name") or "tool"),
            "input": arguments if isinstance(arguments, dict) else {}}


async def _gather_events(response: Response,
                         on_text: Callable[[str], Awaitable[None]]) -> dict[str, Any]:
    """Read Anthropic's event stream, handing text on; return it as one Messages body."""
    gathered = _Gathered()
    try:
        async for raw in response.lines():
            event = _stream_event(raw)
            if event is None:
                continue
            if event.get("type") == "message_stop":
                break
            text = gathered.take(event)
            if text is not None:
                await on_text(text)
            if gathered.size > MAX_STREAM_CHARS:
                raise _malformed(f"it streamed more than {MAX_STREAM_CHARS} characters")
    except HTTPClientError as exc:
        raise stream_broke_off(exc) from None
    return gathered.body()


def _stream_event(raw: bytes) -> dict[str, Any] | None:
    """The event of a ``data:`` line of the stream (None for any other line); raise if it is
    not a JSON object."""
    line = raw.strip()
    if not line.startswith(b"data:"):
        return None
    try:
        event = jsonio.loads(line[5:].strip())
    except (ValueError, RecursionError):
        raise _malformed("a stream event is not JSON") from None
    if not isinstance(event, dict):
        raise _malformed("a stream event is not an object")
    return event


@dataclass
class _Gathered:
    """A Messages body put together from the stream's events: its model, usage and stop
    reason, its content blocks by index, and the pieces of each tool call's input."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[int, list[str]] = field(default_factory=dict)
    answer: dict[str, Any] = field(default_factory=lambda: {"usage": {}})
    size: int = 0  # characters streamed so far (text and tool input)

    def take(self, event: dict[str, Any]) -> str | None:
        """Apply one event (not ``message_stop``); the text it streamed, if any. Raise if
        it is malformed or reports an error."""
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            started = event["message"]
            self.answer["model"] = started.get("model")
            if isinstance(started.get("usage"), dict):
                self.answer["usage"].update(started["usage"])
        elif kind == "message_delta" and isinstance(event.get("usage"), dict):
            self.answer["usage"].update(event["usage"])
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.answer["stop_reason"] = delta["stop_reason"]
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            index = event.get("index")
            if type(index) is not int or index in self.blocks:
                raise _malformed("a content block has no usable index")
            self.blocks[index] = dict(event["content_block"])
            self.inputs[index] = []
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            return self._add(event.get("index"), event["delta"])
        elif kind == "error":  # overloaded_error mid-stream, say: before text, fall back
            raise ProviderUnavailable("the LLM provider's stream reported an error",
                                      reason="stream_error")
        return None

    def _add(self, index: Any, delta: dict[str, Any]) -> str | None:
        """A block's delta: text (returned, to hand on) or a piece of a tool call's input."""
        if index not in self.blocks:
            raise _malformed("a delta for a block that did not start")
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            text: str = delta["text"]
            self.blocks[index]["text"] = self.blocks[index].get("text", "") + text
            self.size += len(text)
            return text
        if delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self.inputs[index].append(delta["partial_json"])
            self.size += len(delta["partial_json"])
        return None

    def body(self) -> dict[str, Any]:
        """The Messages body: each tool call's input parsed from its pieces."""
        for index, block in self.blocks.items():
            if block.get("type") == "tool_use" and self.inputs[index]:
                try:
                    block["input"] = json.loads("".join(self.inputs[index]))
                except ValueError:
                    block["input"] = "".join(self.inputs[index])  # refused by the call's checks
        return {**self.answer, "content": [self.blocks[index] for index in sorted(self.blocks)]}


@dataclass(frozen=True)
class AnthropicSettings:
    """``[plugins.anthropic]``: used when ``CLOUDYBOT_LLM_PROVIDER=anthropic``."""

    base_url: str = setting(ANTHROPIC_BASE_URL, "the Messages API's base URL (requests go to "
                            "{base_url}/v1/messages)",
                            place=Place(env="CLOUDYBOT_ANTHROPIC_BASE_URL"))
    api_key: str = setting("", "API key; empty: $ANTHROPIC_API_KEY (set it in the environment)",
                           secret=True,
                           place=Place(env=("CLOUDYBOT_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY")))
    timeout_seconds: float = setting(60.0, "one request may take this long (504 after)",
                                     place=Place(env="CLOUDYBOT_ANTHROPIC_TIMEOUT_SECONDS"),
                                     parse=options.positive_float)
    max_retries: int = setting(2, "retries on 429/5xx/529 and dropped connections",
                               place=Place(env="CLOUDYBOT_ANTHROPIC_MAX_RETRIES"),
                               parse=options.count)


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the provider's settings."""
    return PluginSettings("anthropic", AnthropicSettings)


@hookimpl
def register_providers(host: PluginHost) -> list[Provider]:
    """Register the Anthropic provider (used when the settings name it)."""
    settings = host.settings.plugin(AnthropicSettings)
    return [AnthropicProvider(settings.base_url, settings.api_key, settings.timeout_seconds,
                              settings.max_retries)]
