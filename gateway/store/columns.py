"""Column lists both stores select in the same order (their rows become the same records)."""

from __future__ import annotations

USER_COLUMNS = "user_id, plan, credits, browser_minutes, created_at, period"
THREAD_COLUMNS = ("user_id, thread_id, session_key, channel, summary, summary_tokens, "
                  "summary_version, created_at, updated_at")
DELIVERY_COLUMNS = ("id, channel, message_id, conversation, address, text, max_chars, state,"
                    " chunks_sent, attempts, next_attempt, created, last_error")
WEBHOOK_COLUMNS = "id, user_id, url, events, secret, created_at"
WEBHOOK_DELIVERY_COLUMNS = ("id, message_id, webhook, event, body, state, attempts, last_status,"
                            " next_attempt, created, last_error")
