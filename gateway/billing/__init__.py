"""Credits and limits: what an LLM call costs, monthly periods, daily caps, credit
reservations of turns in flight, rate limits (``credits``), and who may start a turn now
(``quotas``; shared by every process on PostgreSQL in ``shared_quotas``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.billing.quotas import LocalQuotas, Quotas
from gateway.config.settings import Settings
from gateway.store import Store


def quotas_for(store: Store, settings: Settings, clock: Callable[[], float]) -> Quotas:
    """Rate limits and credit holds where every process of ``store`` sees them: on the
    account rows with PostgreSQL, in this process's memory with SQLite (one process)."""
    if store.shared:
        from gateway.billing.shared_quotas import SharedQuotas
        from gateway.store.postgres import PostgresStore
        assert isinstance(store, PostgresStore)
        return SharedQuotas(store, settings, clock)
    return LocalQuotas(store, settings, clock)
