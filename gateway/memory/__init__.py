"""A conversation's memory beyond the store's rows: the JSONL session file per key that
keeps tool continuity and rotates (``sessions``; in PostgreSQL for several processes in
``shared_sessions``), and the rolling summary's requests (``summaries``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.interfaces``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.settings import Settings
from gateway.memory.sessions import (
    RotationObserver,
    RotationRule,
    Sessions,
    SessionStore,
    unobserved,
)
from gateway.store import Store


def sessions_for(store: Store, settings: Settings, count_message: Callable[[Any], int],
                 clock: Callable[[], float], observer: RotationObserver = unobserved,
                 ) -> Sessions:
    """The deployment's agent sessions: rows of its PostgreSQL database (read with each turn's
    state, seen by every process), or JSONL files in ``settings.sessions_dir``."""
    rule = RotationRule(settings.session_idle_minutes, settings.session_max_file_bytes)
    if store.shared:
        from gateway.memory.shared_sessions import PostgresSessions
        from gateway.store.postgres import PostgresStore
        assert isinstance(store, PostgresStore)
        return PostgresSessions(store, rule=rule, count_message=count_message, clock=clock,
                                observer=observer)
    return SessionStore(settings.sessions_dir, rule=rule, count_message=count_message,
                        clock=clock, observer=observer)
