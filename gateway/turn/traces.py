"""What a turn's spans say (:mod:`gateway.observe`), in the GenAI semantic conventions.

The turn is an ``invoke_agent`` span; inside it prompt assembly (tokens per layer), each
provider call (``chat``: the provider and model that answered, the tokens as billed, the finish
reason; its fallbacks and retries are events), each tool call (``execute_tool``), the session
rotation it began with and the summarization it made due. Attributes of the gateway's own are
under ``cloudybot.``. Message text (the prompt, answers, tool arguments and results) is written
only with ``CLOUDYBOT_TRACE_CONTENT``, redacted of the turn's saved passwords as stored turns
are; an answer's reported model and the model's tool names are redacted always.

These functions run only for a span that records: the gateway pays nothing for them otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gateway.accounts.secrets import Redactor
from gateway.billing.credits import CallUsage
from gateway.interfaces import CompletionRequest
from gateway.observe import genai
from gateway.observe.spans import AttributeValue
from gateway.tools import ToolCall
from gateway.turn.fallback import Answer
from gateway.turn.prompt import Prompt
from gateway.turn.request import Turn


class Outcome(Protocol):
    """What the turn span records of a turn's result (a ``TurnResult``)."""

    @property
    def stopped(self) -> bool:
        """Stopped while streaming."""

    @property
    def credits(self) -> int:
        """Credits charged."""

    @property
    def summarized(self) -> bool:
        """It made a summarization due."""

    @property
    def session_rotated(self) -> bool:
        """It began a new session."""

Attributes = dict[str, AttributeValue]
TURN_SPAN = f"{genai.INVOKE_AGENT} {genai.AGENT}"
PROMPT_SPAN = "assemble_prompt"
SUMMARIZE_SPAN = "summarize"
ROTATE_SPAN = "rotate_session"
OUTCOME = "cloudybot.turn.outcome"
CHARGE_KIND = "cloudybot.charge.kind"
BILLED = "cloudybot.billed"
SUMMARY_APPLIED = "cloudybot.summary.applied"
# A finish reason a provider reports is kept when it looks like one (stop, length, tool_calls,
# content_filter...): outside text of any other shape never reaches a span.
_REASON = re.compile(r"[a-z][a-z_]{0,31}")
MAX_TOOL_NAME_CHARS = 64


def turn_attributes(turn: Turn) -> Attributes:
    """The turn span's attributes as it begins: who, where, which specialist."""
    ref = turn.ref
    attributes: Attributes = {
        genai.OPERATION: genai.INVOKE_AGENT, genai.AGENT_NAME: genai.AGENT,
        genai.CONVERSATION_ID: ref.session_key, "user.id": turn.user_id,
        "cloudybot.thread.id": ref.thread_id, "cloudybot.channel": ref.channel}
    if turn.specialist is not None:
        attributes["cloudybot.specialist"] = turn.specialist
    if turn.job is not None:
        attributes["cloudybot.job.id"] = turn.job.job_id
    return attributes


def outcome_attributes(result: Outcome) -> Attributes:
    """The turn span's attributes once it answered."""
    return {OUTCOME: "stopped" if result.stopped else "answered",
            "cloudybot.turn.credits": result.credits,
            "cloudybot.turn.summarized": result.summarized,
            "cloudybot.session.rotated": result.session_rotated}


def summary_attributes(session_key: str, folded: int) -> Attributes:
    """A summarization's attributes: the conversation, and how many messages it folds."""
    return {genai.CONVERSATION_ID: session_key, "cloudybot.summary.folded": folded}


def prompt_attributes(prompt: Prompt, count: Callable[[str], int]) -> Attributes:
    """The assembled prompt's tokens: in all (framing and tool schemas included), per system
    layer, of the recent messages kept and of the new message; how many recent messages were
    kept and dropped."""
    attributes: Attributes = {"cloudybot.prompt.tokens": prompt.prompt_tokens}
    for name, text in prompt.layers:
        attributes[f"cloudybot.prompt.{name}.tokens"] = count(text)
    attributes["cloudybot.prompt.recent.tokens"] = sum(prompt.unit_costs)
    attributes["cloudybot.prompt.message.tokens"] = count(prompt.user_message)
    attributes["cloudybot.prompt.recent.kept"] = len(prompt.units)
    attributes["cloudybot.prompt.recent.dropped"] = prompt.dropped
    return attributes


def call_span_name(request: CompletionRequest) -> str:
    """A provider call's span name: ``chat {model}``."""
    return f"{genai.CHAT} {request.model}"


def call_attributes(request: CompletionRequest, kind: str, streamed: bool) -> Attributes:
    """A provider call's attributes as it begins (``kind``: what it is billed as)."""
    return {genai.OPERATION: genai.CHAT, genai.REQUEST_MODEL: request.model,
            genai.REQUEST_MAX_TOKENS: request.max_tokens, genai.REQUEST_STREAM: streamed,
            CHARGE_KIND: kind}


def finish_reason(answer: Answer) -> str:
    """Why the answer ended: the provider's word when it gave one of the usual shape, else
    ``tool_calls`` or ``stop``; ``cancelled`` when a stop cut it."""
    if answer.stopped:
        return "cancelled"
    completion = answer.completion
    reported = completion.finish_reason
    if isinstance(reported, str) and _REASON.fullmatch(reported):
        return reported
    return "tool_calls" if completion.tool_calls else "stop"


def answer_attributes(answer: Answer, usage: CallUsage, redactor: Redactor) -> Attributes:
    """An answered call: the provider and the configured model that answered (its price
    applies), the model it reported (redacted), the tokens as billed, the finish reason."""
    return {genai.PROVIDER: answer.provider, genai.SYSTEM: answer.provider,
            genai.REQUEST_MODEL: answer.model,
            genai.RESPONSE_MODEL: redactor.text(answer.completion.model),
            genai.INPUT_TOKENS: usage.prompt_tokens,
            genai.OUTPUT_TOKENS: usage.completion_tokens,
            genai.FINISH_REASONS: (finish_reason(answer),)}


def input_content(messages: Sequence[dict[str, Any]], redactor: Redactor) -> Attributes:
    """A call's messages (system instructions apart), redacted, for content capture."""
    return dict(genai.input_content([redactor.chat_message(m) for m in messages]))


def output_content(answer: Answer, redactor: Redactor) -> Attributes:
    """An answer's text and tool calls, redacted, for content capture."""
    completion = answer.completion
    calls = [(call.id, redactor.text(call.name), redactor.json_text(call.arguments))
             for call in completion.tool_calls]
    return {genai.OUTPUT_MESSAGES: genai.output_content(
        redactor.text(completion.text), calls, finish_reason(answer))}


def tool_span_name(call: ToolCall, redactor: Redactor) -> str:
    """A tool call's span name: ``execute_tool {tool}``."""
    return f"{genai.EXECUTE_TOOL} {tool_name(call, redactor)}"


def tool_name(call: ToolCall, redactor: Redactor) -> str:
    """The tool the model named (redacted, cut to a tool name's length)."""
    return redactor.text(call.name[:MAX_TOOL_NAME_CHARS])


def tool_attributes(call: ToolCall, redactor: Redactor) -> Attributes:
    """A tool call's attributes."""
    return {genai.OPERATION: genai.EXECUTE_TOOL, genai.TOOL_NAME: tool_name(call, redactor),
            genai.TOOL_CALL_ID: redactor.text(call.id), genai.TOOL_TYPE: "function"}


def tool_content(call: ToolCall, result: str, redactor: Redactor) -> Attributes:
    """A tool call's arguments and result (``result`` redacted already), for content
    capture."""
    return {genai.TOOL_ARGUMENTS: redactor.json_text(call.arguments),
            genai.TOOL_RESULT: result}
