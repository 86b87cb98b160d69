"""JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of what the HTTP API reads and answers.

The bounds come from the constants the handlers check against, so the description and the
checks cannot say two different things; ``GET /openapi.json`` assembles them
(:mod:`gateway.api.openapi`).
"""

from __future__ import annotations

from typing import Any

from gateway.base import search_text, titles, validation

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "description": "ISO-8601 UTC, e.g. 2026-12-03T10:00:00.000000Z"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An answer's object: exactly these properties (``required`` always present)."""
    return {"type": "object", "properties": {**required, **(optional or {})},
            "required": list(required), "additionalProperties": False}


def body(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """A request's object: these properties (``required`` always present); any other is
    ignored, as the handlers ignore it."""
    return {**obj(required, optional), "additionalProperties": True}


def array(items: Schema) -> Schema:
    """A list of ``items``."""
    return {"type": "array", "items": items}


def pattern(regex: str, max_length: int) -> Schema:
    """A string matching ``regex`` whole."""
    return {"type": "string", "pattern": f"^(?:{regex})$", "maxLength": max_length}


def text(max_length: int, min_length: int = 1) -> Schema:
    """Free text as :func:`gateway.base.validation.text` takes it: not blank (a character that
    is not whitespace), no NUL, at most ``max_length`` characters (413 above)."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length,
            "pattern": r"[^\s\x00]", "not": {"pattern": r"\x00"}}


THREAD_ID = {**pattern(validation.THREAD_ID.pattern, 128), "not": {"enum": [".", ".."]},
             "description": "chosen by the client; per user"}
MEMORY_KEY = pattern(validation.MEMORY_KEY.pattern, 64)
NAME = pattern(validation.NAME.pattern, 64)

ERROR = obj({"error": obj({"code": STRING, "message": STRING})})
OPENAI_ERROR = obj({"error": obj({
    "message": STRING, "code": nullable(STRING), "param": nullable(STRING),
    "type": {"enum": ["invalid_request_error", "authentication_error", "insufficient_quota",
                      "permission_error", "rate_limit_error", "api_error"]}})})
USAGE = obj({"promptTokens": INTEGER, "completionTokens": INTEGER, "credits": INTEGER})
CHAT_ANSWER = obj({"threadId": STRING, "reply": STRING, "usage": USAGE, "summarized": BOOLEAN,
                   "sessionRotated": BOOLEAN, "stopped": BOOLEAN}, {"command": STRING})
STOPPED = obj({"threadId": STRING, "stopped": BOOLEAN})
MEMORY = obj({"threadId": STRING, "memory": {"type": "object", "additionalProperties": STRING}})
TITLE: Schema = {"type": "string", "maxLength": titles.MAX_TITLE_CHARS,
                 "description": "the title the user set (titleSet), else the start of the "
                                "thread's first message; \"\" while it has none"}
THREAD_SUMMARY = obj({"threadId": STRING, "title": TITLE, "titleSet": BOOLEAN,
                      "channel": STRING, "sessionKey": STRING, "createdAt": TIME,
                      "updatedAt": TIME})
SEARCH_MATCH = {**obj({"messageId": nullable(INTEGER), "snippet": {
    "type": "string", "maxLength": search_text.SNIPPET_CHARS + 2}}),
    "description": "the thread's newest message holding every word (its id and text around "
                   "the first match, on one line); messageId null and snippet \"\" when only "
                   "the title did"}
THREADS = obj({"threads": array({**THREAD_SUMMARY, "properties": {
    **THREAD_SUMMARY["properties"], "match": SEARCH_MATCH}}), "nextBefore": nullable(STRING)},
    {"terms": {**array(STRING), "description": "with q: the words searched for, lower-cased"}})
RENAME = {**body({"title": {"anyOf": [
    {"type": "string", "minLength": 1, "maxLength": titles.MAX_TITLE_CHARS,
     "pattern": f"^[^{titles.UNPRINTABLE_CLASS}]*[^{titles.UNPRINTABLE_CLASS}\\s]"
                f"[^{titles.UNPRINTABLE_CLASS}]*$",
     "description": "one line: no control characters or separators, not blank"},
    {"type": "null"}]}}),
    "examples": [{"title": "Trip to Lisbon"}, {"title": None}]}
CHANNEL_DELIVERY = obj({"messageId": STRING, "state": STRING, "attempts": INTEGER,
                        "createdAt": TIME, "nextAttemptAt": nullable(TIME),
                        "lastError": nullable(STRING)})
THREAD = {**THREAD_SUMMARY, "properties": {
    **THREAD_SUMMARY["properties"], "summary": STRING,
    "messages": array(obj({"role": STRING, "content": STRING})),
    "display_messages": array(obj({"id": INTEGER, "role": STRING, "content": STRING,
                                   "createdAt": TIME})),
    "nextBefore": nullable(INTEGER), "deliveries": array(CHANNEL_DELIVERY)},
    "required": [*THREAD_SUMMARY["required"], "summary", "messages", "display_messages",
                 "nextBefore", "deliveries"]}
SESSION_STATUS = obj({
    "threadId": STRING, "sessionKey": STRING,
    "active": nullable(obj({"bytes": INTEGER, "updatedAt": TIME})),
    "maxBytes": INTEGER, "idleMinutes": {"type": "number"}, "lastRotation": nullable(TIME),
    "archives": array(obj({"name": STRING, "bytes": INTEGER, "archivedAt": TIME}))})
CONTEXT = obj({"threadId": STRING, "maxContext": INTEGER, "totalTokens": INTEGER,
               "layers": array(obj({"name": STRING, "tokens": INTEGER, "text": STRING})),
               "recent": obj({"kept": INTEGER, "dropped": INTEGER})})
CLEARED = obj({"threadId": STRING, "cleared": {"const": True}})
CREDITS = obj({"userId": STRING, "plan": STRING, "credits": INTEGER, "browserMinutes": INTEGER,
               "period": STRING, "periodStart": STRING, "periodEnd": STRING})
SPENT = {"promptTokens": INTEGER, "completionTokens": INTEGER, "credits": INTEGER,
         "browserMinutes": INTEGER}
USAGE_PAGE = obj({
    "userId": STRING, "period": STRING, "periodStart": STRING, "periodEnd": STRING,
    "entries": array(obj({"id": INTEGER, "kind": STRING, "model": STRING,
                          "thread": nullable(STRING), "createdAt": TIME, **SPENT})),
    "nextBefore": nullable(INTEGER),
    "totals": {"type": "object", "additionalProperties": obj({"count": INTEGER, **SPENT})}})
DAILY = obj({"userId": STRING, "days": array(obj({
    "date": STRING, "credits": INTEGER,
    "kinds": {"type": "object", "additionalProperties": obj({"credits": INTEGER,
                                                            "browserMinutes": INTEGER})}}))})
SPECIALIST = obj({"name": STRING, "instructions": STRING})
SPECIALISTS = obj({"specialists": array(SPECIALIST)})
CREDENTIALS = array(obj({"site": STRING, "username": nullable(STRING)}))
SIGNED_IN = obj({"userId": STRING, "csrf": nullable(STRING), "vision": BOOLEAN,
                 "maxImageBytes": INTEGER, "admin": BOOLEAN})
WEBHOOK = obj({"id": STRING, "url": STRING, "events": array(STRING), "createdAt": TIME})
NEW_WEBHOOK = {**WEBHOOK, "properties": {**WEBHOOK["properties"],
                                         "secret": {"type": "string", "pattern": "^whsec_"}},
               "required": [*WEBHOOK["required"], "secret"]}
WEBHOOKS = obj({"webhooks": array(WEBHOOK)})
WEBHOOK_DELIVERIES = obj({"webhookId": STRING, "deliveries": array(obj({
    "id": STRING, "event": STRING, "status": {"enum": ["pending", "delivered", "failed"]},
    "attempts": INTEGER, "lastStatusCode": nullable(INTEGER), "nextAttemptAt": nullable(TIME),
    "createdAt": TIME, "lastError": nullable(STRING)}))})
WEBHOOK_TEST = obj({"webhookId": STRING, "event": {"const": "webhook.test"}})
JOB = obj({"id": STRING, "threadId": STRING, "channel": STRING,
           "kind": {"enum": ["at", "every", "cron"]}, "spec": STRING, "timeZone": STRING,
           "schedule": STRING, "action": {"enum": ["message", "prompt"]}, "text": STRING,
           "misfire": {"enum": ["run_once", "skip"]},
           "state": {"enum": ["active", "paused", "done"]}, "nextRun": nullable(TIME),
           "nextRunLocal": nullable(STRING), "runs": INTEGER, "misses": INTEGER,
           "lastStatus": nullable(STRING), "createdAt": TIME})
JOB_RUN = obj({"due": TIME, "status": {"enum": ["sent", "late", "skipped", "missed", "refused",
                                                "failed"]}, "detail": STRING})
TIME_ZONE = obj({"timeZone": STRING})
JOBS = obj({"timeZone": STRING, "jobs": array({
    **JOB, "properties": {**JOB["properties"], "recentRuns": array(JOB_RUN)},
    "required": [*JOB["required"], "recentRuns"]})})
MODELS = obj({"object": {"const": "list"}, "data": array(obj({
    "id": STRING, "object": {"const": "model"}, "created": INTEGER, "owned_by": STRING}))})
COMPLETION_USAGE = obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER,
                        "total_tokens": INTEGER})
COMPLETION = obj({"id": STRING, "object": {"const": "chat.completion"}, "created": INTEGER,
                  "model": STRING, "choices": array(obj({
                      "index": INTEGER, "finish_reason": STRING, "logprobs": {"type": "null"},
                      "message": obj({"role": {"const": "assistant"}, "content": STRING})})),
                  "usage": COMPLETION_USAGE})
HEALTH = obj({"status": {"const": "ok"}})
# One Server-Sent Event: /chat's are delta, reset, done and error; /v1's are unnamed chunks.
EVENT_STREAM = {**obj({}, {"event": STRING, "data": STRING, "id": STRING, "retry": INTEGER}),
                "description": "each Server-Sent Event"}
BINARY: Schema = {"type": "string", "format": "binary"}

# --- /api/admin/* --------------------------------------------------------------------------
USER_ID = {"type": "string", "pattern": "^[A-Za-z0-9_.:@-]*[A-Za-z0-9_.:@]$", "maxLength": 128,
           "not": {"pattern": "--"}, "description": "an account id"}
def when(regex: str) -> Schema:
    """A moment a query names (``regex``: :data:`gateway.api.admin.WHEN`'s)."""
    return {**pattern(regex, 40), "description": "a date (2026-12-01) or a date and time "
            "(2026-12-01T09:30:00Z; minutes, seconds and the offset optional: UTC unless "
            "named); 400 if no such day or time"}
ADMIN_USER = obj({"userId": STRING, "plan": STRING, "credits": INTEGER,
                  "browserMinutes": INTEGER, "period": STRING, "createdAt": TIME,
                  "lastActive": nullable(TIME), "admin": BOOLEAN, "blocked": BOOLEAN,
                  "dailyCredits": {**nullable(INTEGER),
                                   "description": "the account's own daily cap (null: its "
                                                  "plan's; 0: none)"},
                  "dailyCap": {**nullable(INTEGER),
                               "description": "the daily cap in force (null: none)"},
                  "spentToday": INTEGER})
ADMIN_USERS = obj({"users": array(ADMIN_USER), "nextAfter": nullable(STRING)})
GRANTED = obj({"user": ADMIN_USER, "granted": INTEGER})
SPEND: Schema = {"calls": INTEGER, "promptTokens": INTEGER, "completionTokens": INTEGER,
                 "credits": INTEGER, "browserMinutes": INTEGER}
USAGE_REPORT = obj({
    "from": STRING, "to": STRING, "bucket": {"enum": ["day", "hour"]},
    "groupBy": {"enum": ["plan", "model", "channel", "tool", "user"]},
    "series": array(obj({"bucket": STRING, "group": STRING, **SPEND})),
    "totals": obj(SPEND),
    "topSpenders": obj({"from": STRING, "to": STRING,
                        "users": array(obj({"userId": STRING, **SPEND}))})})
HEALTH_REPORT = obj({
    "channels": array(obj({"channel": STRING, "inboxPending": INTEGER,
                           "outboxPending": INTEGER, "oldestPending": nullable(TIME),
                           "oldestPendingSeconds": nullable({"type": "number"}),
                           "failed": INTEGER})),
    "webhooks": array(obj({"id": STRING, "userId": STRING, "host": STRING,
                           "retrying": INTEGER, "failed": INTEGER,
                           "lastStatusCode": nullable(INTEGER),
                           "lastError": nullable(STRING)})),
    "failingSince": TIME,
    "jobs": obj({"active": INTEGER, "paused": INTEGER, "done": INTEGER})})
AUDIT_PAGE = obj({"entries": array(obj({
    "id": INTEGER, "at": TIME, "actor": STRING, "action": STRING, "target": nullable(STRING),
    "details": {"type": "object"}, "source": STRING})), "nextBefore": nullable(INTEGER)})
