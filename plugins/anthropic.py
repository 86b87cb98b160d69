"""The ``anthropic`` provider: Anthropic's Messages API (``POST {base_url}/v1/messages``).

The gateway speaks OpenAI's chat shape inside; this maps it both ways. System messages become
the ``system`` text. Pictures become ``image`` blocks. An assistant's tool calls become
``tool_use`` blocks, and tool results become ``tool_result`` blocks in a user turn, with
consecutive turns of one role merged, since the API wants them alternating. The answer's
``text`` and ``tool_use`` blocks come back as the reply and its tool calls, and
``input_tokens`` / ``output_tokens`` are billed.

HTTP, retries (429, 5xx, 529 "overloaded", with ``Retry-After``), timeouts and the checks on
an untrusted answer are the ``openai`` provider's (this class is one of it, on another path).
Streaming reads Anthropic's events: ``content_block_delta`` text is handed on as it arrives;
tool input arrives as ``input_json_delta`` pieces.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway import (
    Completion,
    CompletionRequest,
    HTTPClientError,
    Place,
    PluginHost,
    PluginSettings,
    Provider,
    ProviderError,
    Response,
    hookimpl,
    jsonio,
    options,
    setting,
)
from plugins.openai import (
    MAX_STREAM_CHARS,
    OpenAIProvider,
    _json_body,
    _malformed,
    _token_count,
    _tool_call,
)

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"


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
            tool_calls=tuple(calls), raw=body)


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
    """A user message's content (text, or OpenAI parts with pictures) as content blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content or []:
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "image_url":
            url = str(part.get("image_url", {}).get("url", ""))
            head, _, data = url.partition(",")
            media = head.removeprefix("data:").removesuffix(";base64")
            blocks.append({"type": "image",
                           "source": {"type": "base64", "media_type": media, "data": data}})
    return blocks


def to_anthropic(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shaped chat messages as Anthropic's ``system`` text and alternating turns."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        if role == "system":
            system.append(str(message.get("content") or ""))
        elif role == "user":
            add("user", _blocks(message.get("content")))
        elif role == "assistant":
            blocks = _blocks(message.get("content") or "")
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                blocks.append({"type": "tool_use", "id": call.get("id", ""),
                               "name": function.get("name", ""),
                               "input": arguments if isinstance(arguments, dict) else {}})
            add("assistant", blocks)
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""),
                          "content": str(message.get("content") or "")}])
    return "\n\n".join(text for text in system if text), turns


async def _gather_events(response: Response,
                         on_text: Callable[[str], Awaitable[None]]) -> dict[str, Any]:
    """Read Anthropic's event stream, handing text on; return it as one Messages body."""
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, list[str]] = {}
    answer: dict[str, Any] = {"usage": {}}
    size = 0
    try:
        async for raw in response.lines():
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            try:
                event = jsonio.loads(line[5:].strip())
            except (ValueError, RecursionError):
                raise _malformed("a stream event is not JSON") from None
            if not isinstance(event, dict):
                raise _malformed("a stream event is not an object")
            kind = event.get("type")
            if kind == "message_start" and isinstance(event.get("message"), dict):
                started = event["message"]
                answer["model"] = started.get("model")
                if isinstance(started.get("usage"), dict):
                    answer["usage"].update(started["usage"])
            elif kind == "message_delta" and isinstance(event.get("usage"), dict):
                answer["usage"].update(event["usage"])
            elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
                index = event.get("index")
                if type(index) is not int or index in blocks:
                    raise _malformed("a content block has no usable index")
                blocks[index] = dict(event["content_block"])
                inputs[index] = []
            elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
                index, delta = event.get("index"), event["delta"]
                if index not in blocks:
                    raise _malformed("a delta for a block that did not start")
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    blocks[index]["text"] = blocks[index].get("text", "") + delta["text"]
                    size += len(delta["text"])
                    await on_text(delta["text"])
                elif delta.get("type") == "input_json_delta" \
                        and isinstance(delta.get("partial_json"), str):
                    inputs[index].append(delta["partial_json"])
                    size += len(delta["partial_json"])
            elif kind == "error":
                raise ProviderError("the LLM provider's stream reported an error")
            elif kind == "message_stop":
                break
            if size > MAX_STREAM_CHARS:
                raise _malformed(f"it streamed more than {MAX_STREAM_CHARS} characters")
    except HTTPClientError as exc:
        raise ProviderError(f"the LLM provider's stream broke off: {type(exc).__name__}") \
            from None
    for index, block in blocks.items():
        if block.get("type") == "tool_use" and inputs[index]:
            try:
                block["input"] = json.loads("".join(inputs[index]))
            except ValueError:
                block["input"] = "".join(inputs[index])  # refused by the call's checks
    return {**answer, "content": [blocks[index] for index in sorted(blocks)]}


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
