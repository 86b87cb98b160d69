"""CloudyBot gateway: one memory and prompt core for every chat channel.

Everything a plugin needs is importable from here, and a plugin imports nothing else of the
gateway (a test holds the built-in plugins to it): ``hookimpl``; :class:`PluginHost`, what
every hook that acts on the gateway receives; the interfaces a plugin implements or receives
(channels, providers, tools, commands, prompt sections) and every hook argument's type; the
channel kit's messages and delivery outcomes; the errors that become JSON errors (each has its
HTTP status and ``code``); the means to declare settings (``PluginSettings``, ``setting`` and
the parsers in ``options``); the span of the work in hand (``current_span``: a provider or a
tool adds attributes and events to its call's trace); and the helpers the built-in plugins
share (redaction, the lean HTTP client, public-address checks). ``gateway.testing`` is the
pytest kit.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

try:
    __version__ = _installed_version("cloudybot")
except PackageNotFoundError:  # run from a checkout that is not installed
    __version__ = "0+unknown"

from gateway.accounts.secrets import redact
from gateway.base import jsonio
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
    ProviderUnavailable,
    RateLimited,
    Unauthorized,
    Unavailable,
)
from gateway.base.locks import Leadership
from gateway.base.logs import redact_in_logs, shown
from gateway.base.pictures import PICTURE_TYPES, Image
from gateway.base.text import split_text
from gateway.base.validation import site as valid_site
from gateway.chat_history import whole_tool_exchanges
from gateway.commands import help_text, slash_command
from gateway.config import options
from gateway.config.options import Place, PluginSettings, setting
from gateway.gateway import Gateway
from gateway.hookspecs import hookimpl
from gateway.host import (
    ChatCommand,
    CommandContext,
    OutboundMessage,
    PinnedMemory,
    PluginHost,
    PluginMetrics,
    ScheduledJobs,
)
from gateway.interfaces import (
    Attachment,
    Channel,
    Command,
    Completion,
    CompletionRequest,
    DeliveryFailed,
    DeliveryRetry,
    InboundMessage,
    PromptSection,
    Provider,
    ReservedChannel,
    TextSink,
    TurnContext,
)
from gateway.jobs import timing as job_timing
from gateway.memory.sessions import Rotation
from gateway.net.destinations import (
    DestinationRefused,
    Resolver,
    system_resolver,
    web_url,
)
from gateway.net.destinations import addresses as public_addresses
from gateway.net.http_client import Connecting, HTTPClient, HTTPClientError, Limits, Response
from gateway.observe import Span, current_span
from gateway.store import Delivery, Job, JobRequest, ThreadRef, User
from gateway.tools import Credential, Tool, ToolCall, ToolContext, ToolOutput, ToolSet

__all__ = [  # noqa: RUF022 (grouped by purpose)
    # hooks and the host
    "PluginHost",
    "PinnedMemory",
    "PluginMetrics",
    "ScheduledJobs",
    "OutboundMessage",
    "hookimpl",
    # what plugins implement or receive (every hook argument's type)
    "Attachment",
    "Channel",
    "ChatCommand",
    "Command",
    "CommandContext",
    "Completion",
    "CompletionRequest",
    "Credential",
    "Delivery",
    "DeliveryFailed",
    "DeliveryRetry",
    "Image",
    "PICTURE_TYPES",
    "InboundMessage",
    "Leadership",
    "PromptSection",
    "Provider",
    "ReservedChannel",
    "Rotation",
    "TextSink",
    "ThreadRef",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolOutput",
    "ToolSet",
    "TurnContext",
    "User",
    "Job",
    "JobRequest",
    "job_timing",
    # settings
    "Place",
    "PluginSettings",
    "options",
    "setting",
    # errors (each an HTTP status and a code)
    "BadRequest",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "GatewayError",
    "NotFound",
    "PayloadTooLarge",
    "PaymentRequired",
    "PluginError",
    "ProviderError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RateLimited",
    "Unauthorized",
    "Unavailable",
    # tracing: the span of the work in hand
    "Span",
    "current_span",
    # helpers the built-in plugins share
    "Connecting",
    "DestinationRefused",
    "HTTPClient",
    "HTTPClientError",
    "Limits",
    "Resolver",
    "Response",
    "help_text",
    "jsonio",
    "public_addresses",
    "redact",
    "redact_in_logs",
    "shown",
    "slash_command",
    "split_text",
    "system_resolver",
    "valid_site",
    "web_url",
    "whole_tool_exchanges",
    # the gateway itself (to embed or test it; plugins get a PluginHost)
    "Gateway",
]
