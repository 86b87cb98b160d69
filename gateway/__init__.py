"""CloudyBot gateway: one memory and prompt core for every chat channel.

What plugins import: ``hookimpl``, the interfaces they implement or receive, and the means
to declare their settings (``PluginSettings``, ``setting`` and the parsers in ``options``).
"""

from __future__ import annotations

from . import options
from .errors import GatewayError, ProviderError, ProviderTimeout
from .gateway import Gateway
from .hookspecs import hookimpl
from .interfaces import (
    Channel,
    Completion,
    CompletionRequest,
    PromptSection,
    Provider,
    ReservedChannel,
    TurnContext,
)
from .options import PluginSettings, setting
from .store import ThreadRef

__all__ = [
    "Channel",
    "Completion",
    "CompletionRequest",
    "Gateway",
    "GatewayError",
    "PluginSettings",
    "PromptSection",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "ReservedChannel",
    "ThreadRef",
    "TurnContext",
    "hookimpl",
    "options",
    "setting",
]
