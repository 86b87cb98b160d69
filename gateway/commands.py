"""Chat commands every channel offers: start/help, new, remember, forget, memory, usage.

Telegram spells them ``/remember KEY VALUE``; Slack ``/cloudybot remember KEY VALUE``. The
answers are plain text; nothing here calls the LLM or costs credits.
"""

from __future__ import annotations

from contextlib import suppress
from typing import TYPE_CHECKING

from . import validation
from .errors import BadRequest, NotFound
from .secrets import refuse_saved_passwords

if TYPE_CHECKING:
    from .gateway import Gateway
    from .inbound import Command
    from .store import ThreadRef, User

HELP = """I'm CloudyBot. Just write to me; I remember this conversation.
Commands:
  new — start a fresh conversation (pinned facts stay)
  remember KEY VALUE — pin a fact I always keep in mind here
  forget KEY — unpin a fact
  memory — list the pinned facts
  usage — your plan and remaining credits"""


async def run_command(gateway: Gateway, command: Command, user: User, ref: ThreadRef) -> str:
    """Run ``command`` for ``user`` in the conversation ``ref``; return the answer text."""
    name = command.name.lower()
    argument = command.argument.strip()
    if name in ("start", "help", ""):
        return HELP
    if name == "new":
        with suppress(NotFound):  # nothing to clear yet
            await gateway.clear_thread(ref)
        return "Started a new conversation. Pinned facts are kept; use forget to drop one."
    if name == "remember":
        key, _, value = argument.partition(" ")
        if not key or not value.strip():
            return "Usage: remember KEY VALUE — for example: remember name Ada"
        try:
            validation.memory_key(key)
            validation.memory_value(value.strip())
            await refuse_saved_passwords(gateway.store, gateway.secret_box, user.user_id,
                                         {"key": key, "value": value.strip()})
            await gateway.store.put_pinned(ref, key, value.strip(),
                                           gateway.settings.max_pinned_keys)
        except BadRequest as exc:
            return f"I can't pin that: {exc.message}."
        return f"Pinned {key}."
    if name == "forget":
        if not argument:
            return "Usage: forget KEY"
        remaining = await gateway.store.get_pinned(ref)
        if argument not in remaining:
            return f"Nothing is pinned under {argument}."
        await gateway.store.delete_pinned(ref, argument)
        return f"Forgot {argument}."
    if name == "memory":
        pinned = await gateway.store.get_pinned(ref)
        if not pinned:
            return "Nothing is pinned in this conversation. Use: remember KEY VALUE"
        return "Pinned facts:\n" + "\n".join(f"• {k}: {v}" for k, v in pinned.items())
    if name == "usage":
        fresh = await gateway.current_user(await gateway.store.get_user(user.user_id) or user)
        return (f"Plan: {fresh.plan}. AI credits left: {fresh.credits}. "
                f"Browser minutes: {fresh.browser_minutes}.")
    return f"Unknown command {command.name!r}.\n\n{HELP}"
