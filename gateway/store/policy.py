"""The account rules, each stated once: what a balance allows, how a month rolls over, when
credits are low, how the rate window counts. Pure functions of the values given: no I/O.

Every place that applies a rule calls these: the SQLite store with the values it read in its
transaction, the PostgreSQL store with the values its statement read under the account row's
lock (or, where a statement must decide alone, with bounds computed here), and the in-process
quotas of one SQLite gateway (:mod:`gateway.billing.credits`) with what they keep in memory.
No rule is written again in SQL: a statement only records, prunes by the cutoffs given, and
returns what a rule here judges.

The store applies them, and may not import the billing package (which uses the store), so
they live here; :mod:`gateway.billing` re-states none of them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TypeVar

from gateway.base.times import iso_utc
from gateway.store.records import Charge, Claimed, DailyAllowance, User

T = TypeVar("T")

# --- balances --------------------------------------------------------------------------------


def opening_period(period: str, now: str) -> str:
    """The billing period a new account starts in: ``period`` if given, else the month of
    ``now`` (an ISO-8601 UTC time), whose grant its opening balances are."""
    return period or now[:7]


def opening_grant(credits: int, minutes: int) -> Charge | None:
    """A new account's balances as its first ledger row (a ``grant``), so that a balance is
    always minus the sum of its ledger; None when it opens with nothing."""
    if not credits and not minutes:
        return None
    return Charge("grant", "", 0, 0, -credits, -minutes)


def top_up(user: User, credits: int, minutes: int, kind: str) -> Charge | None:
    """The grant row (of ``kind``: ``monthly_grant``, ``plan_grant``) raising the user's
    balances to at least ``credits`` and ``minutes``: a grant never lowers a balance above
    them, and tops up one below them (even below zero) to them exactly. None if nothing to add."""
    add_credits = max(0, credits - user.credits)
    add_minutes = max(0, minutes - user.browser_minutes)
    if not add_credits and not add_minutes:
        return None
    return Charge(kind, "", 0, 0, -add_credits, -add_minutes)


def minutes_to_take(left: int, asked: int) -> int:
    """How many of ``asked`` browser minutes a balance of ``left`` gives: never more than it
    holds, so metering never takes the balance below zero (none from a balance at or under
    zero)."""
    return min(asked, max(0, left))


# --- credits.low -----------------------------------------------------------------------------
LOW_CREDITS_SHARE = 0.10  # credits.low: the balance fell under this share of the plan's grant


def low_credits_threshold(grant: int) -> int | None:
    """The balance under which an account's credits are low: a tenth of its plan's monthly
    grant (None for a plan that grants nothing)."""
    return int(grant * LOW_CREDITS_SHARE) if grant > 0 else None


def low_credits_window(threshold: int | None, spent: int) -> tuple[int, int] | None:
    """The balances after charges of ``spent`` credits at which ``credits.low`` is told, as
    (lowest, highest): those under ``threshold`` that were at or over it before the charges.
    A fall is told once: a balance already under the threshold cannot fall under it again
    until a grant lifts it back. None when no balance is (no threshold, nothing spent).

    A store that learns the balance only inside its statement gives the statement these
    bounds, so that the statement decides nothing itself."""
    if threshold is None or spent <= 0:
        return None
    return threshold - spent, threshold - 1


def fell_under(threshold: int | None, after: int, spent: int) -> bool:
    """Whether charges of ``spent`` credits took the balance from ``threshold`` or more to
    ``after``, under it (see :func:`low_credits_window`)."""
    window = low_credits_window(threshold, spent)
    return window is not None and window[0] <= after <= window[1]


# --- the daily cap --------------------------------------------------------------------------
DAILY_LOW_SHARE = 0.8  # credits.low: today's spending reached this share of the daily cap


def day_of(epoch: float) -> str:
    """The UTC day (``YYYY-MM-DD``) of a moment: the day a daily cap counts."""
    return iso_utc(epoch)[:10]


def daily_cap(plan_cap: int, override: int | None) -> int | None:
    """The daily credit cap in force on an account: its own (``override``, set by an admin)
    if it has one, else its plan's; None when that is 0 (no daily cap)."""
    cap = plan_cap if override is None else override
    return cap if cap > 0 else None


def daily_allowance(cap: int | None, user: User, today: str) -> DailyAllowance | None:
    """The cap in force on ``user`` today (None: none): what it spent counts only on the day
    it spent it, so the allowance is whole again at 00:00 UTC."""
    if cap is None:
        return None
    return DailyAllowance(cap, user.spent_today if user.spent_day == today else 0, today)


def spendable(balance: int, daily: DailyAllowance | None) -> int:
    """What an account may spend now: its balance, or what its daily cap leaves if less. The
    credit rule (:func:`hold_check`) is applied to this, so a daily cap is kept as a balance
    is: concurrent turns overshoot it by at most one call's cost."""
    return balance if daily is None else min(balance, daily.left)


def cap_refused(balance: int, spent: int, daily: DailyAllowance | None) -> bool:
    """Whether a call refused as spent (:attr:`Standing.SPENT`) was refused by the daily cap
    (402 ``daily_cap_reached``) rather than by the balance: a cap is in force and the
    balance, less what the turn ``spent``, is not spent."""
    return daily is not None and balance - spent > 0


def resets_at(day: str) -> str:
    """When the allowance of a daily cap counted on ``day`` is whole again: the next 00:00
    UTC (ISO-8601)."""
    return (date.fromisoformat(day) + timedelta(days=1)).isoformat() + "T00:00:00Z"


def daily_low_threshold(cap: int | None) -> int | None:
    """Today's spending at which ``credits.low`` is told: 80% of the daily cap (None: no
    cap)."""
    return math.ceil(cap * DAILY_LOW_SHARE) if cap else None


def reached(threshold: int | None, after: int, spent: int) -> bool:
    """Whether charges of ``spent`` credits took today's spending from under ``threshold``
    to ``after``, at or over it: told once a day (spending only grows within a day)."""
    return threshold is not None and spent > 0 and after - spent < threshold <= after


# --- the rate window -------------------------------------------------------------------------
RATE_WINDOW_SECONDS = 60.0  # a plan's limit counts the requests of the last minute
MIN_RETRY_SECONDS = 0.001  # a Retry-After is never zero: the client is to wait, however little


@dataclass(frozen=True)
class RateVerdict:
    """Whether one more request fits the window (``ok``), and if it does whether it counts
    against it (``counted``: only where there is a limit); if not, when it would."""

    ok: bool
    counted: bool
    retry_after: float


def rate_limited(limit: int) -> bool:
    """Whether requests are counted at all: a limit of 0 (or less) means no limit."""
    return limit > 0


def rate_window_start(now: float) -> float:
    """The moment at or before which a request no longer counts."""
    return now - RATE_WINDOW_SECONDS


def rate_check(hits: Sequence[float], now: float, limit: int) -> RateVerdict:
    """Whether a request at ``now`` fits ``limit`` requests a window, given the moments of the
    requests counted before it (``hits``, oldest first; those out of the window are ignored).
    A refused request is not counted; its ``retry_after`` is when the oldest counted one leaves
    the window."""
    if not rate_limited(limit):
        return RateVerdict(True, False, 0.0)
    start = rate_window_start(now)
    live = [hit for hit in hits if hit > start]
    if len(live) >= limit:
        return RateVerdict(False, False,
                           max(live[0] + RATE_WINDOW_SECONDS - now, MIN_RETRY_SECONDS))
    return RateVerdict(True, True, 0.0)


# --- credit holds ----------------------------------------------------------------------------
class Standing(enum.Enum):
    """What a balance says to a call about to start: ``HELD`` (go; its hold is placed),
    ``BUSY`` (credits are left, but other turns in flight hold them: 429 ``credits_busy``,
    retry soon) or ``SPENT`` (the balance itself is spent: 402)."""

    HELD = "held"
    BUSY = "busy"
    SPENT = "spent"


def refusal(own: int) -> Standing:
    """Why a call that may not start is refused, from what its turn's own balance (``balance -
    spent``) leaves: ``BUSY`` if that is still positive, else ``SPENT``."""
    return Standing.BUSY if own > 0 else Standing.SPENT


def hold_check(balance: int, spent: int, held_by_others: int) -> Standing:
    """Whether a call of a turn that has ``spent`` credits so far may start: while ``balance -
    spent - held_by_others`` is positive. Each call holds its worst case until its charge is
    committed, so concurrent turns of one user overspend by at most one call's cost."""
    own = balance - spent
    if own - held_by_others > 0:
        return Standing.HELD
    return refusal(own)


def hold_after(held: bool, previous: T, need: T) -> T:
    """What an admission holds after asking to hold ``need``: ``need`` if it was let
    (``held``), else what it held before. A refused call keeps its turn's earlier hold: the
    calls that hold covers are charged only at the turn's commit, and until then no other turn
    may spend those credits."""
    return need if held else previous


def held_by_others(holds: Mapping[str, Sequence[float]], own: str, now: float) -> int:
    """Credits held by the admissions other than ``own``, in holds kept as ``{id: [credits,
    expires]}``: a hold whose process never released it stops counting at ``expires``."""
    return sum(int(hold[0]) for hold_id, hold in holds.items()
               if hold_id != own and hold[1] > now)


@dataclass(frozen=True)
class Account:
    """An account row as a claim found it: its balance, plan, counted requests (``hits``),
    credit holds (``{id: [credits, expires, ...]}``) and the daily cap in force on it."""

    balance: int
    plan: str
    hits: Sequence[float]
    holds: Mapping[str, Sequence[float]]
    daily: DailyAllowance | None = None


def judge_claim(account: Account, hold_id: str, spent: int,
                rate_limits: Mapping[str, int] | None, now: float) -> Claimed:
    """A claim on ``account`` (as it was before the claim): one request against the plan's
    rate limit (none when ``rate_limits`` is None), then a hold for its admission ``hold_id``,
    whose turn has spent ``spent``, against what it may spend (:func:`spendable`). A request
    over the limit places no hold."""
    limit = rate_limits.get(account.plan, 0) if rate_limits else 0
    rate = rate_check(account.hits, now, limit)
    held = rate.ok and hold_check(spendable(account.balance, account.daily), spent,
                                  held_by_others(account.holds, hold_id, now)) is Standing.HELD
    return Claimed(rate.ok, rate.retry_after, held, account.balance, account.daily)


def counted_plans(rate_limits: Mapping[str, int] | None) -> list[str]:
    """The plans whose requests a claim with ``rate_limits`` counts."""
    return [plan for plan, limit in (rate_limits or {}).items() if rate_limited(limit)]
