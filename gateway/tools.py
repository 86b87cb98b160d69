"""Tools the agent can call: what a tool is, the tool sets whose tools depend on who asks, the
toolbox a turn sends, and running one call safely.

A tool error or timeout becomes a result the model can read; it never crashes the turn. So does
a malformed call: an unknown tool, arguments that are not JSON text of an object, or
arguments nested deeper than ``MAX_ARGUMENT_DEPTH``. A tool may also return pictures
(:class:`ToolOutput`): a vision model sees them; they are never stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from gateway.base.pictures import Image

log = logging.getLogger(__name__)
MAX_RESULT_CHARS = 8000
MAX_ARGUMENT_DEPTH = 64
MAX_NAME_CHARS_SHOWN = 80
MAX_CACHED_VIEWS = 256  # toolboxes of distinct tool sets' answers kept counted
MAX_PICTURES = 4  # of one call's result


@dataclass(frozen=True)
class Credential:
    """A saved browser login, decrypted for one turn only."""

    site: str
    username: str
    password: str


@dataclass(frozen=True)
class ToolContext:
    """Who called a tool and where: handed to every tool run. ``saved_logins`` holds the
    user's saved browser logins, decrypted, for a tool that declared it fills them in
    (``Tool.uses_saved_logins``); every other tool gets none."""

    user_id: str
    thread_id: str
    session_key: str
    saved_logins: tuple[Credential, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class ToolOutput:
    """A tool's result with pictures: ``text`` for the model, and ``pictures`` a vision model
    (``CLOUDYBOT_LLM_VISION``) is shown after the results, never stored (the session file
    keeps the text). Without a vision model the text says how many were not shown."""

    text: str
    pictures: tuple[Image, ...] = ()


@dataclass(frozen=True)
class Tool:
    """A function the model may call.

    :param name: unique, ``[a-zA-Z0-9_-]{1,64}`` (OpenAI's rule).
    :param description: what it does, for the model.
    :param parameters: a JSON schema object for the arguments.
    :param run: ``async (arguments, context) -> str`` (a dict result is sent as JSON; a
        :class:`ToolOutput` carries pictures too).
    :param uses_saved_logins: it fills the user's saved logins in somewhere (the browser):
        its context then carries them (``ToolContext.saved_logins``); no other tool sees them.
    :param timeout_seconds: its own limit on one call, in place of
        ``CLOUDYBOT_TOOL_TIMEOUT_SECONDS`` (a tool that keeps a call alive while it progresses).
    :param max_result_chars: its result is cut past this many characters (with a note).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
    uses_saved_logins: bool = False
    timeout_seconds: float | None = None
    max_result_chars: int = MAX_RESULT_CHARS

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI's ``tools`` format."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; ``arguments`` is the raw JSON text it sent.

    ``malformed`` says why the call cannot run when the provider sent it in a shape the gateway
    will not run (arguments as a JSON object or number instead of text): the model reads it as
    the call's error result. ``arguments`` then holds what was sent, encoded as JSON text.
    """

    id: str
    name: str
    arguments: str
    malformed: str = ""

    def as_message_part(self) -> dict[str, Any]:
        """The call as it appears in an assistant message's ``tool_calls``."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@runtime_checkable
class ToolSet(Protocol):
    """Tools that depend on who asks, or that change while the gateway runs (an MCP server's):
    a plugin returns one from ``register_tools`` beside its plain :class:`Tool` objects.

    ``tools_for`` is awaited at the start of every turn of every user, so it must answer from
    what it holds (no I/O once warm); return the same :class:`Tool` objects while they do not
    change, so the toolbox counts their schemas once.
    """

    async def start(self) -> None:
        """Begin (connect in the background): called as the gateway starts."""

    async def tools_for(self, user_id: str, plan: str) -> Sequence[Tool]:
        """The tools this user (on this plan) may call now."""

    async def close(self) -> None:
        """Release what it holds, quickly: called as the gateway stops."""


@dataclass(frozen=True)
class Toolbox:
    """The loaded tools and their schemas as every chat call sends them, counted once (the
    schemas' tokens count against MAX_CONTEXT); with tool sets, :meth:`for_user` is the
    toolbox of one turn."""

    tools: Mapping[str, Tool]
    schemas: list[dict[str, Any]]
    schema_tokens: int
    sets: tuple[ToolSet, ...] = ()
    count: Callable[[str], int] = field(default=len, compare=False, repr=False)
    _views: dict[tuple[int, ...], tuple[Toolbox, tuple[Tool, ...]]] = field(
        default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, tools: Mapping[str, Tool], count: Callable[[str], int],
           sets: Sequence[ToolSet] = ()) -> Toolbox:
        """The toolbox of ``tools`` (and ``sets``), its schemas counted with ``count``."""
        schemas = [tool.schema() for tool in tools.values()]
        return cls(dict(tools), schemas, count(json.dumps(schemas)) if schemas else 0,
                   tuple(sets), count)

    async def for_user(self, user_id: str, plan: str) -> Toolbox:
        """The toolbox of one turn: these tools and those the tool sets give this user (one
        named like a tool already there is left out, logged). Counted once per distinct
        answer of the sets, not per turn."""
        if not self.sets:
            return self
        extra: tuple[Tool, ...] = ()
        for tool_set in self.sets:
            extra += tuple(await tool_set.tools_for(user_id, plan))
        if not extra:
            return self
        key = tuple(map(id, extra))
        cached = self._views.get(key)
        if cached is not None:
            return cached[0]
        tools = dict(self.tools)
        for tool in extra:
            if tool.name in tools:
                log.warning("tool %s is offered twice; the second one is left out", tool.name)
                continue
            tools[tool.name] = tool
        view = Toolbox.of(tools, self.count)
        if len(self._views) >= MAX_CACHED_VIEWS:
            self._views.clear()
        self._views[key] = (view, extra)  # holding the tools keeps their ids unique
        return view

    async def start(self) -> None:
        """Start the tool sets."""
        for tool_set in self.sets:
            await tool_set.start()

    async def close(self) -> None:
        """Close the tool sets (one that fails is logged, the others still close)."""
        for tool_set in self.sets:
            try:
                await tool_set.close()
            except Exception:
                log.exception("a tool set failed to close")

    async def run(self, call: ToolCall, context: ToolContext, timeout: float) -> ToolOutput:
        """Run one call (see :func:`run_tool`)."""
        return await run_tool(self.tools, call, context, timeout)


def _output(result: Any, limit: int = MAX_RESULT_CHARS) -> ToolOutput:
    """A tool's result as a :class:`ToolOutput`: text cut past ``limit`` characters (with a
    note), at most :data:`MAX_PICTURES` pictures (a note says how many more there were)."""
    pictures: tuple[Image, ...] = ()
    if isinstance(result, ToolOutput):
        result, pictures = result.text, result.pictures
    text = result if isinstance(result, str) else json.dumps(result, default=str)
    if len(text) > limit:
        text = text[:limit] + f"... [truncated, {len(text)} characters in all]"
    if len(pictures) > MAX_PICTURES:
        text += f"\n[{len(pictures) - MAX_PICTURES} more pictures left out]"
    return ToolOutput(text, pictures[:MAX_PICTURES])


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets inside
    strings do not count). A loop, not recursion: any depth is safe to ask about."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


async def run_tool(tools: Mapping[str, Tool], call: ToolCall, context: ToolContext,
                   timeout: float) -> ToolOutput:
    """Run one call and return what the model will read (errors included)."""
    tool = tools.get(call.name)
    result = await _outcome(tool, call, context, timeout)
    return _output(result, tool.max_result_chars if tool is not None else MAX_RESULT_CHARS)


async def _outcome(tool: Tool | None, call: ToolCall, context: ToolContext,
                   timeout: float) -> Any:
    """What the tool returned, or the error text the model reads instead."""
    if call.malformed:
        return f"error: {call.malformed}"
    if tool is None:
        # As sent, not repr(): the model reads back what it wrote, a saved password in it is
        # redacted as written.
        return f'error: there is no tool named "{call.name[:MAX_NAME_CHARS_SHOWN]}"'
    if nests_deeper_than(call.arguments, MAX_ARGUMENT_DEPTH):
        return f"error: the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return f"error: the arguments are not valid JSON ({exc.msg})"
    except ValueError as exc:  # valid JSON Python will not read: an integer of 5,000 digits
        return f"error: the arguments cannot be read ({exc})"
    if not isinstance(arguments, dict):
        return "error: the arguments must be a JSON object"
    if context.saved_logins and not tool.uses_saved_logins:
        context = replace(context, saved_logins=())
    if tool.timeout_seconds is not None:
        timeout = tool.timeout_seconds
    try:
        result = await asyncio.wait_for(tool.run(arguments, context), timeout)
    except TimeoutError:
        log.warning("tool %s timed out after %.1f s", call.name, timeout)
        return f"error: the tool {call.name} did not finish within {timeout:g} seconds"
    except Exception as exc:
        log.warning("tool %s failed: %s: %s", call.name, type(exc).__name__, exc)
        return f"error: the tool {call.name} failed: {type(exc).__name__}: {exc}"
    return result
