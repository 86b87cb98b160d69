"""The ``openai`` provider: any OpenAI-compatible ``/chat/completions`` endpoint.

It talks HTTP through :mod:`gateway.http_client` (keep-alive connections, httptools' parser),
at a fraction of aiohttp's client's CPU per call.

Retries 429 and 5xx answers (and dropped connections) with exponential backoff, honouring
``Retry-After``; a request that outlives ``CLOUDYBOT_LLM_TIMEOUT_SECONDS`` is a 504. Streams
(``stream: true`` with ``stream_options.include_usage``) when the gateway asks for text as it
arrives; a stream that breaks off after text was handed on is a 502, never retried (the text
would come twice).

Every history the gateway keeps is sent as one the API accepts: tool exchanges cut short (by
rolling memory's keep-recent window or the prompt's trimming) are made whole first
(:func:`gateway.whole_tool_exchanges`).

The answer is untrusted input: a body that is not a chat completion (no choices,
nested too deep to parse, a tool call without an id or name) is a 502; usage counts that are
not non-negative integers are treated as not reported; tool-call arguments that are not JSON
text become a tool error the model reads.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway import (
    Completion,
    CompletionRequest,
    ConfigError,
    HTTPClient,
    HTTPClientError,
    Place,
    PluginHost,
    PluginSettings,
    Provider,
    ProviderError,
    ProviderTimeout,
    ProviderUnavailable,
    Response,
    ToolCall,
    current_span,
    hookimpl,
    jsonio,
    options,
    setting,
    shown,
    whole_tool_exchanges,
)

log = logging.getLogger(__name__)
OPENAI_BASE_URL = "https://api.openai.com/v1"
BACKOFF_BASE_SECONDS = 0.5
MAX_WAIT_SECONDS = 30.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})  # 529: Anthropic's "overloaded"
# No call reads or writes a billion tokens: a larger count is not a count (the gateway then
# applies its tighter bounds on reported usage to what is left).
MAX_REPORTED_TOKENS = 10**9
# What one streamed answer may amount to (text and tool calls), and how many tool calls.
MAX_STREAM_CHARS = 4_000_000
MAX_STREAMED_TOOL_CALLS = 128
CHAT_PATH = "/chat/completions"


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds (it may be a number or an HTTP date); None if absent/bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))[:300]
    return ""


class OpenAIProvider(Provider):
    """Chat completions against ``{base_url}/chat/completions``."""

    name = "openai"
    path = CHAT_PATH  # under the base URL

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}{CHAT_PATH}"
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: HTTPClient | None = None

    async def start(self) -> None:
        """Open the one HTTP client (its pool of connections) this provider uses."""
        try:
            self._client = HTTPClient(self.base_url, headers=self._headers())
        except ValueError as exc:
            raise ConfigError(f"the LLM base URL or API key cannot be used: {exc}") from None

    def _headers(self) -> dict[str, str]:
        """What every request carries: the key, as this API wants it."""
        headers = {"Accept": "application/json, text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def close(self) -> None:
        """Close the HTTP client's connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _payload(self, request: CompletionRequest) -> dict[str, Any]:
        # Any history the gateway keeps may have tool exchanges cut short; OpenAI refuses them.
        payload: dict[str, Any] = {"model": request.model,
                                   "messages": whole_tool_exchanges(request.messages),
                                   "max_tokens": request.max_tokens}
        if request.tools:
            payload["tools"] = list(request.tools)
        return payload

    async def complete(self, request: CompletionRequest) -> Completion:
        """POST the request; retry what is worth retrying; map failures to 502/504."""
        async def read(response: Response) -> Completion:
            return self._parse(await _json_body(response), request.model)
        return await self._call(self._payload(request), read)

    async def stream(self, request: CompletionRequest,
                     on_text: Callable[[str], Awaitable[None]]) -> Completion:
        """As :meth:`complete`, with ``stream: true``: each piece of content is handed to
        ``on_text`` as it arrives; tool calls and usage are gathered from the events."""
        payload = {**self._payload(request), "stream": True,
                   "stream_options": {"include_usage": True}}

        async def read(response: Response) -> Completion:
            if response.content_type != "text/event-stream":  # a server that cannot stream
                completion = self._parse(await _json_body(response), request.model)
                if completion.text:
                    await on_text(completion.text)
                return completion
            return self._parse(await _gather_stream(response, on_text), request.model)
        return await self._call(payload, read)

    async def _call(self, payload: dict[str, Any],
                    read: Callable[[Response], Awaitable[Completion]]) -> Completion:
        client = self._client
        if client is None:
            raise ProviderError("the openai provider has not started")
        body = jsonio.dumps(payload)
        for attempt in range(self.max_retries + 1):
            last_try = attempt == self.max_retries
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._attempt(client, body, read, last_try)
            except TimeoutError:
                raise ProviderTimeout(
                    f"the LLM provider did not answer within {self.timeout:g} s") from None
            except _RetryLater as later:
                await self._back_off(attempt, later.wait, f"HTTP {later.status}")
            except HTTPClientError as exc:  # no connection, or it broke before an answer
                if last_try:
                    raise ProviderUnavailable(f"cannot reach the LLM provider: {exc}",
                                              reason="connection") from None
                await self._back_off(attempt, None, type(exc).__name__)
        raise ProviderUnavailable("the LLM provider kept failing", reason="retries")

    async def _attempt(self, client: HTTPClient, body: bytes,
                       read: Callable[[Response], Awaitable[Completion]],
                       last_try: bool) -> Completion:
        """One POST. Failures while reading an answer are ProviderErrors (not retried)."""
        async with client.post(self.path, body) as response:
            if response.status in RETRY_STATUSES and not last_try:
                raise _RetryLater(response.status,
                                  retry_after_seconds(response.header("Retry-After")))
            if response.status != 200:
                answer = await _json_body(response)
                # The provider's words stay in our log; the client learns the status.
                log.warning("LLM provider answered HTTP %d: %s", response.status,
                            _error_detail(answer) if answer else "")
                message = f"the LLM provider answered HTTP {response.status}"
                if unavailable(response.status):  # another provider may answer
                    raise ProviderUnavailable(message, reason=str(response.status))
                raise ProviderError(message)
            return await read(response)

    @staticmethod
    async def _back_off(attempt: int, retry_after: float | None, reason: str) -> None:
        """Wait before retry ``attempt + 1``; the call's span gets a ``retry`` event and its
        ``cloudybot.provider.retries`` count."""
        wait = retry_after if retry_after is not None else BACKOFF_BASE_SECONDS * 2**attempt
        wait = min(wait, MAX_WAIT_SECONDS)
        log.warning("LLM provider failed (%s); retry %d in %.1f s", reason, attempt + 1, wait)
        span = current_span()
        span.event("retry", {"cloudybot.retry.attempt": attempt + 1,
                             "cloudybot.retry.reason": reason,
                             "cloudybot.retry.wait_seconds": wait})
        span.count("cloudybot.provider.retries")
        await asyncio.sleep(wait)

    @staticmethod
    def _parse(body: Any, model: str) -> Completion:
        """The answer as a :class:`Completion`; a body that is not a chat completion is a 502.
        ``model`` (the one asked for) stands in when the answer names none."""
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _malformed("it has no choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise _malformed("its choice has no message")
        text = message.get("content")
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise _malformed("the message content is not text")
        calls = message.get("tool_calls")
        if calls is None:
            calls = []
        if not isinstance(calls, list):
            raise _malformed("tool_calls is not a list")
        usage = body.get("usage")
        if usage is None:
            usage = {}
        if not isinstance(usage, dict):
            log.warning("the LLM provider reported usage %s, not an object; counting tokens "
                        "ourselves", shown(usage))
            usage = {}
        reported = body.get("model")
        finish = choices[0].get("finish_reason")
        return Completion(
            text=text,
            model=reported if isinstance(reported, str) and reported else model,
            prompt_tokens=_token_count(usage, "prompt_tokens"),
            completion_tokens=_token_count(usage, "completion_tokens"),
            tool_calls=tuple(_tool_call(call) for call in calls),
            raw=body,
            finish_reason=finish if isinstance(finish, str) else None,
        )


class _RetryLater(Exception):
    """An answer worth asking again for (429, 5xx), after ``wait`` seconds if it said."""

    def __init__(self, status: int, wait: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.wait = wait


async def _json_body(response: Response) -> Any:
    """The body as JSON; None when it is not JSON, nested too deep to read, too large or cut
    short (malformed)."""
    try:
        return jsonio.loads(await response.read())
    except (ValueError, RecursionError, HTTPClientError):
        return None


async def _gather_stream(response: Response,
                         on_text: Callable[[str], Awaitable[None]]) -> dict[str, Any]:
    """Read OpenAI's chunked event stream, handing each piece of content to ``on_text``;
    return what it amounted to as one chat.completion body (for :meth:`_parse`)."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    answer: dict[str, Any] = {}
    finish: Any = None
    size = 0
    try:
        async for raw in response.lines():
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue  # comments, event names, blank separators
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                event = jsonio.loads(data)
            except (ValueError, RecursionError):
                raise _malformed("a stream event is not JSON") from None
            if not isinstance(event, dict):
                raise _malformed("a stream event is not an object")
            for key in ("model", "usage"):
                if event.get(key) is not None:
                    answer[key] = event[key]
            delta = _first_delta(event)
            finish = _finish_reason(event) or finish
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                size += len(piece)
                text.append(piece)
                await on_text(piece)
            for call in _listed(delta.get("tool_calls")):
                size += _add_tool_call_delta(calls, call)
            if size > MAX_STREAM_CHARS:
                raise _malformed(f"it streamed more than {MAX_STREAM_CHARS} characters")
    except HTTPClientError as exc:  # cut short, malformed, or a line too long
        raise stream_broke_off(exc) from None
    message: dict[str, Any] = {"content": "".join(text)}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return {**answer, "choices": [{"message": message, "finish_reason": finish}]}


def _finish_reason(event: dict[str, Any]) -> Any:
    """A stream event's finish reason, if it carries one (the last content event does)."""
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0].get("finish_reason")
    return None


def _first_delta(event: dict[str, Any]) -> dict[str, Any]:
    choices = event.get("choices")
    if choices is None or choices == []:
        return {}
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise _malformed("a stream event's choices are not a list of objects")
    delta = choices[0].get("delta")
    return delta if isinstance(delta, dict) else {}


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _malformed("tool_calls is not a list")
    return value


def _add_tool_call_delta(calls: dict[int, dict[str, Any]], delta: Any) -> int:
    """Fold one streamed piece of a tool call into ``calls``; return the characters added."""
    index = delta.get("index") if isinstance(delta, dict) else None
    if type(index) is not int or not 0 <= index < MAX_STREAMED_TOOL_CALLS:
        raise _malformed("a streamed tool call has no usable index")
    call = calls.setdefault(index, {"id": "", "type": "function",
                                    "function": {"name": "", "arguments": ""}})
    if isinstance(delta.get("id"), str):
        call["id"] = delta["id"]
    function = delta.get("function")
    added = 0
    if isinstance(function, dict):
        for part in ("name", "arguments"):
            piece = function.get(part)
            if isinstance(piece, str):
                call["function"][part] += piece
                added += len(piece)
    return added


def unavailable(status: int) -> bool:
    """Whether an HTTP status says the provider cannot answer now (429, 5xx, 529): one
    another provider may answer in its place."""
    return status == 429 or status >= 500


def stream_broke_off(exc: HTTPClientError) -> ProviderUnavailable:
    """A stream that broke off: the connection failed (the gateway falls back to another
    provider only if no text was handed on yet)."""
    return ProviderUnavailable(f"the LLM provider's stream broke off: {type(exc).__name__}",
                               reason="connection")


def _malformed(reason: str) -> ProviderError:
    return ProviderError(f"the LLM provider's answer is malformed: {reason}")


def _token_count(usage: dict[str, Any], key: str) -> int | None:
    """A reported token count, or None when it is absent or not a plausible count."""
    value = usage.get(key)
    if value is None:
        return None
    if type(value) is int and 0 <= value <= MAX_REPORTED_TOKENS:
        return value
    log.warning("the LLM provider reported usage.%s = %s, not a token count; counting tokens "
                "ourselves", key, shown(value))
    return None


def _tool_call(call: Any) -> ToolCall:
    """One entry of ``tool_calls``. Without an id or a name it cannot be answered: a 502.
    Arguments that are not JSON text make a call the model is told it got wrong."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise _malformed("a tool call has no function")
    call_id, name = call.get("id"), function.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise _malformed("a tool call has no id")
    if not isinstance(name, str) or not name:
        raise _malformed("a tool call has no function name")
    arguments = function.get("arguments", "")
    if isinstance(arguments, str):
        return ToolCall(call_id, name, arguments or "{}")
    try:
        sent = json.dumps(arguments)
    except (ValueError, RecursionError):
        sent = "{}"
    return ToolCall(call_id, name, sent, malformed=(
        f"the arguments must be JSON text of an object (a string), not {_json_kind(arguments)}"))


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = {dict: "an object", list: "an array", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class OpenAISettings:
    """``[plugins.openai]``; the variables keep their ``CLOUDYBOT_LLM_*`` names."""

    base_url: str = setting("", "OpenAI-compatible endpoint; requests go to "
                            "{base_url}/chat/completions (empty: " + OPENAI_BASE_URL + ")",
                            place=Place(env="CLOUDYBOT_LLM_BASE_URL"))
    api_key: str = setting("", "API key; empty: $OPENAI_API_KEY (set it in the environment)",
                           secret=True,
                           place=Place(env=("CLOUDYBOT_LLM_API_KEY", "OPENAI_API_KEY")))
    timeout_seconds: float = setting(60.0, "one provider request may take this long "
                                     "(504 after)",
                                     place=Place(env="CLOUDYBOT_LLM_TIMEOUT_SECONDS"),
                                     parse=options.positive_float)
    max_retries: int = setting(2, "retries on 429/5xx and dropped connections, with backoff",
                               place=Place(env="CLOUDYBOT_LLM_MAX_RETRIES"), parse=options.count)


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the provider's settings."""
    return PluginSettings("openai", OpenAISettings)


@hookimpl(trylast=True)
def register_providers(host: PluginHost) -> list[Provider]:
    """Register the OpenAI-compatible provider from the gateway's settings."""
    settings = host.settings.plugin(OpenAISettings)
    return [OpenAIProvider(settings.base_url or OPENAI_BASE_URL, settings.api_key,
                           settings.timeout_seconds, settings.max_retries)]
