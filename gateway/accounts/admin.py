"""What an admin may do to accounts, each act written to the audit log in the transaction that
does it: promote and demote, block and unblock, grant credits (a ledger row of its own kind,
``admin_grant``, with a reason) and set an account's own daily credit cap. The admin API and
the ``cloudybot`` command both come through here; the command's acts are signed with the
operating-system user that ran it, from ``cli``.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from gateway.base import validation
from gateway.base.errors import BadRequest
from gateway.store import AuditEntry, Store, User

ADMIN_GRANT = "admin_grant"  # the ledger kind of an admin's grant
MAX_GRANT = 1_000_000_000
MAX_DAILY_CREDITS = 1_000_000_000_000
MAX_REASON_CHARS = 500
CLI = "cli"  # the source of a command's acts


@dataclass(frozen=True)
class Actor:
    """Who acts (an admin's user id, or the operating-system user of a command) and from
    where (the client's address, or ``cli``)."""

    name: str
    source: str

    @classmethod
    def command_line(cls) -> Actor:
        """The operating-system user running this ``cloudybot`` command."""
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no name for this uid (a container, say)
            name = "unknown"
        return cls(name, CLI)

    def did(self, action: str, target: str | None, **details: object) -> AuditEntry:
        """The audit entry of ``action`` on ``target``."""
        return AuditEntry(self.name, action, target, dict(details), self.source)


def reason_of(value: object) -> str:
    """A grant's reason: required text, one line's worth (400 ``invalid_reason``; 413 when
    too long)."""
    return validation.text(value, "reason", MAX_REASON_CHARS)


def credits_of(value: object, high: int, name: str) -> int:
    """A whole number of credits from 1 to ``high`` (400 ``invalid_{name}``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise BadRequest(f"{name} must be a whole number from 1 to {high}",
                         code=f"invalid_{name}")
    return value


class Administration:
    """The acts of an admin on accounts (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def set_admin(self, user_id: str, admin: bool, by: Actor) -> User:
        """Promote the account to admin, or demote it."""
        return await self.store.set_flag(
            user_id, "admin", admin, by.did("user.promote" if admin else "user.demote", user_id))

    async def set_blocked(self, user_id: str, blocked: bool, by: Actor) -> User:
        """Block the account (its API calls and channel turns are refused; its data stays),
        or unblock it."""
        return await self.store.set_flag(
            user_id, "blocked", blocked,
            by.did("user.block" if blocked else "user.unblock", user_id))

    async def grant(self, user_id: str, credits: object, reason: object, by: Actor) -> User:
        """Add ``credits`` to the account: a ledger row of kind ``admin_grant``, the reason in
        the audit log."""
        amount = credits_of(credits, MAX_GRANT, "credits")
        why = reason_of(reason)
        return await self.store.grant_credits(
            user_id, amount, by.did("credits.grant", user_id, credits=amount, reason=why),
            ADMIN_GRANT)

    async def set_daily_credits(self, user_id: str, credits: object, by: Actor) -> User:
        """Give the account a daily credit cap of its own (0: none), or its plan's again
        (None)."""
        if credits is not None and (isinstance(credits, bool) or not isinstance(credits, int)
                                    or not 0 <= credits <= MAX_DAILY_CREDITS):
            raise BadRequest(f"dailyCredits must be null or a whole number from 0 to "
                             f"{MAX_DAILY_CREDITS}", code="invalid_daily_credits")
        return await self.store.set_daily_credits(
            user_id, credits, by.did("budget.set", user_id, dailyCredits=credits))
