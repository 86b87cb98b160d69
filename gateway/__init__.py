"""CloudyBot gateway: one memory and prompt core for every chat channel.

Everything a plugin needs is importable from here: ``hookimpl``; the interfaces it implements
or receives (channels, providers, tools, commands, prompt sections); the channel kit's
messages and delivery outcomes; the errors that become JSON errors (each has its HTTP status
and ``code``); the means to declare settings (``PluginSettings``, ``setting`` and the parsers
in ``options``); and a few helpers channels share. ``gateway.testing`` is the pytest kit.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

try:
    __version__ = _installed_version("cloudybot")
except PackageNotFoundError:  # run from a checkout that is not installed
    __version__ = "0+unknown"

from gateway.base.errors import (
    BadRequest,
    ConfigError,
    Conflict,
    Forbidden,
    GatewayError,
    NotFound,
    PayloadTooLarge,
    PaymentRequired,
    PluginError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from gateway.base.locks import Leadership
from gateway.base.logs import redact_in_logs
from gateway.base.text import split_text
from gateway.commands import ChatCommand, Command, CommandContext, slash_command
from gateway.config import options
from gateway.config.options import PluginSettings, setting
from gateway.gateway import Gateway
from gateway.hookspecs import hookimpl
from gateway.interfaces import (
    Attachment,
    Channel,
    Completion,
    CompletionRequest,
    Image,
    PromptSection,
    Provider,
    ReservedChannel,
    TextSink,
    TurnContext,
)
from gateway.kit.inbound import DeliveryFailed, DeliveryRetry, InboundMessage
from gateway.store import ThreadRef
from gateway.tools import Tool, ToolCall, ToolContext

__all__ = [
    "Attachment",
    "BadRequest",
    "Channel",
    "ChatCommand",
    "Command",
    "CommandContext",
    "Completion",
    "CompletionRequest",
    "ConfigError",
    "Conflict",
    "DeliveryFailed",
    "DeliveryRetry",
    "Forbidden",
    "Gateway",
    "GatewayError",
    "Image",
    "InboundMessage",
    "Leadership",
    "NotFound",
    "PayloadTooLarge",
    "PaymentRequired",
    "PluginError",
    "PluginSettings",
    "PromptSection",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "RateLimited",
    "ReservedChannel",
    "TextSink",
    "ThreadRef",
    "Tool",
    "ToolCall",
    "ToolContext",
    "TurnContext",
    "Unauthorized",
    "Unavailable",
    "hookimpl",
    "options",
    "redact_in_logs",
    "setting",
    "slash_command",
    "split_text",
]
