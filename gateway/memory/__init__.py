"""A conversation's memory beyond the store's rows: the JSONL session file per key that
keeps tool continuity and rotates (``sessions``; in PostgreSQL for several processes in
``shared_sessions``), and the rolling summary's requests (``summaries``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.interfaces``.
"""
