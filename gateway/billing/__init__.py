"""Credits and limits: what an LLM call costs, monthly periods, credit reservations of
turns in flight, rate limits (``credits``), and who may start a turn now (``quotas``; shared by
every process on PostgreSQL in ``shared_quotas``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``.
"""
