"""Prompt assembly in its fixed order (instructions, pinned, specialist, summary, hints,
recent messages, the new message), trimmed under MAX_CONTEXT with cached token counts.

One system message holds, in order: (1) instructions and the model identity hint, (2) the pinned
block, (3) the specialist's instructions, (4) the conversation summary, (5) browser hints and the
session-rotation hint; a plugin section follows the built-in section its position names. Then
the recent messages, then the new user message. The oldest recent messages are dropped first;
the system message and the new user message never are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

from gateway.base.errors import PayloadTooLarge
from gateway.base.tokens import REPLY_PRIMING, TokenCounter
from gateway.interfaces import PromptSection
from gateway.memory.sessions import ToolExchange
from gateway.store import StoredMessage
from gateway.tools import Credential

ROTATION_HINT = (
    "The agent session was just rotated: tool state from earlier turns is gone, but the "
    "conversation memory above is intact. Re-run any tool you need."
)


@dataclass(frozen=True)
class PromptInputs:
    """Everything prompt assembly needs for one turn."""

    instructions: str
    model: str
    pinned: dict[str, str]
    specialist: tuple[str, str] | None
    summary: str
    credentials: Sequence[Credential]
    session_rotated: bool
    sections: Sequence[PromptSection]
    recent: Sequence[StoredMessage]
    user_message: str
    user_tokens: int
    # tool exchanges of this session, by the id of the reply they came before
    exchanges: Mapping[int, ToolExchange] = field(default_factory=dict)
    # tokens sent besides the messages (the tool schemas)
    reserved_tokens: int = 0
    # pictures sent with the new user message, as data: URLs (counted in user_tokens)
    user_images: Sequence[str] = ()
    # CLOUDYBOT_BROWSER_VAULT: saved logins appear as their sites only
    vault: bool = False


# The system message's layers in order, by the position a plugin section names to follow one.
LAYERS = {"after_instructions": "base", "after_pinned": "pinned",
          "after_specialist": "specialist", "after_summary": "summary", "after_hints": "hints"}
LAYER_SEPARATOR = "\n\n"


@dataclass
class Prompt:
    """The messages to send and what they cost.

    History is kept as units (a message, or a reply with the tool calls and results that led to
    it), oldest first, so that more can be dropped later without splitting a unit. ``layers``
    are the system message's parts as (layer name, text), in order: joined by blank lines,
    they are ``system_text``.
    """

    system_text: str
    layers: list[tuple[str, str]]
    units: list[list[dict[str, Any]]]
    unit_costs: list[int]
    user_message: str
    prompt_tokens: int
    dropped: int
    user_images: Sequence[str] = ()

    @property
    def messages(self) -> list[dict[str, Any]]:
        """System message, kept history, new user message (with its pictures as
        ``image_url`` parts, when it has some)."""
        history = [message for unit in self.units for message in unit]
        content: str | list[dict[str, Any]] = self.user_message
        if self.user_images:
            content = [{"type": "text", "text": self.user_message},
                       *({"type": "image_url", "image_url": {"url": url}}
                         for url in self.user_images)]
        return [{"role": "system", "content": self.system_text}, *history,
                {"role": "user", "content": content}]

    def drop_oldest(self) -> bool:
        """Drop the oldest kept unit; False if there is none left."""
        if not self.units:
            return False
        self.units.pop(0)
        self.prompt_tokens -= self.unit_costs.pop(0)
        self.dropped += 1
        return True


def render_pinned(pinned: dict[str, str]) -> str:
    """The pinned block: sorted keys, values escaped so they cannot close the tag."""
    lines = "\n".join(f"- {key}: {escape(value)}" for key, value in sorted(pinned.items()))
    return ("Pinned facts for this conversation (always true unless the user changes them):\n"
            f"<pinned>\n{lines}\n</pinned>")


def render_credentials(credentials: Iterable[Credential], vault: bool = False) -> str:
    """Section 5's browser hint listing saved logins: verbatim (the tool needs exact values),
    or in ``vault`` mode (``CLOUDYBOT_BROWSER_VAULT``) their sites only."""
    if vault:
        sites = "\n".join(f"- {c.site}" for c in credentials)
        return ("Saved browser logins exist for these sites:\n"
                f"{sites}\nTo sign in, open the site's login page with the browser tool and "
                "call its fill_credential action with the site: the username and password are "
                "filled in for you, and you never see them.")
    lines = "\n".join(f"- {c.site}: username {c.username}, password {c.password}"
                      for c in credentials)
    return ("Saved browser logins, for the browser tool only (never repeat a password to the "
            f"user):\n{lines}")


def system_layers(inputs: PromptInputs) -> list[tuple[str, str]]:
    """The system message's layers in their fixed order, as (name, text); a plugin section
    belongs to the layer it follows. Absent layers are left out."""
    builtin: list[tuple[str, str | None]] = [
        ("after_instructions",
         f"{inputs.instructions}\nYou are answering as the model {inputs.model}."),
        ("after_pinned", render_pinned(inputs.pinned) if inputs.pinned else None),
        ("after_specialist",
         f"You are acting as the specialist {inputs.specialist[0]!r}. Its instructions:\n"
         f"{inputs.specialist[1]}" if inputs.specialist else None),
        ("after_summary",
         f"Summary of the earlier conversation:\n{inputs.summary}" if inputs.summary else None),
        ("after_hints", "\n\n".join(
            part for part in (
                render_credentials(inputs.credentials, inputs.vault) if inputs.credentials
                else "",
                ROTATION_HINT if inputs.session_rotated else "",
            ) if part) or None),
    ]
    layers: list[tuple[str, str]] = []
    for position, text in builtin:
        parts = [text] if text else []
        parts.extend(s.text for s in inputs.sections if s.position == position and s.text)
        if parts:
            layers.append((LAYERS[position], LAYER_SEPARATOR.join(parts)))
    return layers


def assemble(inputs: PromptInputs, counter: TokenCounter, max_context: int) -> Prompt:
    """Build the prompt; drop the oldest recent messages until it fits, or raise 413."""
    layers = system_layers(inputs)
    system_text = LAYER_SEPARATOR.join(text for _, text in layers)
    fixed = (REPLY_PRIMING + inputs.reserved_tokens
             + counter.message("system", counter.count(system_text))
             + counter.message("user", inputs.user_tokens))
    if fixed > max_context:
        raise PayloadTooLarge(
            f"the system prompt, tools and message need {fixed} tokens, over MAX_CONTEXT "
            f"({max_context}); shorten the message or the pinned memory",
            code="context_too_large",
        )
    budget = max_context - fixed
    # A reply and the tool calls/results that led to it are one unit: kept or dropped together.
    units: list[list[dict[str, Any]]] = []
    costs: list[int] = []
    for message in inputs.recent:
        unit: list[dict[str, Any]] = []
        cost = counter.message(message.role, message.tokens)
        exchange = inputs.exchanges.get(message.id) if message.role == "assistant" else None
        if exchange is not None:
            unit.extend(exchange.messages)
            cost += exchange.tokens
        unit.append({"role": message.role, "content": message.content})
        units.append(unit)
        costs.append(cost)
    kept = 0
    for cost in reversed(costs):
        if cost > budget:
            break
        budget -= cost
        kept += 1
    first = len(units) - kept
    return Prompt(system_text, layers, units[first:], costs[first:], inputs.user_message,
                  max_context - budget, first, tuple(inputs.user_images))
