"""Admission of a user's turns: the plan's rate limit and the credit holds of turns in flight.

Two implementations of one protocol, picked by the store: :class:`LocalQuotas` keeps both in
this process's memory (one process on SQLite: free of any round trip), and
:class:`gateway.billing.shared_quotas.SharedQuotas` keeps them on the account's row in
PostgreSQL, where every process sees them. A turn's admission is one object from before its
state is read to its end:

1. :attr:`Admission.claim` goes to ``Store.load_turn``: a shared store counts the turn against
   the rate limit and places a hold for its first call in the same statement as the read;
2. :meth:`Admission.check` raises 429 or 402 when the turn may not start;
3. :meth:`Admission.reserve` before each provider call (usually nothing to do);
4. the commit carrying :attr:`Admission.hold` releases the hold with the charges, and
   :meth:`Admission.settle` says so; a turn that ends without a commit releases it on exit.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from gateway.billing.credits import Admission as GuardAdmission
from gateway.billing.credits import (
    CallUsage,
    CreditGuard,
    RateLimiter,
    charge_for,
    daily_allowance,
    worst_case,
)
from gateway.config.settings import Settings
from gateway.store import Store
from gateway.store.records import Charge, Claim, Claimed, DailyAllowance, User

# A hold of a process that died is forgotten after this long (each reservation renews it).
HOLD_SECONDS = 300.0


class Admission(Protocol):
    """One turn's (or summarization's) standing with the user's quotas."""

    @property
    def claim(self) -> Claim | None:
        """What ``Store.load_turn`` should claim with the read (None: nothing)."""

    @property
    def hold(self) -> str | None:
        """The id of this admission's credit hold in the store, for the commit to release."""

    async def check(self, user: User, limit: int, claimed: Claimed | None) -> None:
        """Raise 429 past the rate ``limit`` (requests a minute, 0: none) or while other turns
        hold what is left, 402 when the balance is spent (``daily_cap_reached`` when the day's
        cap is). ``user`` is the account as of now (monthly grant applied); ``claimed`` what
        the read claimed."""

    async def reserve(self, balance: int, estimate: int, spent: int = 0) -> None:
        """Before a provider call: hold what was ``spent`` so far plus ``estimate`` (the call's
        worst case), or raise as :meth:`check` does."""

    async def reserve_alone(self, estimate: int) -> None:
        """Hold ``estimate`` for a call outside a turn (a summarization), against the
        balance as it is now, or raise as :meth:`reserve` does."""

    def settle(self, charged: int) -> None:
        """``charged`` was committed, with :attr:`hold` released by the same commit."""


class Quotas(Protocol):
    """Where admissions come from."""

    def admit(self, user_id: str) -> AbstractAsyncContextManager[Admission]:
        """Admit a turn of ``user_id`` for the duration of the block (before its balance is
        read)."""

    def prune(self) -> None:
        """Forget what no longer limits anyone (periodic, bounded memory)."""


class LocalQuotas:
    """Quotas of one process: the in-memory :class:`CreditGuard` and :class:`RateLimiter`."""

    def __init__(self, store: Store, settings: Settings, clock: Callable[[], float]) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.credit_guard = CreditGuard()
        self.rate_limiter = RateLimiter(clock)

    @asynccontextmanager
    async def admit(self, user_id: str) -> AsyncIterator[Admission]:
        """Admit a turn of ``user_id`` for the duration of the block."""
        with self.credit_guard.admit(user_id) as admission:
            yield _LocalAdmission(self, user_id, admission)

    def prune(self) -> None:
        """Forget users with no turn in the rate window."""
        self.rate_limiter.prune()


@dataclass
class _LocalAdmission:
    quotas: LocalQuotas
    user_id: str
    admission: GuardAdmission

    claim: Claim | None = None
    hold: str | None = None
    daily: DailyAllowance | None = None  # the daily cap in force, as the check read it

    def _daily(self, user: User) -> DailyAllowance | None:
        return daily_allowance(self.quotas.settings, user, self.quotas.clock())

    async def check(self, user: User, limit: int, claimed: Claimed | None) -> None:
        """Count the turn against the rate limit, then require credits within the daily cap
        (see :meth:`billing.Admission.require`)."""
        self.quotas.rate_limiter.check(self.user_id, limit)
        self.daily = self._daily(user)
        self.admission.require(user.credits, daily=self.daily)

    async def reserve(self, balance: int, estimate: int, spent: int = 0) -> None:
        """Hold ``spent + estimate`` in this process's guard."""
        self.admission.reserve(balance, estimate, spent, self.daily)

    async def reserve_alone(self, estimate: int) -> None:
        """Read the balance (after admission, as a turn does), then hold ``estimate``."""
        user = await self.quotas.store.get_user(self.user_id)
        if user is None:
            self.admission.reserve(0, estimate)
            return
        self.admission.reserve(user.credits, estimate, daily=self._daily(user))

    def settle(self, charged: int) -> None:
        """The hold becomes the charge."""
        self.admission.settle(charged)


def new_claim(settings: Settings, now: float) -> Claim:
    """A turn's claim: a new hold id, held for a first call at the most a prompt can count
    (``MAX_CONTEXT``), and the plans' rate limits."""
    return Claim(hold_id=uuid.uuid4().hex,
                 credits=worst_case(settings, settings.max_context, settings.llm_max_tokens),
                 now=now, expires=now + HOLD_SECONDS,
                 rate_limits={name: plan.requests_per_minute
                              for name, plan in settings.plans.items()},
                 daily_caps={name: plan.daily_credits for name, plan in settings.plans.items()})

class TurnBill:
    """One turn's billing from first call to end: before each provider call a hold for its
    worst case (:meth:`reserve`), after it the charge of what it used (:meth:`charge`), and at
    the end the charges settled (:meth:`settle`), also when the turn fails after a call
    answered."""

    def __init__(self, settings: Settings, admission: Admission, balance: int) -> None:
        self._settings = settings
        self._admission = admission
        self.balance = balance  # the billed account's balance when the turn began
        self.charges: list[Charge] = []

    @property
    def spent(self) -> int:
        """Credits charged so far."""
        return sum(charge.credits for charge in self.charges)

    @property
    def hold(self) -> str | None:
        """The turn's credit hold in the store, released by the commit that carries it."""
        return self._admission.hold

    async def reserve(self, prompt_tokens: int) -> None:
        """Before a chat call whose prompt counts ``prompt_tokens``: hold its worst case
        (:func:`worst_case`); 402 when the balance is spent, 429 ``credits_busy`` when other
        turns in flight hold what is left."""
        estimate = worst_case(self._settings, prompt_tokens, self._settings.llm_max_tokens)
        await self._admission.reserve(self.balance, estimate, spent=self.spent)

    def charge(self, kind: str, usage: CallUsage, tool: str = "") -> None:
        """Charge a call that answered, at the price of the configured model that answered
        it (``tool``: the tools whose results it read)."""
        self.charges.append(charge_for(self._settings, kind, usage, tool))

    def refund_last(self) -> None:
        """The last call's answer could not be used (it was empty): it is not charged."""
        self.charges.pop()

    def settle(self) -> int:
        """The charges were committed (with the hold's release): the turn costs what was
        charged, which this returns."""
        spent = self.spent
        self._admission.settle(spent)
        return spent
