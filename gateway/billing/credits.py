"""Billing: what an LLM call costs, monthly periods, daily caps, and reservations for
concurrent turns."""

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
from gateway.store import Charge, DailyAllowance, User, policy

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


class DailyCapReached(PaymentRequired):
    """The account's daily credit cap is reached (its balance is not spent): 402 until the
    next 00:00 UTC."""

    code = "daily_cap_reached"

    def __init__(self, daily: DailyAllowance) -> None:
        self.daily = daily
        self.resets_at = policy.resets_at(daily.day)
        super().__init__(f"the daily limit of {daily.cap} AI credits is reached; it resets at "
                         f"{self.resets_at} (00:00 UTC)")


def refuse(standing: policy.Standing, capped: DailyAllowance | None = None) -> NoReturn:
    """Raise what a call refused by the credit rule (:func:`policy.hold_check`) hears: 429
    ``credits_busy`` when other turns hold what is left, 402 ``daily_cap_reached`` when the
    daily cap ``capped`` refused it (:func:`policy.cap_refused`), else 402 when the balance is
    spent."""
    if standing is policy.Standing.BUSY:
        raise CreditsBusy()
    if capped is not None:
        raise DailyCapReached(capped)
    raise PaymentRequired(OUT_OF_CREDITS)


def daily_allowance(settings: Settings, user: User, now: float) -> DailyAllowance | None:
    """The daily cap in force on ``user`` at ``now`` (its own, else its plan's; None: no
    cap), with what it spent today."""
    plan = settings.plans.get(user.plan)
    cap = policy.daily_cap(plan.daily_credits if plan else 0, user.daily_credits)
    return policy.daily_allowance(cap, user, policy.day_of(now))


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


@dataclass(frozen=True)
class CallUsage:
    """One answered provider call, as billed: ``model``, the configured model that answered
    it (the primary's, or a fallback's: its price and its name apply), ``reported``, the
    model the provider said it ran (only logged, masked), and the tokens billed."""

    model: str
    reported: str
    prompt_tokens: int
    completion_tokens: int


def cost(settings: Settings, prompt_tokens: int, completion_tokens: int,
         model: str | None = None) -> int:
    """Whole credits, rounded up, of a call at ``model``'s price (default: the configured
    model's)."""
    price = settings.price_for(model if model is not None else settings.llm_model)
    exact = (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000
    return math.ceil(exact - 1e-9)


def charge_for(settings: Settings, kind: str, usage: CallUsage, tool: str = "") -> Charge:
    """The ledger entry of one call: named after, and billed at the price of, the configured
    model that answered it (``usage.model``), in whole credits rounded up; ``tool`` names the
    tools whose results it read (the usage rollups' tool dimension).

    ``usage.reported``, what the provider says it ran, never reaches the ledger (the usage API
    and exports serve it): a provider's answer is outside text, and one that echoed a saved
    password there would have stored it. Nor does it change the price.
    """
    return Charge(kind, usage.model[:LEDGER_MODEL_CHARS], usage.prompt_tokens,
                  usage.completion_tokens,
                  cost(settings, usage.prompt_tokens, usage.completion_tokens, usage.model),
                  tool=tool[:LEDGER_MODEL_CHARS])


def worst_case(settings: Settings, counted_prompt: int, max_tokens: int) -> int:
    """The most credits one call can be billed (its :class:`UsageBounds` at the price of the
    dearest model that may answer it, fallbacks included), at least one: a reservation of
    this much is never exceeded when the call settles."""
    bounds = UsageBounds.of(counted_prompt, max_tokens)
    return max(1, max(cost(settings, bounds.prompt, bounds.completion, model)
                      for model in settings.chain_models))


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

    def require(self, balance: int, spent: int = 0,
                daily: DailyAllowance | None = None) -> None:
        """Raise unless, counting what others hold and this turn's ``spent``, credits are
        available (within the ``daily`` cap too, if one is in force): 402 when the balance
        itself (or the day's allowance: ``daily_cap_reached``) is spent, 429 ``credits_busy``
        when what is left is only held by other turns in flight (they settle, usually for
        less, soon)."""
        standing = self._standing(balance, spent, daily)
        if standing is not policy.Standing.HELD:
            self._refuse(standing, (balance, spent), daily)

    def reserve(self, balance: int, estimate: int, spent: int = 0,
                daily: DailyAllowance | None = None) -> None:
        """Before a provider call: hold what this turn has ``spent`` so far plus ``estimate``
        (the call's worst case) — or raise as :meth:`require` does, keeping what it held."""
        standing = self._standing(balance, spent, daily)
        held = policy.hold_after(standing is policy.Standing.HELD, self._held, spent + estimate)
        self._account.reserved += held - self._held
        self._held = held
        if standing is not policy.Standing.HELD:
            self._refuse(standing, (balance, spent), daily)

    def _standing(self, balance: int, spent: int,
                  daily: DailyAllowance | None) -> policy.Standing:
        """The credit rule, with what may be spent as this process knows it now (the balance
        read, or the daily cap's allowance if less, less what turns admitted since have
        settled: both fell by as much) and the other turns' holds."""
        account = self._account
        return policy.hold_check(policy.spendable(balance, daily) - self._since, spent,
                                 account.reserved - self._held)

    @property
    def _since(self) -> int:
        """What turns of the account admitted since this one settled."""
        return self._account.settled - self._snapshot

    def _refuse(self, standing: policy.Standing, read: tuple[int, int],
                daily: DailyAllowance | None) -> NoReturn:
        balance, spent = read
        refuse(standing, daily if policy.cap_refused(balance - self._since, spent, daily)
               else None)

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
