"""Chat commands: what ``/name args`` does on every channel, registered through a hook.

Each channel spells a command its own way (Telegram ``/remember KEY VALUE``, Slack
``/cloudybot remember KEY VALUE``, the HTTP API's composer ``/remember KEY VALUE``) and hands
it to the channel kit as a :class:`~gateway.inbound.Command`; :func:`run_command` finds the
:class:`ChatCommand` a plugin registered under that name (``register_commands``) and runs it.
The built-in ones (``plugins/commands.py``) register exactly like a third party's. A command
answers in plain text; it calls no LLM and costs no credits.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.base.errors import PluginError

if TYPE_CHECKING:
    from gateway.host import PinnedMemory, PluginHost
    from gateway.store import ThreadRef, User

# Telegram's rule for a bot command, which every channel can then spell.
COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
SLASH = re.compile(r"/([A-Za-z0-9_]{1,32})(?:\s+(.*))?", re.DOTALL)
INTRO = "I'm CloudyBot. Just write to me; I remember this conversation.\nCommands:"


@dataclass(frozen=True)
class Command:
    """A chat command as a channel hands it over: ``/remember name Ada`` is
    ``Command("remember", "name Ada")``."""

    name: str
    argument: str = ""


@dataclass(frozen=True)
class CommandContext:
    """What a command runs against and may do.

    :param host: the host of the plugin that registered the command.
    :param user: the sender's account (as it was when the message was taken).
    :param ref: the conversation's thread (owned by whoever started it).
    :param argument: what followed the command's name, stripped.
    :param memory: the conversation's pinned facts.
    :param start_over: empties the conversation's rolling memory and ends its session (pinned
        facts and the display transcript stay); nothing happens where nobody talked yet.
    """

    host: PluginHost
    user: User
    ref: ThreadRef
    argument: str
    memory: PinnedMemory
    start_over: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class ChatCommand:
    """A command a plugin offers (``register_commands``).

    :param name: lowercase ``[a-z0-9_]``, at most 32 characters (Telegram's rule).
    :param usage: how it is written after its name, for the help text (``"KEY VALUE"``).
    :param help: one line on what it does.
    :param run: awaited with a :class:`CommandContext`; returns the answer's text.
    :param per_conversation: it acts on the conversation it is sent in (pinned facts, a
        fresh start), so a channel where a command is not sent in a conversation (Slack's
        slash commands in a channel) refuses it.
    :param aliases: other names that run it (``start`` for ``help``).
    """

    name: str
    usage: str
    help: str
    run: Callable[[CommandContext], Awaitable[str]]
    per_conversation: bool = False
    aliases: tuple[str, ...] = ()


def index_commands(commands: Iterable[ChatCommand]) -> dict[str, ChatCommand]:
    """Commands by every name they answer to; a bad or taken name is a plugin error."""
    index: dict[str, ChatCommand] = {}
    for command in commands:
        if not isinstance(command, ChatCommand):
            raise PluginError(f"register_commands returned {type(command).__name__}, "
                              "not a ChatCommand")
        for name in (command.name, *command.aliases):
            if not COMMAND_NAME.fullmatch(name):
                raise PluginError(f"command name {name!r} is not 1-32 of a-z 0-9 _")
            if name in index:
                raise PluginError(f"two commands are named {name!r}")
            index[name] = command
    return index


def help_text(commands: Mapping[str, ChatCommand]) -> str:
    """Every command, once, with its usage and help line, in the order plugins registered
    them (the built-ins first: help, new, remember, forget, memory, usage)."""
    listed = {command.name: command for command in commands.values()}
    lines = [f"  {name}{' ' + command.usage if command.usage else ''} — {command.help}"
             for name, command in listed.items()]
    return "\n".join([INTRO, *lines])


def slash_command(text: str, commands: Mapping[str, ChatCommand]) -> Command | None:
    """``/name args`` as a command when ``name`` is registered (any case); None otherwise,
    so that a message such as ``/etc/hosts is missing`` stays a message."""
    match = SLASH.fullmatch(text.strip())
    if match is None or match.group(1).lower() not in commands:
        return None
    return Command(match.group(1).lower(), (match.group(2) or "").strip())


async def run_command(commands: Mapping[str, ChatCommand], command: Command,
                      context_for: Callable[[ChatCommand, str], CommandContext]) -> str:
    """Run ``command`` with the context ``context_for(found, argument)`` makes for it; return
    the answer text (the help, after a line saying so, for a name nobody registered)."""
    found = commands.get(command.name.lower() or "help")
    if found is None:
        return f"Unknown command {command.name!r}.\n\n{help_text(commands)}"
    return await found.run(context_for(found, command.argument.strip()))
