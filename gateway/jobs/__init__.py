"""Scheduled jobs: reminders, digests and recurring checks that post in the thread they were
made in, exactly once across processes and crashes.

:mod:`~gateway.jobs.timing` reads when a job runs (one time, an interval, or a 5-field cron
in an IANA time zone) and computes its runs: the gateway, never the model, does the date
arithmetic. :mod:`~gateway.jobs.book` makes, lists, pauses and deletes a user's jobs under
their plan's limits; :mod:`~gateway.jobs.scheduler` sleeps until the next due run, claims it
with a lease and commits its result with the claim's end.

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.turn``,
``gateway.interfaces``.
"""
