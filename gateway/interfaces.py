"""What plugins implement and receive: providers, channels, prompt sections, turn context."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.base.pictures import Image
from gateway.tools import ToolCall

if TYPE_CHECKING:
    from aiohttp import web

# Receives text as the model writes it (a piece, or the whole so far: each user says which).
TextSink = Callable[[str], Awaitable[None]]

# Where a plugin's prompt section goes: right after the named built-in section (in the
# prompt's fixed order).
SECTION_POSITIONS = (
    "after_instructions",
    "after_pinned",
    "after_specialist",
    "after_summary",
    "after_hints",
)
Position = Literal["after_instructions", "after_pinned", "after_specialist", "after_summary",
                   "after_hints"]


@dataclass(frozen=True)
class PromptSection:
    """Text a plugin adds to the system message, at a declared position."""

    position: Position
    text: str


@dataclass(frozen=True)
class Attachment:
    """A file that came with a channel message: ``kind`` (``image``), a ``name`` for the
    transcript, and ``ref``, JSON-serialisable data the channel's :meth:`Channel.fetch` reads
    it with (a Telegram ``file_id``, a Slack file URL)."""

    kind: str
    name: str
    ref: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnContext:
    """Who is talking, where, and what they said: handed to prompt and turn hooks."""

    user_id: str
    thread_id: str
    session_key: str
    channel: str
    message: str
    specialist: str | None = None


@dataclass(frozen=True)
class CompletionRequest:
    """One call to an LLM: chat messages and tool schemas in OpenAI's format."""

    messages: Sequence[dict[str, Any]]
    model: str
    max_tokens: int
    purpose: Literal["chat", "summarize"] = "chat"
    tools: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True)
class Completion:
    """A provider's answer: text, or tool calls to run. Usage is None when not reported;
    ``finish_reason`` is the provider's word for why the answer ended (``stop``, ``length``,
    ``tool_calls``...), None when it gave none (a trace then says ``tool_calls`` or
    ``stop``)."""

    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    finish_reason: str | None = None


class Provider(ABC):
    """An LLM provider plugin. Subclass it and implement :meth:`complete`.

    Raise :class:`gateway.errors.ProviderError` (502) or ``ProviderTimeout`` (504) on failure;
    the turn is then not stored and not charged.
    """

    name: str = ""

    async def start(self) -> None:
        """Acquire resources (an HTTP session); called once when the gateway starts."""

    async def close(self) -> None:
        """Release resources; called once when the gateway stops."""

    @abstractmethod
    async def complete(self, request: CompletionRequest) -> Completion:
        """Answer one chat request."""

    async def stream(self, request: CompletionRequest, on_text: TextSink) -> Completion:
        """Answer one chat request, awaiting ``on_text(delta)`` with each piece of text as it
        arrives (the pieces concatenated are the completion's text), and return the whole
        completion, usage included, as :meth:`complete` does.

        Override it when the upstream API streams. This default, for providers that cannot,
        calls :meth:`complete` and hands over the whole text as one piece.
        """
        completion = await self.complete(request)
        if completion.text:
            await on_text(completion.text)
        return completion


class DeliveryRetry(Exception):
    """Raised by :meth:`Channel.send`: the platform asked us to wait ``after`` seconds."""

    def __init__(self, after: float) -> None:
        super().__init__(f"retry after {after:g} s")
        self.after = after


class DeliveryFailed(Exception):
    """Raised by :meth:`Channel.send` when delivery cannot succeed (the bot was blocked, the
    chat is gone): it is recorded as failed with this reason and never retried."""


class Channel:
    """A channel plugin: maps inbound messages to (user, thread, session key), delivers replies.

    ``name`` prefixes its session keys (``telegram:42``). ``routes()`` may add HTTP routes to the
    gateway's server (webhooks); ``start``/``stop`` run with the gateway. Inbound messages go to
    ``await gateway.receive(message)``, which returns once the message is durable: acknowledge
    the platform only after it returned. Replies come back through :meth:`send`, possibly
    after a restart, so everything it needs is in the message's JSON ``address``.
    """

    name: str = ""
    # Channels whose threads are keyed by their own name (``telegram:…``); the dashboard is not.
    prefixed_keys: bool = True

    @property
    def enabled(self) -> bool:
        """Whether the channel is configured to run (a channel without a token is not)."""
        return True

    def routes(self) -> list[web.RouteDef]:
        """HTTP routes this channel serves."""
        return []

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """Deliver one reply chunk (at most the message's ``max_chars``) to ``address``, the
        ``InboundMessage.address`` of the message it answers.

        Raise :class:`DeliveryRetry` when the platform asks to wait, :class:`DeliveryFailed`
        when retrying is futile; any other exception is retried with backoff.
        """
        raise DeliveryFailed(f"channel {self.name!r} cannot send replies")

    async def typing(self, address: Mapping[str, Any]) -> None:
        """Show "typing…" at ``address`` while the agent works (best effort; optional)."""

    async def fetch(self, attachment: Attachment, max_bytes: int) -> Image | None:
        """Download an attachment of an inbound message (optional): the picture, or None when
        it cannot be had (too large: over ``max_bytes``; gone; not a picture). Called only with
        ``CLOUDYBOT_LLM_VISION=true``."""
        return None

    async def stream(self, address: Mapping[str, Any], text: str, handle: Any) -> Any:
        """Show the reply growing while the model writes it (optional; best effort).

        :param address: the ``InboundMessage.address`` of the message being answered.
        :param text: the whole reply so far (the model's Markdown, redacted).
        :param handle: None on the first call; afterwards what the previous call returned.
        :return: a JSON-serialisable handle of the preview (a message id, say). The gateway
            calls this at most about once a second per chat. The final reply then reaches
            :meth:`send` with ``address["preview"]`` set to the last handle, for its first
            chunk only: turn the preview into that chunk rather than sending a new message.
        """
        return None

    async def start(self) -> None:
        """Start listening (polling, sockets); called when the gateway starts. Starting a
        started channel must not add a second listener."""

    async def stop(self) -> None:
        """Stop taking new messages. Replies to messages already taken are still delivered
        after this, so keep the clients that send them open until :meth:`close`."""

    async def close(self) -> None:
        """Release clients and connections; called after every queued reply was delivered."""


class ReservedChannel(Channel):
    """A channel plugin that is installed but not configured: it holds its name (so
    ``telegram:…`` thread ids stay reserved) and runs nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def enabled(self) -> bool:
        """Never: it is not configured."""
        return False


@dataclass(frozen=True)
class Command:
    """A chat command as a channel hands it over: ``/remember name Ada`` is
    ``Command("remember", "name Ada")``."""

    name: str
    argument: str = ""


@dataclass(frozen=True)
class InboundMessage:
    """One message from a channel, mapped to the gateway's identities.

    :param channel: the channel's name (``telegram``).
    :param conversation: the session key (``telegram:42``, ``slack:T1:C1:1700.1``).
    :param sender: the sender's account id (``telegram:777``).
    :param message_id: unique within the channel; a redelivery carries the same id.
    :param text: what the sender wrote (empty for a command without argument).
    :param address: where the reply goes, as JSON-serialisable data; the gateway hands it
        back to ``channel.send(address, text)`` and ``channel.typing(address)``, also after
        a restart.
    :param command: set when the message is a command rather than a chat turn.
    :param notice: set to answer with this text instead of a turn (an unsupported message).
    :param only_known: handle it only if the conversation already exists (a thread reply
        that does not address the bot).
    :param max_chars: the platform's longest message; longer replies are split.
    :param attachments: files that came with it (pictures), fetched through the channel for
        the model when ``CLOUDYBOT_LLM_VISION=true``; ``text`` should name them, for the
        transcript (``[photo: cat.jpg] look``).
    """

    channel: str
    conversation: str
    sender: str
    message_id: str
    text: str
    address: Mapping[str, Any] = field(default_factory=dict)
    command: Command | None = None
    notice: str | None = None
    only_known: bool = False
    max_chars: int = 4000
    attachments: tuple[Attachment, ...] = ()
