"""SQLite's usage rollups (:mod:`gateway.store.usage`), folded from the ledger in batches.

A booking writes only its ledger rows, each naming what the rollups group by: the account's
plan when it was booked, the thread's channel and the tool (``plan`` is NULL on rows that are
not usage: grants). :func:`fold_usage` adds the ledger rows past the watermark
(``usage_folded.through``) to ``usage_hours`` and ``usage_days`` and moves the watermark, in
one transaction. The store runs it before every report, which therefore always agrees with the
ledger; once a process has booked ``FOLD_BATCH`` charges (on the writer thread, so that no
report has much to fold); before an account's ledger rows go with it; and before a migration
copies the rollups.

Why not in each booking's transaction: two upserts into two more tables were 13% of a turn's
CPU at x8 (more pages in every commit's WAL, checkpoints more often); folded 512 charges at a
time they cost a few µs each.

A watermark is enough because SQLite gives a new row the highest id yet plus one, and writes
one transaction at a time: a row committed after a fold has a higher id than any it folded.
Deleting the newest rows (an account's, with it) would let their ids be given again, so
:func:`forget_folded` lowers the watermark to the newest remaining id after such a delete
(every row up to it was folded just before).
"""

from __future__ import annotations

import sqlite3

# Charges a process books between folds.
FOLD_BATCH = 512

_SUMS = ("sum(model <> ''), sum(prompt_tokens), sum(completion_tokens), sum(credits),"
         " sum(minutes)")
# The ledger rows of usage in the range (?1, ?2].
_RANGE = "FROM ledger WHERE id > ?1 AND id <= ?2 AND plan IS NOT NULL"
_ADD_SPEND = ("calls = calls + excluded.calls, prompt_tokens = prompt_tokens"
             " + excluded.prompt_tokens, completion_tokens = completion_tokens"
             " + excluded.completion_tokens, credits = credits + excluded.credits,"
             " minutes = minutes + excluded.minutes")
# One row per hour and value of each dimension (the WHERE tells SQLite's parser that ON
# CONFLICT is the upsert's, not a join's).
_FOLD_HOURS = ("INSERT INTO usage_hours SELECT * FROM ("
               + " UNION ALL ".join(
                   f"SELECT '{dim}', substr(created_at, 1, 13), coalesce({dim}, ''), {_SUMS}"
                   f" {_RANGE} GROUP BY 2, 3" for dim in ("plan", "channel", "model", "tool"))
               + f") WHERE true ON CONFLICT (dim, hour, value) DO UPDATE SET {_ADD_SPEND}")
_FOLD_DAYS = ("INSERT INTO usage_days SELECT substr(created_at, 1, 7), user_id,"
              f" substr(created_at, 1, 10), {_SUMS} {_RANGE} GROUP BY user_id, 3"
              f" ON CONFLICT (month, user_id, day) DO UPDATE SET {_ADD_SPEND}")


def fold_usage(conn: sqlite3.Connection) -> int:
    """Add the ledger rows booked since the last fold to the rollups and move the watermark,
    in the open transaction; how many ledger ids it moved over."""
    (through,) = conn.execute("SELECT through FROM usage_folded").fetchone()
    (newest,) = conn.execute("SELECT coalesce(max(id), 0) FROM ledger").fetchone()
    if newest <= through:
        return 0
    conn.execute(_FOLD_HOURS, (through, newest))
    conn.execute(_FOLD_DAYS, (through, newest))
    conn.execute("UPDATE usage_folded SET through = ?", (newest,))
    return int(newest - through)


def forget_folded(conn: sqlite3.Connection) -> None:
    """After ledger rows were deleted (right after a :func:`fold_usage` in the same
    transaction), lower the watermark to the newest remaining id, which the next row's id
    will follow."""
    conn.execute("UPDATE usage_folded SET through = (SELECT coalesce(max(id), 0) FROM ledger)")
