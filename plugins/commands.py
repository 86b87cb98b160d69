"""The built-in chat commands: help, new, remember, forget, memory, usage.

Registered through ``register_commands`` like any plugin's (see :mod:`gateway.commands`).
"""

from __future__ import annotations

from contextlib import suppress

from gateway import Gateway, hookimpl
from gateway.accounts.secrets import refuse_saved_passwords
from gateway.base.errors import BadRequest, NotFound
from gateway.base.validation import memory_key, memory_value
from gateway.commands import ChatCommand, CommandContext, help_text


async def show_help(context: CommandContext) -> str:
    """Every registered command."""
    return help_text(context.gateway.commands)


async def start_over(context: CommandContext) -> str:
    """A fresh conversation: rolling memory and the session go; pinned facts stay."""
    with suppress(NotFound):  # nothing to clear yet
        await context.gateway.clear_thread(context.ref)
    return "Started a new conversation. Pinned facts are kept; use forget to drop one."


async def remember(context: CommandContext) -> str:
    """Pin ``KEY VALUE`` in this conversation."""
    key, _, value = context.argument.partition(" ")
    value = value.strip()
    if not key or not value:
        return "Usage: remember KEY VALUE — for example: remember name Ada"
    gateway = context.gateway
    try:
        memory_key(key)
        memory_value(value)
        await refuse_saved_passwords(gateway.store, gateway.secret_box, context.user.user_id,
                                     {"key": key, "value": value})
        await gateway.store.put_pinned(context.ref, key, value, gateway.settings.max_pinned_keys)
    except BadRequest as exc:
        return f"I can't pin that: {exc.message}."
    return f"Pinned {key}."


async def forget(context: CommandContext) -> str:
    """Unpin ``KEY``."""
    key = context.argument
    if not key:
        return "Usage: forget KEY"
    store = context.gateway.store
    if key not in await store.get_pinned(context.ref):
        return f"Nothing is pinned under {key}."
    await store.delete_pinned(context.ref, key)
    return f"Forgot {key}."


async def list_memory(context: CommandContext) -> str:
    """The pinned facts of this conversation."""
    pinned = await context.gateway.store.get_pinned(context.ref)
    if not pinned:
        return "Nothing is pinned in this conversation. Use: remember KEY VALUE"
    return "Pinned facts:\n" + "\n".join(f"• {key}: {value}" for key, value in pinned.items())


async def usage(context: CommandContext) -> str:
    """The sender's plan and what is left of it."""
    gateway = context.gateway
    stored = await gateway.store.get_user(context.user.user_id)
    fresh = await gateway.accounts.current_user(stored or context.user)
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
def register_commands(gateway: Gateway) -> list[ChatCommand]:
    """Register the built-in commands (first: help lists them before plugins' ones)."""
    return list(BUILT_IN)
