"""The usage rollups both stores keep beside the ledger, so that an admin's usage report reads a
few thousand rows whatever the ledger holds: PostgreSQL adds to them in the transaction of
each charge; SQLite folds the ledger into them in batches, and before every report
(:mod:`~gateway.store.sqlite_rollups`).

- ``usage_hours``: per UTC hour, per value of one dimension (``plan``, ``model``,
  ``channel``, ``tool``), the spending of every account: four rows a charge touches, one per
  dimension, each small (a busy month is some thousands of rows).
- ``usage_days``: per account and UTC day, its spending, keyed by month first so that a
  month's spenders are read in account order (summed as they are read: no sort).

A deleted account's ``usage_days`` rows go with it; ``usage_hours`` keeps its spending, with
nobody's name on it. Grants are not usage. Pure helpers here; the SQL is each store's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, timedelta

from gateway.store.records import Charge, Spend

DIMENSIONS = ("plan", "model", "channel", "tool")
GROUPS = (*DIMENSIONS, "user")
BUCKETS = ("day", "hour")
# PostgreSQL spreads each hour's rows over this many shards (by account), so that concurrent
# commits of different accounts seldom wait for each other's row lock.
SHARDS = 16


def hour_key(stamp: str) -> str:
    """The rollup hour (``YYYY-MM-DDTHH``) of an ISO-8601 UTC time."""
    return stamp[:13]


def spend_of(charges: Iterable[Charge]) -> Spend:
    """What ``charges`` cost, summed (a call is a charge that names a model)."""
    calls = prompt = completion = credits = minutes = 0
    for charge in charges:
        calls += charge.model != ""
        prompt += charge.prompt_tokens
        completion += charge.completion_tokens
        credits += charge.credits
        minutes += charge.minutes
    return Spend(calls, prompt, completion, credits, minutes)


def add(one: Spend, other: Spend) -> Spend:
    """Two spends summed."""
    return Spend(one.calls + other.calls, one.prompt_tokens + other.prompt_tokens,
                 one.completion_tokens + other.completion_tokens,
                 one.credits + other.credits, one.minutes + other.minutes)


def days_of(start: str, end: str) -> tuple[str, str]:
    """The whole UTC days a range of hour keys (``YYYY-MM-DDTHH``) or day keys touches: the
    first and the one after the last (exclusive). Per-account figures are kept per day, so
    that is the range they are read for."""
    end_day = date.fromisoformat(end[:10])
    if len(end) > 10 and end[11:13] != "00":  # ends within a day: that day counts
        end_day += timedelta(days=1)
    return start[:10], end_day.isoformat()


def months_of(first_day: str, end_day: str) -> list[str]:
    """The months (``YYYY-MM``) holding the days from ``first_day`` to ``end_day``
    (exclusive), in order."""
    months: list[str] = []
    year, month = int(first_day[:4]), int(first_day[5:7])
    while f"{year:04d}-{month:02d}-01" < end_day:
        months.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


def top_spenders(per_month: Iterable[Iterable[tuple[str, Spend]]],
                 top: int) -> list[tuple[str, Spend]]:
    """The ``top`` accounts by credits (then by id) of what each month's read found."""
    totals: dict[str, Spend] = {}
    for rows in per_month:
        for user_id, spend in rows:
            found = totals.get(user_id)
            totals[user_id] = spend if found is None else add(found, spend)
    ranked = sorted(totals.items(), key=lambda item: (-item[1].credits, item[0]))
    return ranked[:top]
