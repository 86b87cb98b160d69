"""Quotas shared by every gateway process on one PostgreSQL database.

The rate window and the credit holds live on the account's row (``users.rate_hits``,
``users.holds``), changed only by the store's claims and by the commits that release a hold
with the charges it covered. Whether a claim fits is decided by the same rules as the
in-memory quotas' (:mod:`gateway.store.policy`): the claim's statement records it under the
row's lock and returns the row as it left it, the rules judge that, and a refused claim is
taken back (see ``PostgresStore.hold_credits``). A turn's first claim rides on its read
(``Store.load_turn``): a turn without tool rounds makes no round trip for its quotas. The
hold is the first call's worst case at ``MAX_CONTEXT`` (the prompt is not assembled yet when
the state is read), which is more than the in-memory guard holds for a short prompt: with
little credit left, concurrent turns of one user see ``credits_busy`` sooner here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, NoReturn

from gateway.base.errors import Unavailable
from gateway.billing.credits import over_rate_limit, refuse
from gateway.billing.quotas import HOLD_SECONDS, Admission, new_claim
from gateway.config.settings import Settings
from gateway.store import policy
from gateway.store.records import Claim, Claimed, User

if TYPE_CHECKING:
    from gateway.store.postgres import PostgresStore

log = logging.getLogger(__name__)


class SharedQuotas:
    """Admissions whose rate counts and holds every process of the database sees."""

    def __init__(self, store: PostgresStore, settings: Settings,
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock

    @asynccontextmanager
    async def admit(self, user_id: str) -> AsyncIterator[Admission]:
        """Admit a turn of ``user_id``: its hold, if one was placed and no commit released it,
        is released when the block ends."""
        admission = _SharedAdmission(self._store, user_id, new_claim(self._settings,
                                                                     self._clock()),
                                     self._clock)
        try:
            yield admission
        finally:
            try:
                await admission.release()
            except Unavailable:  # the database is gone: the hold expires on its own
                log.warning("cannot release a credit hold of %s; it expires in %g s",
                            user_id, HOLD_SECONDS)

    def prune(self) -> None:
        """Nothing to do: each claim prunes the row it changes."""


class _SharedAdmission:
    def __init__(self, store: PostgresStore, user_id: str, claim: Claim,
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._user_id = user_id
        self._claim = claim
        self._clock = clock
        self._held = 0  # credits this admission holds in the store (0: no hold)

    @property
    def claim(self) -> Claim:
        """Claimed with the turn's read."""
        return self._claim

    @property
    def hold(self) -> str | None:
        """The hold's id while one is placed."""
        return self._claim.hold_id if self._held else None

    async def check(self, user: User, limit: int, claimed: Claimed | None) -> None:
        """Act on what the read claimed: 429 past the rate limit; otherwise the hold was
        placed, or (the monthly grant topped the balance up since the read) is placed now, or
        the turn is refused as the in-memory guard would refuse it."""
        if claimed is None:  # the read did not claim (it was not given the claim): claim now
            claimed = await self._hold(0, self._claim.credits, self._claim.rate_limits)
        if not claimed.rate_ok:
            raise over_rate_limit(limit, claimed.retry_after)
        if claimed.held:
            self._held = self._claim.credits
            return
        if user.credits > claimed.balance:
            await self.reserve(user.credits, self._claim.credits)
            return
        _refuse(claimed, 0)

    async def reserve(self, balance: int, estimate: int, spent: int = 0) -> None:
        """Hold ``spent + estimate`` unless this admission holds that much already."""
        need = spent + estimate
        if need <= self._held:
            return
        claimed = await self._hold(spent, need)
        if not claimed.held:
            _refuse(claimed, spent)
        self._held = need

    async def reserve_alone(self, estimate: int) -> None:
        """Hold ``estimate`` against the balance the claim reads (one statement)."""
        claimed = await self._hold(0, estimate)
        if not claimed.held:
            _refuse(claimed, 0)
        self._held = estimate

    def settle(self, charged: int) -> None:
        """A commit released the hold with the charges."""
        self._held = 0

    async def release(self) -> None:
        """Release a hold no commit released (the turn failed before storing anything)."""
        if self._held:
            self._held = 0
            await self._store.release_hold(self._user_id, self._claim.hold_id)

    async def _hold(self, spent: int, need: int,
                    rate_limits: dict[str, int] | None = None) -> Claimed:
        now = self._clock()
        return await self._store.hold_credits(self._user_id, Claim(
            self._claim.hold_id, need, now, now + HOLD_SECONDS, rate_limits,
            self._claim.daily_caps), spent)


def _refuse(claimed: Claimed, spent: int) -> NoReturn:
    """Raise what a claim the rules did not hold says, for a turn that has ``spent``: as
    the in-memory guard raises it (:func:`gateway.billing.credits.refuse`)."""
    daily = claimed.daily
    refuse(policy.refusal(policy.spendable(claimed.balance, daily) - spent),
           daily if policy.cap_refused(claimed.balance, spent, daily) else None)
