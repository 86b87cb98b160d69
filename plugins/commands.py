"""The built-in chat commands: help, new, remember, forget, memory, usage.

Registered through ``register_commands`` like any plugin's (see :mod:`gateway.commands`).
"""

from __future__ import annotations

from gateway import BadRequest, ChatCommand, CommandContext, PluginHost, help_text, hookimpl


async def show_help(context: CommandContext) -> str:
    """Every registered command."""
    return help_text(context.host.commands)


async def start_over(context: CommandContext) -> str:
    """A fresh conversation: rolling memory and the session go; pinned facts stay."""
    await context.start_over()
    return "Started a new conversation. Pinned facts are kept; use forget to drop one."


async def remember(context: CommandContext) -> str:
    """Pin ``KEY VALUE`` in this conversation."""
    key, _, value = context.argument.partition(" ")
    value = value.strip()
    if not key or not value:
        return "Usage: remember KEY VALUE — for example: remember name Ada"
    try:
        await context.memory.put(key, value)
    except BadRequest as exc:
        return f"I can't pin that: {exc.message}."
    return f"Pinned {key}."


async def forget(context: CommandContext) -> str:
    """Unpin ``KEY``."""
    key = context.argument
    if not key:
        return "Usage: forget KEY"
    if key not in await context.memory.get():
        return f"Nothing is pinned under {key}."
    await context.memory.delete(key)
    return f"Forgot {key}."


async def list_memory(context: CommandContext) -> str:
    """The pinned facts of this conversation."""
    pinned = await context.memory.get()
    if not pinned:
        return "Nothing is pinned in this conversation. Use: remember KEY VALUE"
    return "Pinned facts:\n" + "\n".join(f"• {key}: {value}" for key, value in pinned.items())


async def usage(context: CommandContext) -> str:
    """The sender's plan and what is left of it."""
    fresh = await context.host.account(context.user.user_id) or context.user
    return (f"Plan: {fresh.plan}. AI credits left: {fresh.credits}. "
            f"Browser minutes: {fresh.browser_minutes}.")


BUILT_IN = [
    ChatCommand("help", "", "this list", show_help, aliases=("start",)),
    ChatCommand("new", "", "start a fresh conversation (pinned facts stay)", start_over,
                per_conversation=True),
    ChatCommand("remember", "KEY VALUE", "pin a fact I always keep in mind here", remember,
                per_conversation=True),
    ChatCommand("forget", "KEY", "unpin a fact", forget, per_conversation=True),
    ChatCommand("memory", "", "list the pinned facts", list_memory, per_conversation=True),
    ChatCommand("usage", "", "your plan and remaining credits", usage),
]


@hookimpl(tryfirst=True)
def register_commands(host: PluginHost) -> list[ChatCommand]:
    """Register the built-in commands (first: help lists them before plugins' ones)."""
    return list(BUILT_IN)
