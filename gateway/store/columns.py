"""Column lists both stores select in the same order (their rows become the same records),
and the thread titles made from two of them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.base.titles import FIRST_MESSAGE_CHARS, derived_title
from gateway.store.records import Thread, User

USER_COLUMNS = ("user_id, plan, credits, browser_minutes, created_at, period, admin, blocked,"
                " daily_credits, spent_day, spent_today, active_at")


def prefixed(columns: str, table: str) -> str:
    """``columns`` (a list as above) each named with ``table.``."""
    return ", ".join(f"{table}.{column.strip()}" for column in columns.split(","))


def user_of(row: Any) -> User:
    """An account from the ``USER_COLUMNS`` of a row (SQLite's 0/1 flags made booleans)."""
    return User(row[0], row[1], row[2], row[3], row[4], row[5], admin=bool(row[6]),
                blocked=bool(row[7]), daily_credits=row[8], spent_day=row[9],
                spent_today=row[10], active_at=row[11])
THREAD_COLUMNS = ("user_id, thread_id, session_key, channel, summary, summary_tokens, "
                  "summary_version, created_at, updated_at")
DELIVERY_COLUMNS = ("id, channel, message_id, conversation, address, text, max_chars, state,"
                    " chunks_sent, attempts, next_attempt, created, last_error, trace")
WEBHOOK_COLUMNS = "id, user_id, url, events, secret, created_at"
WEBHOOK_DELIVERY_COLUMNS = ("id, message_id, webhook, event, body, state, attempts, last_status,"
                            " next_attempt, created, last_error")


def title_columns(table: str) -> str:
    """Two columns more for a thread's title, ``table`` being the threads table's name in the
    query: the title the user set (NULL if none) and the start of its first user message."""
    return (f"{table}.title, (SELECT substr(d.content, 1, {FIRST_MESSAGE_CHARS})"
            f" FROM display_messages d WHERE d.thread = {table}.id AND d.role = 'user'"
            " ORDER BY d.id LIMIT 1)")


def titled(thread: Thread, title: str | None, first_message: str | None) -> Thread:
    """``thread`` with its title, from the columns of :func:`title_columns`."""
    if title is not None:
        return replace(thread, title=title, named=True)
    return replace(thread, title=derived_title(first_message or ""))


JOB_COLUMNS = ("id, user_id, session_key, thread_id, channel, address, max_chars, kind, spec,"
               " time_zone, action, text, misfire, state, next_run, runs, misses, last_run,"
               " last_status, created_at")
JOB_RUN_COLUMNS = "job_id, due, status, detail, at"
