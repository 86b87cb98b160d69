"""Billing: what an LLM call costs, monthly periods, and reservations for concurrent turns."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

from gateway.base.errors import PaymentRequired, RateLimited
from gateway.base.times import iso, month_of
from gateway.config.settings import Settings
from gateway.store import Charge, policy

OUT_OF_CREDITS = "no AI credits left; ask for a grant or wait for the next period"
CREDITS_BUSY = ("your other requests in progress hold the rest of your AI credits; "
                "retry in a moment")
CREDITS_BUSY_RETRY_SECONDS = 1.0

# The most usage the gateway believes of one call. Reported usage beyond it (or not a
# non-negative integer) is not believed: the gateway bills its own tiktoken count instead.
PROMPT_TOKENS_FACTOR = 4
PROMPT_TOKENS_SLACK = 1000
COMPLETION_TOKENS_SLACK = 64
LEDGER_MODEL_CHARS = 100


class CreditsBusy(RateLimited):
    """Credits are left, but other turns of the user in flight hold them all: retry soon."""

    code = "credits_busy"

    def __init__(self) -> None:
        super().__init__(CREDITS_BUSY, retry_after=CREDITS_BUSY_RETRY_SECONDS)


def refuse(standing: policy.Standing) -> NoReturn:
    """Raise what a call refused by the credit rule (:func:`policy.hold_check`) hears: 429
    ``credits_busy`` when other turns hold what is left, 402 when the balance is spent."""
    if standing is policy.Standing.BUSY:
        raise CreditsBusy()
    raise PaymentRequired(OUT_OF_CREDITS)


def over_rate_limit(limit: int, retry_after: float) -> RateLimited:
    """The 429 of a request over its plan's ``limit`` (:func:`policy.rate_check`)."""
    return RateLimited(f"more than {limit} requests a minute; slow down", retry_after=retry_after)


# --- what a call costs ------------------------------------------------------------------------
@dataclass(frozen=True)
class UsageBounds:
    """The most tokens one call can be billed for: ``prompt`` and ``completion``."""

    prompt: int
    completion: int

    @classmethod
    def of(cls, counted_prompt: int, max_tokens: int) -> UsageBounds:
        """The bounds of a call whose prompt counts ``counted_prompt`` tokens (by tiktoken)
        and whose reply may take ``max_tokens``."""
        return cls(PROMPT_TOKENS_FACTOR * counted_prompt + PROMPT_TOKENS_SLACK,
                   max_tokens + COMPLETION_TOKENS_SLACK)


def cost(settings: Settings, prompt_tokens: int, completion_tokens: int) -> int:
    """Whole credits, rounded up, of a call at the configured model's price."""
    price = settings.price_for(settings.llm_model)
    exact = (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000
    return math.ceil(exact - 1e-9)


def charge_for(settings: Settings, kind: str, model: str, prompt_tokens: int,
               completion_tokens: int) -> Charge:
    """The ledger entry of one call: whole credits, rounded up, at the configured model's price.

    ``model`` is what the provider says it ran; it is kept in the ledger row for information
    only. The price is always the configured model's: a provider saying it ran a
    cheaper model (or ``offline``) never makes a call cheaper, nor a pricier one dearer.
    """
    name = model[:LEDGER_MODEL_CHARS] if isinstance(model, str) and model else settings.llm_model
    return Charge(kind, name, prompt_tokens, completion_tokens,
                  cost(settings, prompt_tokens, completion_tokens))


def worst_case(settings: Settings, counted_prompt: int, max_tokens: int) -> int:
    """The most credits one call can be billed (its :class:`UsageBounds` at the configured
    price), at least one: a reservation of this much is never exceeded when the call settles."""
    bounds = UsageBounds.of(counted_prompt, max_tokens)
    return max(1, cost(settings, bounds.prompt, bounds.completion))


# --- periods ----------------------------------------------------------------------------------
def period_of(epoch: float) -> str:
    """The billing period (a UTC calendar month, ``YYYY-MM``) of a moment."""
    return month_of(epoch)


def period_bounds(period: str) -> tuple[str, str]:
    """ISO-8601 start (inclusive) and end (exclusive) of a period."""
    year, month = (int(part) for part in period.split("-"))
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return iso(start, "seconds"), iso(end, "seconds")


# --- reservations ---------------------------------------------------------------------------
@dataclass
class _Account:
    reserved: int = 0  # credits held by turns in flight
    settled: int = 0  # credits charged by this process since the entry was made
    turns: int = 0  # turns admitted and not yet closed


class Admission:
    """One turn's standing with the :class:`CreditGuard`, from before its balance read to its end.
    """

    def __init__(self, account: _Account) -> None:
        self._account = account
        self._snapshot = account.settled  # taken before the balance is read
        self._held = 0

    def require(self, balance: int, spent: int = 0) -> None:
        """Raise unless, counting what others hold and this turn's ``spent``, credits are
        available: 402 when the balance itself is spent, 429 ``credits_busy`` when what is
        left is only held by other turns in flight (they settle, usually for less, soon)."""
        standing = self._standing(balance, spent)
        if standing is not policy.Standing.HELD:
            refuse(standing)

    def reserve(self, balance: int, estimate: int, spent: int = 0) -> None:
        """Before a provider call: hold what this turn has ``spent`` so far plus ``estimate``
        (the call's worst case) — or raise as :meth:`require` does, keeping what it held."""
        standing = self._standing(balance, spent)
        held = policy.hold_after(standing is policy.Standing.HELD, self._held, spent + estimate)
        self._account.reserved += held - self._held
        self._held = held
        if standing is not policy.Standing.HELD:
            refuse(standing)

    def _standing(self, balance: int, spent: int) -> policy.Standing:
        """The credit rule, with the balance as this process knows it now (what was read,
        less what turns admitted since have settled) and the other turns' holds."""
        account = self._account
        return policy.hold_check(balance - (account.settled - self._snapshot), spent,
                                 account.reserved - self._held)

    def settle(self, charged: int) -> None:
        """The turn (or summarization) was charged ``charged``: its hold becomes that charge.

        A hold covers the call's worst case (:func:`worst_case`), so settling never takes the
        balance further below zero than one call's cost."""
        self._account.settled += charged
        self._release()

    def _release(self) -> None:
        self._account.reserved -= self._held
        self._held = 0


class CreditGuard:
    """Keeps concurrent turns of one user from overspending by more than one turn's cost.

    A turn is admitted before it reads the balance, then reserves its estimated cost under the
    credit rule (:func:`policy.hold_check`, with the balance less what was charged since its
    admission, and the other turns' holds): refused with 402 if the balance itself is spent,
    or with 429 ``credits_busy`` if only the other turns' holds use it up. Settling replaces
    the hold by the real charge, never more than the hold. In-process (one process on
    SQLite); PostgreSQL holds them on the account's row
    (:mod:`gateway.billing.shared_quotas`), under the same rule.
    """

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}

    @contextmanager
    def admit(self, user_id: str) -> Iterator[Admission]:
        """Admit a turn of ``user_id`` for the duration of the block."""
        account = self._accounts.setdefault(user_id, _Account())
        account.turns += 1
        admission = Admission(account)
        try:
            yield admission
        finally:
            admission._release()
            account.turns -= 1
            if account.turns == 0:
                del self._accounts[user_id]


# --- rate limits -----------------------------------------------------------------------------
class RateLimiter:
    """The rate window (:func:`policy.rate_check`) of each user's turns, in this process's
    memory; ``limit`` 0 means no limit."""

    WINDOW_SECONDS = policy.RATE_WINDOW_SECONDS

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._hits: dict[str, deque[float]] = {}

    def check(self, user_id: str, limit: int) -> None:
        """Count one turn, or raise 429 with the seconds until the window has room."""
        if not policy.rate_limited(limit):
            return
        now = self.clock()
        hits = self._hits.setdefault(user_id, deque())
        start = policy.rate_window_start(now)
        while hits and hits[0] <= start:  # out of the window: forgotten (bounded memory)
            hits.popleft()
        verdict = policy.rate_check(hits, now, limit)
        if not verdict.ok:
            raise over_rate_limit(limit, verdict.retry_after)
        if verdict.counted:
            hits.append(now)

    def prune(self) -> None:
        """Forget users with no turn in the window (bounded memory)."""
        start = policy.rate_window_start(self.clock())
        for user_id in [u for u, hits in self._hits.items() if not hits or hits[-1] <= start]:
            del self._hits[user_id]
