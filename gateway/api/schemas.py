"""JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of what the HTTP API reads and answers.

The bounds come from the constants the handlers check against, so the description and the
checks cannot say two different things; ``GET /openapi.json`` assembles them
(:mod:`gateway.api.openapi`).
"""

from __future__ import annotations

from typing import Any

from gateway.base import validation

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "description": "ISO-8601 UTC, e.g. 2026-12-03T10:00:00.000000Z"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these properties (``required`` always present)."""
    return {"type": "object", "properties": {**required, **(optional or {})},
            "required": list(required)}


def array(items: Schema) -> Schema:
    """A list of ``items``."""
    return {"type": "array", "items": items}


def pattern(regex: str, max_length: int) -> Schema:
    """A string matching ``regex`` whole."""
    return {"type": "string", "pattern": f"^(?:{regex})$", "maxLength": max_length}


THREAD_ID = {**pattern(validation.THREAD_ID.pattern, 128), "not": {"enum": [".", ".."]},
             "description": "chosen by the client; per user"}
MEMORY_KEY = pattern(validation.MEMORY_KEY.pattern, 64)
NAME = pattern(validation.NAME.pattern, 64)

ERROR = obj({"error": obj({"code": STRING, "message": STRING})})
OPENAI_ERROR = obj({"error": obj({"message": STRING, "type": STRING},
                                 {"code": nullable(STRING), "param": nullable(STRING)})})
USAGE = obj({"promptTokens": INTEGER, "completionTokens": INTEGER, "credits": INTEGER})
CHAT_ANSWER = obj({"threadId": STRING, "reply": STRING, "usage": USAGE, "summarized": BOOLEAN,
                   "sessionRotated": BOOLEAN}, {"command": STRING})
MEMORY = obj({"threadId": STRING, "memory": {"type": "object", "additionalProperties": STRING}})
THREAD_SUMMARY = obj({"threadId": STRING, "channel": STRING, "sessionKey": STRING,
                      "createdAt": TIME, "updatedAt": TIME})
THREADS = obj({"threads": array(THREAD_SUMMARY), "nextBefore": nullable(STRING)})
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
SIGNED_IN = obj({"userId": STRING, "csrf": nullable(STRING)})
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
MODELS = obj({"object": {"const": "list"}, "data": array(obj({
    "id": STRING, "object": {"const": "model"}, "created": INTEGER, "owned_by": STRING}))})
COMPLETION_USAGE = obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER,
                        "total_tokens": INTEGER})
COMPLETION = obj({"id": STRING, "object": {"const": "chat.completion"}, "created": INTEGER,
                  "model": STRING, "choices": array(obj({
                      "index": INTEGER, "finish_reason": STRING,
                      "message": obj({"role": {"const": "assistant"}, "content": STRING})})),
                  "usage": COMPLETION_USAGE})
HEALTH = obj({"status": {"const": "ok"}})
# One Server-Sent Event: /chat's are delta, reset, done and error; /v1's are unnamed chunks.
EVENT_STREAM = {**obj({}, {"event": STRING, "data": STRING, "id": STRING, "retry": INTEGER}),
                "description": "each Server-Sent Event"}
BINARY: Schema = {"type": "string", "format": "binary"}
