"""A zero-cost provider plugin: isolates the gateway's own cost from any LLM's."""

from __future__ import annotations

from gateway import Completion, CompletionRequest, PluginHost, Provider, hookimpl

REPLY = "Noted. " * 20


class InProcessProvider(Provider):
    """Answers at once with a fixed reply and reported usage."""

    name = "inprocess"

    async def complete(self, request: CompletionRequest) -> Completion:
        """A fixed answer (a short summary when summarizing)."""
        text = "Summary of the talk so far." if request.purpose == "summarize" else REPLY
        return Completion(text, "inprocess", prompt_tokens=100, completion_tokens=20)


@hookimpl
def register_providers(host: PluginHost) -> list[Provider]:
    """Register the in-process provider."""
    return [InProcessProvider()]
