"""CloudyBot gateway: one memory and prompt core for every chat channel.

What plugins import: ``hookimpl`` and the interfaces they implement or receive.
"""

from __future__ import annotations

from .errors import GatewayError, ProviderError, ProviderTimeout
from .gateway import Gateway
from .hookspecs import hookimpl
from .interfaces import (
    Channel,
    Completion,
    CompletionRequest,
    PromptSection,
    Provider,
    TurnContext,
)
from .store import ThreadRef

__all__ = [
    "Channel",
    "Completion",
    "CompletionRequest",
    "Gateway",
    "GatewayError",
    "PromptSection",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "ThreadRef",
    "TurnContext",
    "hookimpl",
]
