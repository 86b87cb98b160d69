"""The ``openai`` provider: any OpenAI-compatible ``/chat/completions`` endpoint over aiohttp.

Retries 429 and 5xx answers (and dropped connections) with exponential backoff, honouring
``Retry-After``; a request that outlives ``CLOUDYBOT_LLM_TIMEOUT_SECONDS`` is a 504.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from typing import Any

import aiohttp

from gateway import (
    Completion,
    CompletionRequest,
    Gateway,
    Provider,
    ProviderError,
    ProviderTimeout,
    hookimpl,
)
from gateway.tools import ToolCall

log = logging.getLogger(__name__)
BACKOFF_BASE_SECONDS = 0.5
MAX_WAIT_SECONDS = 30.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


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

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int) -> None:
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Open the one HTTP session this provider uses."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._session = aiohttp.ClientSession(headers=headers)

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(self, request: CompletionRequest) -> Completion:
        """POST the request; retry what is worth retrying; map failures to 502/504."""
        if self._session is None:
            raise ProviderError("the openai provider has not started")
        payload: dict[str, Any] = {"model": request.model, "messages": list(request.messages),
                                   "max_tokens": request.max_tokens}
        if request.tools:
            payload["tools"] = list(request.tools)
        for attempt in range(self.max_retries + 1):
            last_try = attempt == self.max_retries
            try:
                async with self._session.post(
                    self.url, json=payload, timeout=aiohttp.ClientTimeout(total=self.timeout)
                ) as response:
                    if response.status in RETRY_STATUSES and not last_try:
                        wait = retry_after_seconds(response.headers.get("Retry-After"))
                        await self._back_off(attempt, wait, f"HTTP {response.status}")
                        continue
                    try:
                        body = await response.json(content_type=None)
                    except (ValueError, aiohttp.ClientPayloadError):
                        body = None
                    if response.status != 200:
                        # The provider's words stay in our log; the client learns the status.
                        log.warning("LLM provider answered HTTP %d: %s", response.status,
                                    _error_detail(body) if body else "")
                        raise ProviderError(
                            f"the LLM provider answered HTTP {response.status}")
                    return self._parse(body, request.model)
            except TimeoutError:
                raise ProviderTimeout(
                    f"the LLM provider did not answer within {self.timeout:g} s") from None
            except aiohttp.ClientError as exc:
                if last_try:
                    raise ProviderError(f"cannot reach the LLM provider: {exc}") from None
                await self._back_off(attempt, None, type(exc).__name__)
        raise ProviderError("the LLM provider kept failing")

    @staticmethod
    async def _back_off(attempt: int, retry_after: float | None, reason: str) -> None:
        wait = retry_after if retry_after is not None else BACKOFF_BASE_SECONDS * 2**attempt
        wait = min(wait, MAX_WAIT_SECONDS)
        log.warning("LLM provider failed (%s); retry %d in %.1f s", reason, attempt + 1, wait)
        await asyncio.sleep(wait)

    @staticmethod
    def _parse(body: Any, model: str) -> Completion:
        try:
            message = body["choices"][0]["message"]
            text = message.get("content") or ""
            if not isinstance(text, str):
                raise TypeError("content is not a string")
            tool_calls = tuple(
                ToolCall(str(call["id"]), str(call["function"]["name"]),
                         call["function"].get("arguments") or "{}")
                for call in message.get("tool_calls") or ())
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ProviderError(f"the LLM provider's answer is malformed ({exc})") from None
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        return Completion(
            text=text,
            model=body.get("model") if isinstance(body.get("model"), str) else model,
            prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else None,
            completion_tokens=completion_tokens if isinstance(completion_tokens, int) else None,
            tool_calls=tool_calls,
            raw=body,
        )


@hookimpl(trylast=True)
def register_providers(gateway: Gateway) -> list[Provider]:
    """Register the OpenAI-compatible provider from the gateway's settings."""
    settings = gateway.settings
    return [OpenAIProvider(settings.llm_base_url, settings.llm_api_key,
                           settings.llm_timeout_seconds, settings.llm_max_retries)]
