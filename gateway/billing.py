"""Billing: what an LLM call costs, monthly periods, and reservations for concurrent turns."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from .config import Settings
from .errors import PaymentRequired, RateLimited
from .store import Charge
from .times import iso

OUT_OF_CREDITS = "no AI credits left; ask for a grant or wait for the next period"


def charge_for(settings: Settings, kind: str, model: str, prompt_tokens: int,
               completion_tokens: int) -> Charge:
    """The ledger entry of one call: whole credits, rounded up, at the model's price.

    ``model`` is what the provider says it ran; if that has no price (``gpt-4o-2024-08-06``),
    the configured model's price applies, then the default.
    """
    price = settings.price_for(model, settings.llm_model)
    cost = (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000
    return Charge(kind, model, prompt_tokens, completion_tokens, math.ceil(cost - 1e-9))


# --- periods ----------------------------------------------------------------------------------
def period_of(epoch: float) -> str:
    """The billing period (a UTC calendar month, ``YYYY-MM``) of a moment."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m")


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

    def available(self, balance: int) -> int:
        """Credits this turn may count on: ``balance`` (as read after admission) less what was
        charged since and what other turns hold."""
        account = self._account
        return balance - (account.settled - self._snapshot) - account.reserved

    def reserve(self, balance: int, estimate: int, spent: int = 0) -> None:
        """Before a provider call: hold what this turn has ``spent`` so far plus ``estimate``
        (the call's worst case) — or raise 402 if, counting what others hold and this turn's
        spending, nothing is available."""
        account = self._account
        others = account.reserved - self._held
        if balance - (account.settled - self._snapshot) - others - spent <= 0:
            raise PaymentRequired(OUT_OF_CREDITS)
        account.reserved += spent + estimate - self._held
        self._held = spent + estimate

    def settle(self, charged: int) -> None:
        """The turn was stored and charged ``charged``: its hold becomes that charge."""
        self._account.settled += charged
        self._release()

    def _release(self) -> None:
        self._account.reserved -= self._held
        self._held = 0


class CreditGuard:
    """Keeps concurrent turns of one user from overspending by more than one turn's cost.

    A turn is admitted before it reads the balance, then reserves its estimated cost: it may
    start only while ``balance - charged since admission - held by other turns`` is positive.
    Settling replaces the hold by the real charge. In-process; a multi-instance store would hold
    reservations in the database instead.
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

    def charged(self, user_id: str, credits: int) -> None:
        """A charge outside a turn (summarization) that turns in flight must count."""
        account = self._accounts.get(user_id)
        if account is not None:
            account.settled += credits


# --- rate limits -----------------------------------------------------------------------------
class RateLimiter:
    """Sliding one-minute window of turns per user; ``limit`` 0 means no limit."""

    WINDOW_SECONDS = 60.0

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._hits: dict[str, deque[float]] = {}

    def check(self, user_id: str, limit: int) -> None:
        """Count one turn, or raise 429 with the seconds until the window has room."""
        if limit <= 0:
            return
        now = self.clock()
        hits = self._hits.setdefault(user_id, deque())
        while hits and hits[0] <= now - self.WINDOW_SECONDS:
            hits.popleft()
        if len(hits) >= limit:
            retry_after = hits[0] + self.WINDOW_SECONDS - now
            raise RateLimited(f"more than {limit} requests a minute; slow down",
                              retry_after=max(retry_after, 0.001))
        hits.append(now)

    def prune(self) -> None:
        """Forget users with no turn in the window (bounded memory)."""
        cutoff = self.clock() - self.WINDOW_SECONDS
        for user_id in [u for u, hits in self._hits.items() if not hits or hits[-1] <= cutoff]:
            del self._hits[user_id]
