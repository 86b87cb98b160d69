"""The ``offline`` provider: answers deterministically from its prompt, with no LLM account.

It lets the gateway run (and be tried) anywhere. It is a provider plugin like any other.
"""

from __future__ import annotations

import re
from typing import Any

from gateway import Completion, CompletionRequest, PluginHost, Provider, TextSink, hookimpl

MODEL = "offline"
STREAM_PIECES = 4
SUMMARY_CHARS = 1500
_TAG = re.compile(r"<[^>]+>")


def _quote(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OfflineProvider(Provider):
    """Deterministic replies that show what the gateway remembered for this turn."""

    name = "offline"

    async def complete(self, request: CompletionRequest) -> Completion:
        """Answer from the prompt alone. No LLM reads or writes a token, and it says so: the
        usage it reports is zero, so its answers cost nothing at any configured price."""
        messages = list(request.messages)
        if request.purpose == "summarize":
            text = self._summarize(messages[-1]["content"])
        else:
            text = self._reply(messages)
        return Completion(text, MODEL, prompt_tokens=0, completion_tokens=0)

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        """The same answer as :meth:`complete`, handed over in a few pieces (cut between
        words), so that a streaming client sees it grow."""
        completion = await self.complete(request)
        for piece in _pieces(completion.text, STREAM_PIECES):
            await on_text(piece)
        return completion

    @staticmethod
    def _summarize(data: str) -> str:
        plain = " ".join(_TAG.sub(" ", data).split())
        return "Earlier conversation: " + plain[-SUMMARY_CHARS:]

    @staticmethod
    def _reply(messages: list[dict[str, str]]) -> str:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        history = [m for m in messages[1:-1] if m["role"] in ("user", "assistant")]
        said = _text_of(messages[-1]["content"]) if messages else ""
        facts = []
        if "<pinned>" in system:
            pinned = system.split("<pinned>", 1)[1].split("</pinned>", 1)[0]
            keys = [line[2:].split(":", 1)[0] for line in pinned.splitlines()
                    if line.startswith("- ")]
            facts.append("pinned facts: " + ", ".join(keys))
        if "Summary of the earlier conversation:" in system:
            facts.append("a summary of our earlier conversation")
        facts.append(f"{len(history)} recent message{'s' if len(history) != 1 else ''}")
        return (f"(offline mode: no LLM is configured) You said: \"{_quote(said)}\". "
                f"I can see {'; '.join(facts)}.")


def _pieces(text: str, count: int) -> list[str]:
    """``text`` cut into about ``count`` pieces, each ending after a space (joined, the text)."""
    size = max(1, len(text) // count)
    pieces, start = [], 0
    while start < len(text):
        end = text.find(" ", start + size)
        end = len(text) if end < 0 else end + 1
        pieces.append(text[start:end])
        start = end
    return pieces


def _text_of(content: Any) -> str:
    """A message's text, also when it is a list of parts (text and pictures)."""
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content
                        if isinstance(part, dict) and part.get("type") == "text")
    return str(content)


@hookimpl(trylast=True)
def register_providers(host: PluginHost) -> list[Provider]:
    """Register the offline provider."""
    return [OfflineProvider()]
