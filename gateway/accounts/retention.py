"""Retention: delete threads inactive longer than their owner's plan allows.

A purged thread loses everything: conversation, display transcript, pinned keys, and its
session files (active and archived). Runs from ``cloudybot purge`` and periodically in serve.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gateway.base.locks import KeyedLocks
from gateway.base.times import iso
from gateway.billing.quotas import Quotas
from gateway.config.settings import Settings
from gateway.memory.sessions import Sessions
from gateway.store import ExpiredThread, Store
from gateway.store import events as webhook_events

log = logging.getLogger(__name__)
PURGE_ROLE = "purge"  # one process at a time purges a shared database
INBOUND_IDS_KEPT_DAYS = 30


@dataclass
class PurgeReport:
    """What a purge removed (or, in a dry run, would remove)."""

    dry_run: bool
    threads: list[ExpiredThread] = field(default_factory=list)
    files: int = 0
    orphans: int = 0  # archived session files of threads deleted earlier
    inbound_ids: int = 0

    def by_plan(self) -> Counter[str]:
        """Purged threads per plan."""
        return Counter(thread.plan for thread in self.threads)


@dataclass(frozen=True)
class Retention:
    """Purges what plan retention has expired, with what that takes: the store, the session
    files, the turn locks (a thread is never purged under a running turn) and the clock."""

    settings: Settings
    store: Store
    sessions: Sessions
    locks: KeyedLocks
    clock: Callable[[], float]
    quotas: Quotas

    def cutoffs(self) -> dict[str, str]:
        """``{plan: ISO time}``: threads of that plan untouched since then are expired."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        return {name: iso(now - timedelta(days=plan.retention_days))
                for name, plan in self.settings.plans.items() if plan.retention_days > 0}

    async def purge(self, *, dry_run: bool = False,
                    progress: Callable[[int, int, ExpiredThread], None] | None = None,
                    ) -> PurgeReport:
        """Delete expired threads and their session files; with ``dry_run`` change
        nothing."""
        report = PurgeReport(dry_run)
        expired = await self.store.expired_threads(self.cutoffs())
        for index, thread in enumerate(expired, start=1):
            if not dry_run:
                removed, files = await self.purge_thread(thread.session_key, thread.updated_at)
                if not removed:
                    continue  # used again since it was listed
                report.files += files
            report.threads.append(thread)
            if progress is not None:
                progress(index, len(expired), thread)
        await self._sweep_orphans(report)
        if not dry_run:
            moment = datetime.fromtimestamp(self.clock(), UTC)
            report.inbound_ids = await self.store.prune_inbound(
                iso(moment - timedelta(days=INBOUND_IDS_KEPT_DAYS)))
            self.quotas.prune()
        if report.threads:
            log.info("retention: %s %d thread(s), %d session file(s)",
                     "would purge" if dry_run else "purged", len(report.threads), report.files)
        return report

    async def purge_thread(self, session_key: str, last_update: str) -> tuple[bool, int]:
        """Delete an expired thread and all its session files, unless it was updated after
        ``last_update``; return (deleted, files removed)."""
        async with self.locks.hold(session_key):
            thread = await self.store.get_thread(session_key)
            if thread is None or thread.updated_at > last_update:
                return False, 0
            await self.store.delete_thread(
                session_key, (webhook_events.thread_deleted(thread.ref, "retention"),))
            return True, await self.sessions.remove(session_key)

    async def _sweep_orphans(self, report: PurgeReport) -> None:
        """Archives of deleted threads (a delete archives the session) go once older than the
        default plan's retention: deleting a thread must not keep its transcript forever."""
        days = self.settings.plans[self.settings.default_plan].retention_days
        if days <= 0:
            return

        async def has_thread(key: str) -> bool:
            return await self.store.get_thread(key) is not None

        orphans = await self.sessions.drop_orphan_archives(self.clock() - days * 86400,
                                                           report.dry_run, has_thread)
        report.orphans += orphans
        report.files += 0 if report.dry_run else orphans

    async def purge_periodically(self, interval_seconds: float) -> None:
        """Purge every ``interval_seconds`` until cancelled; a failed run is logged, not
        fatal. With several processes, a round is run by whichever process takes the purge
        role first; the others skip it."""
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                purger = await self.store.try_lead(PURGE_ROLE)
                if purger is None:
                    log.debug("retention: another process is purging; skipped")
                    continue
                try:
                    await self.purge()
                finally:
                    await purger.release()
            except Exception:
                log.exception("retention purge failed; will try again")
