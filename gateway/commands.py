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
from collections.abc import Callable, Iterable, Mapping

from gateway.base.errors import PluginError
from gateway.host import ChatCommand, CommandContext
from gateway.interfaces import Command

# Telegram's rule for a bot command, which every channel can then spell.
COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")
SLASH = re.compile(r"/([A-Za-z0-9_]{1,32})(?:\s+(.*))?", re.DOTALL)
INTRO = "I'm CloudyBot. Just write to me; I remember this conversation.\nCommands:"








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
