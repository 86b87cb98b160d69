"""Every operation of the HTTP API, declared once: its route, handler, parameters, body and
answers. :func:`gateway.api.api_routes` registers the routes from this list and ``GET
/openapi.json`` describes them from it (:mod:`gateway.api.openapi`), so a route cannot exist
undescribed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.accounts import admin as administration
from gateway.api import (
    account,
    admin,
    chat,
    inspector,
    jobs,
    openai_compat,
    pictures,
    pinned,
    signin,
    stops,
    threads,
    webhooks,
)
from gateway.api import schemas as s
from gateway.base import search_text, validation
from gateway.config.settings import Settings
from gateway.jobs import book
from gateway.net import destinations

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BodySchema = s.Schema | Callable[[Settings], s.Schema]

# What any authenticated call may answer besides its own statuses.
COMMON_ERRORS = (400, 401, 403, 408, 413, 429, 503)
TURN_ERRORS = (402, 404, 502, 504)  # a turn: spent, unknown thread or specialist, the provider
# A sign-in: bad body, bad token or code, another site's page, not JSON (and slow, too large).
SIGN_IN_ERRORS = (400, 401, 403, 408, 413, 415)
CONTEXT_TOO_LARGE = (413, "message_too_long; or context_too_large: the system prompt and the "
                          "message alone need more than MAX_CONTEXT tokens")
SECRET_REFUSED = (400, "contains_secret: a field holds one of the caller's saved passwords")


@dataclass(frozen=True)
class Param:
    """A query, path or header parameter."""

    name: str
    where: str  # query, path or header
    schema: s.Schema
    required: bool = False
    description: str = ""
    # A path parameter whose pattern the route itself matches, so that a fixed path beside it
    # (/api/jobs/events beside /api/jobs/{job_id}) is not taken for a value of it
    routed: bool = False


@dataclass(frozen=True)
class Operation:
    """One method on one path."""

    method: str
    path: str  # aiohttp's template: /api/threads/{thread_id}
    handler: Handler
    tag: str
    answer: s.Schema | None  # None: no body (204, 303)
    status: int = 200
    params: tuple[Param, ...] = ()
    body: BodySchema | None = None
    errors: tuple[int, ...] = ()
    authenticated: bool = True
    streams: bool = False  # also answers text/event-stream when asked
    openai: bool = False  # errors worded as the OpenAI API words them
    media: str = "application/json"  # of the success answer
    # OpenAPI links from the success answer: (operationId, its parameter, the value's runtime
    # expression), so a client (or a fuzzer) knows where the ids it got lead
    links: tuple[tuple[str, str, str], ...] = ()
    # What an error status means here beyond its usual sense: (status, its codes and causes),
    # the refusals that depend on stored state or on DNS, which no schema can state
    notes: tuple[tuple[int, str], ...] = ()

    @property
    def route_path(self) -> str:
        """The path as aiohttp routes it: routed parameters carry their pattern."""
        path = self.path
        for param in self.params:
            if param.routed:
                regex = param.schema["pattern"].removeprefix("^").removesuffix("$")
                path = path.replace(f"{{{param.name}}}", f"{{{param.name}:{regex}}}")
        return path

    @property
    def operation_id(self) -> str:
        """The operation's name in the description."""
        return f"{self.method.lower()}_{self.handler.__name__}"


def _limit(default: int, high: int) -> Param:
    return Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": high,
                                    "default": default})


THREAD_IN_QUERY = Param("threadId", "query", s.THREAD_ID, required=True)
THREAD_IN_PATH = Param("thread_id", "path", s.THREAD_ID, required=True)
NAME_IN_PATH = Param("name", "path", s.NAME, required=True)
WEBHOOK_IN_PATH = Param("webhook_id", "path", s.pattern(webhooks.WEBHOOK_ID.pattern, 27),
                        required=True)
JOB_IN_PATH = Param("job_id", "path", s.pattern(book.JOB_ID.pattern, 20), required=True,
                    routed=True)
BEFORE_ID = Param("before", "query", {"type": "integer", "minimum": 1, "maximum": 2**62},
                  description="the nextBefore of the previous page")


USER_IN_PATH = Param("user_id", "path", s.USER_ID, required=True)
ADMIN_ERRORS = (404,)  # the account named is not there
USAGE_RULES = (400, "invalid_range: from is not before to, or the range is longer than 366 "
                    "days (31 by hour); invalid_from, invalid_to: no such day or time, or a "
                    "year before 2000 or after 9000; invalid_bucket: groupBy=user with "
                    "bucket=hour (per-account figures are kept per day)")


def _flag(name: str, what: str) -> Param:
    return Param(name, "query", {"enum": ["true", "false"]}, description=what)


def _chat_body(settings: Settings) -> s.Schema:
    picture = {"type": "string", "pattern": "^data:image/(png|jpeg|gif|webp);base64,",
               "description": f"a base64 data: URL of at most {settings.llm_max_image_bytes} "
                              "bytes of picture (never stored)"}
    message = s.text(settings.max_message_chars)
    if settings.llm_vision:  # a message, or pictures and perhaps a (blank) message
        message = {**message, "minLength": 0, "pattern": r"^[^\x00]*$",
                   "description": "required, and not blank, unless images are sent"}
    required = {"threadId": s.THREAD_ID} | ({} if settings.llm_vision else {"message": message})
    schema = s.body(required,
                     {"message": message,
                      "specialist": s.nullable(s.NAME),
                      "images": {"type": "array", "items": picture,
                                 "maxItems": pictures.MAX_IMAGES if settings.llm_vision else 0,
                                 "description": "pictures for a vision model "
                                                "(CLOUDYBOT_LLM_VISION; 400 without it)"},
                      "replaceLast": {**s.BOOLEAN, "default": False,
                                      "description": "replace the thread's last exchange "
                                                     "(regenerate, or edit and resend): 409 "
                                                     "nothing_to_replace without one"}})
    if settings.llm_vision:
        schema["anyOf"] = [{"required": ["message"], "properties": {"message": s.text(
            settings.max_message_chars)}}, {"required": ["images"], "properties": {
                "images": {"minItems": 1}}}]
    return {**schema, "examples": [{"threadId": "t1", "message": "hello"}]}


# One choice per request: a turn is stored, billed and remembered once (n > 1 is a 400).
ONE_CHOICE: s.Schema = {"type": "integer", "minimum": 1, "maximum": 1, "default": 1,
                        "description": "only 1: the gateway answers one choice (n > 1 is 400 "
                                       "unsupported_value)"}


def _completion_body(settings: Settings) -> s.Schema:
    content = s.nullable({"anyOf": [s.STRING, s.array(s.body({}))]})
    schema = s.body({"messages": {"type": "array", "minItems": 1, "items": s.body(
        {"role": s.STRING}, {"content": content}), "description": openai_compat.TURN_MESSAGE}},
        {"model": s.nullable(s.STRING), "stream": s.nullable(s.BOOLEAN),
         "n": s.nullable(ONE_CHOICE),
         "metadata": s.nullable(s.body({}, {"thread_id": s.THREAD_ID})),
         "stream_options": s.nullable(s.body({}, {"include_usage": s.nullable(s.BOOLEAN)}))})
    return {**schema, "examples": [{"model": settings.llm_model, "metadata": {"thread_id": "t1"},
                                    "messages": [{"role": "user", "content": "hello"}]}]}


def _to_thread(expression: str) -> tuple[tuple[str, str, str], ...]:
    """Links to the operations on the thread whose id ``expression`` finds."""
    return tuple((target, "thread_id", expression) for target in (
        "get_get_thread", "get_get_context", "get_get_thread_session", "patch_rename_thread",
        "post_clear_thread", "delete_delete_thread"))


OPERATIONS: tuple[Operation, ...] = (
    Operation("POST", "/auth/session", signin.post_sign_in, "dashboard", s.SIGNED_IN,
              body=s.body({"token": s.STRING}), errors=SIGN_IN_ERRORS, authenticated=False),
    Operation("GET", "/auth/login", signin.get_login_link, "dashboard", None, status=303,
              params=(Param("code", "query", s.STRING),), errors=(), authenticated=False),
    Operation("POST", "/auth/login", signin.post_login_link, "dashboard", s.SIGNED_IN,
              body=s.body({"code": s.STRING}), errors=SIGN_IN_ERRORS, authenticated=False),
    Operation("GET", "/api/session", signin.get_session, "dashboard", s.SIGNED_IN),
    Operation("DELETE", "/api/session", signin.delete_session, "dashboard", None, status=204),
    Operation("POST", "/chat", chat.post_chat, "chat", s.CHAT_ANSWER, body=_chat_body,
              errors=(*TURN_ERRORS, 409), streams=True, notes=(CONTEXT_TOO_LARGE,),
              links=_to_thread("$response.body#/threadId")),
    Operation("GET", "/api/user/memory", pinned.get_memory, "memory", s.MEMORY,
              params=(THREAD_IN_QUERY,), errors=(404,)),
    Operation("PUT", "/api/user/memory", pinned.put_memory, "memory", s.MEMORY,
              params=(THREAD_IN_QUERY,), errors=(404,), notes=((400, (
                  "too_many_keys: the thread holds CLOUDYBOT_MAX_PINNED_KEYS already; ")
                  + SECRET_REFUSED[1]),),
              body=s.body({"key": s.MEMORY_KEY, "value": {
                  "type": "string", "maxLength": validation.MAX_MEMORY_VALUE_CHARS}})),
    Operation("DELETE", "/api/user/memory", pinned.delete_memory, "memory", s.MEMORY,
              params=(THREAD_IN_QUERY, Param("key", "query", s.MEMORY_KEY)), errors=(404,)),
    Operation("GET", "/api/user/credits", account.get_credits, "account", s.CREDITS),
    Operation("GET", "/api/user/export", account.get_export, "account", s.BINARY,
              media="application/zip"),
    Operation("GET", "/api/user/usage", account.get_usage, "account", s.USAGE_PAGE,
              params=(_limit(account.DEFAULT_USAGE_PAGE, account.MAX_USAGE_PAGE), BEFORE_ID)),
    Operation("GET", "/api/user/usage/daily", account.get_daily_usage, "account", s.DAILY,
              params=(Param("days", "query", {"type": "integer", "minimum": 1,
                                              "maximum": account.MAX_DAYS}),)),
    Operation("GET", "/api/user/browser-credentials", account.list_credentials, "account",
              s.CREDENTIALS),
    Operation("PUT", "/api/user/browser-credentials", account.put_credential, "account",
              s.CREDENTIALS, body=s.body({
                  "site": {**s.pattern(rf"\s*(?:{validation.SITE.pattern})\s*",
                                       account.MAX_SITE_CHARS),
                           "description": "a host name or [IPv6] address, :port (1-65535) when "
                                          "not the default"},
                  "username": s.text(account.MAX_SECRET_CHARS),
                  "password": {**s.text(account.MAX_SECRET_CHARS, account.MIN_PASSWORD_CHARS),
                               "allOf": [{"not": {"enum": account.REFUSED_PASSWORDS}}]}})),
    Operation("DELETE", "/api/user/browser-credentials", account.delete_credential, "account",
              s.CREDENTIALS,
              params=(Param("site", "query", s.text(account.MAX_SITE_CHARS), required=True),)),
    Operation("GET", "/api/threads", threads.list_threads, "threads", s.THREADS,
              params=(_limit(threads.DEFAULT_THREADS, threads.MAX_PAGE),
                      Param("before", "query",
                            s.pattern(threads.THREAD_CURSOR_PATTERN, threads.MAX_CURSOR_CHARS),
                            description="the nextBefore of the previous page"),
                      Param("q", "query", {**s.text(search_text.MAX_QUERY_CHARS), "description":
                            "search: only threads whose title or one of whose messages holds "
                            "a word starting with each of its words (letters and digits, any "
                            f"case; the first {search_text.MAX_TERMS} count, and the answer's "
                            "terms lists them)"})),
              links=_to_thread("$response.body#/threads/0/threadId")),
    Operation("PATCH", "/api/threads/{thread_id}", threads.rename_thread, "threads",
              s.THREAD_SUMMARY, params=(THREAD_IN_PATH,), body=s.RENAME, errors=(404,)),
    Operation("GET", "/api/threads/{thread_id}", threads.get_thread, "threads", s.THREAD,
              params=(THREAD_IN_PATH, _limit(threads.DEFAULT_PAGE, threads.MAX_PAGE),
                      BEFORE_ID), errors=(404,)),
    Operation("GET", "/api/threads/{thread_id}/context", inspector.get_context, "threads",
              s.CONTEXT, params=(THREAD_IN_PATH, Param("specialist", "query", s.NAME)),
              errors=(404,)),
    Operation("GET", "/api/threads/{thread_id}/session", threads.get_thread_session, "threads",
              s.SESSION_STATUS, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/threads/{thread_id}/clear", threads.clear_thread, "threads",
              s.CLEARED, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/threads/{thread_id}/stop", stops.stop_turn, "threads", s.STOPPED,
              params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("DELETE", "/api/threads/{thread_id}", threads.delete_thread, "threads", None,
              status=204, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("GET", "/api/specialists", account.list_specialists, "specialists",
              s.SPECIALISTS),
    Operation("GET", "/api/specialists/{name}", account.get_specialist, "specialists",
              s.SPECIALIST, params=(NAME_IN_PATH,), errors=(404,)),
    Operation("PUT", "/api/specialists/{name}", account.put_specialist, "specialists",
              s.SPECIALIST, params=(NAME_IN_PATH,), notes=(SECRET_REFUSED,),
              body=s.body({"instructions": s.text(validation.MAX_INSTRUCTIONS_CHARS)})),
    Operation("DELETE", "/api/specialists/{name}", account.delete_specialist, "specialists",
              None, status=204, params=(NAME_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/webhooks", webhooks.post_webhook, "webhooks", s.NEW_WEBHOOK,
              status=201, notes=((400, "destination_refused: the URL's host does not resolve, "
                                       "or to an address that is not public; "
                                       "too_many_webhooks: the account has "
                                       f"{webhooks.MAX_WEBHOOKS} already"),),
              links=tuple((target, "webhook_id", "$response.body#/id") for target in (
                  "get_list_deliveries", "post_post_test", "delete_delete_webhook")),
              body={**s.body({
                  "url": {"type": "string", "pattern": destinations.WEB_URL_PATTERN,
                          "maxLength": destinations.MAX_URL_CHARS},
                  "events": {"type": "array", "minItems": 1,
                             "items": {"enum": list(webhooks.SUBSCRIBABLE)}}}),
                  "examples": [{"url": "https://hooks.example.com/cloudybot",
                                "events": ["message.created"]}]}),
    Operation("GET", "/api/webhooks", webhooks.list_webhooks, "webhooks", s.WEBHOOKS),
    Operation("DELETE", "/api/webhooks/{webhook_id}", webhooks.delete_webhook, "webhooks",
              None, status=204, params=(WEBHOOK_IN_PATH,), errors=(404,)),
    Operation("GET", "/api/webhooks/{webhook_id}/deliveries", webhooks.list_deliveries,
              "webhooks", s.WEBHOOK_DELIVERIES,
              params=(WEBHOOK_IN_PATH, _limit(webhooks.DEFAULT_DELIVERIES,
                                              webhooks.MAX_DELIVERIES)), errors=(404,)),
    Operation("POST", "/api/webhooks/{webhook_id}/test", webhooks.post_test, "webhooks",
              s.WEBHOOK_TEST, status=202, params=(WEBHOOK_IN_PATH,), errors=(404,)),
    Operation("GET", "/api/jobs", jobs.list_jobs, "jobs", s.JOBS),
    Operation("POST", "/api/jobs", jobs.post_job, "jobs", s.JOB, status=201, errors=(404,),
              notes=((400, "invalid_schedule, time_past: when is not a time, interval or "
                           "cron line to come; interval_too_short: it repeats more often than "
                           "the plan allows; unknown_time_zone: timeZone is no IANA zone"),),
              links=tuple((target, "job_id", "$response.body#/id") for target in (
                  "post_pause_job", "post_resume_job", "delete_delete_job")),
              body={**s.body({"threadId": s.THREAD_ID, "kind": {"enum": ["at", "every", "cron"]},
                             "when": s.text(200), "text": s.text(4000)},
                            {"action": {"enum": ["message", "prompt"]},
                             "timeZone": s.text(64), "misfire": {"enum": ["run_once", "skip"]}}),
                    "examples": [{"threadId": "t1", "kind": "cron", "when": "0 9 * * 1-5",
                                  "timeZone": "Europe/Paris", "text": "Standup in 15 minutes"}]}),
    Operation("PUT", "/api/jobs/time-zone", jobs.put_time_zone, "jobs", s.TIME_ZONE,
              notes=((400, "unknown_time_zone: timeZone is no IANA zone"),),
              body={**s.body({"timeZone": s.text(64)}),
                    "examples": [{"timeZone": "Europe/Paris"}]}),
    Operation("DELETE", "/api/jobs/{job_id}", jobs.delete_job, "jobs", None, status=204,
              params=(JOB_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/jobs/{job_id}/pause", jobs.pause_job, "jobs", s.JOB,
              params=(JOB_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/jobs/{job_id}/resume", jobs.resume_job, "jobs", s.JOB,
              params=(JOB_IN_PATH,), errors=(404,)),
    Operation("GET", "/api/jobs/events", jobs.job_events, "jobs", s.EVENT_STREAM,
              media="text/event-stream"),
    Operation("GET", "/api/admin/users", admin.list_users, "admin", s.ADMIN_USERS,
              params=(_limit(admin.DEFAULT_USERS, admin.MAX_USERS),
                      Param("after", "query", s.USER_ID,
                            description="the nextAfter of the previous page"),
                      Param("q", "query", {**s.text(admin.MAX_SEARCH_CHARS), "description":
                            "only accounts whose id holds this (any case)"}),
                      Param("plan", "query", s.NAME),
                      _flag("blocked", "only blocked accounts (true) or the others"),
                      _flag("admin", "only admins (true) or the others"))),
    Operation("POST", "/api/admin/users/{user_id}/block", admin.block_user, "admin",
              s.ADMIN_USER, params=(USER_IN_PATH,), errors=(*ADMIN_ERRORS, 409),
              notes=((409, "cannot_block_self: the caller's own account"),)),
    Operation("POST", "/api/admin/users/{user_id}/unblock", admin.unblock_user, "admin",
              s.ADMIN_USER, params=(USER_IN_PATH,), errors=ADMIN_ERRORS),
    Operation("POST", "/api/admin/users/{user_id}/grants", admin.grant_credits, "admin",
              s.GRANTED, status=201, params=(USER_IN_PATH,), errors=ADMIN_ERRORS,
              body={**s.body({"credits": {"type": "integer", "minimum": 1,
                                          "maximum": administration.MAX_GRANT},
                              "reason": s.text(administration.MAX_REASON_CHARS)}),
                    "examples": [{"credits": 500, "reason": "refund for the outage"}]}),
    Operation("PUT", "/api/admin/users/{user_id}/budget", admin.set_budget, "admin",
              s.ADMIN_USER, params=(USER_IN_PATH,), errors=ADMIN_ERRORS,
              body={**s.body({"dailyCredits": s.nullable({
                  "type": "integer", "minimum": 0,
                  "maximum": administration.MAX_DAILY_CREDITS})}),
                  "examples": [{"dailyCredits": 200}, {"dailyCredits": None}]}),
    Operation("GET", "/api/admin/usage", admin.usage_report, "admin", s.USAGE_REPORT,
              notes=(USAGE_RULES,),
              params=(Param("from", "query", s.when(admin.WHEN.pattern),
                            description="the first bucket's start (default: 30 days, or 48 "
                                        "hours, before to)"),
                      Param("to", "query", s.when(admin.WHEN.pattern), description="the end, "
                            "exclusive (default: now, rounded up to a whole bucket)"),
                      Param("bucket", "query", {"enum": ["day", "hour"], "default": "day"}),
                      Param("groupBy", "query", {"enum": ["plan", "model", "channel", "tool",
                                                          "user"], "default": "model"}),
                      Param("top", "query", {"type": "integer", "minimum": 1,
                                             "maximum": admin.MAX_TOP,
                                             "default": admin.DEFAULT_TOP}))),
    Operation("GET", "/api/admin/health", admin.get_health, "admin", s.HEALTH_REPORT),
    Operation("GET", "/api/admin/audit", admin.get_audit, "admin", s.AUDIT_PAGE,
              notes=((400, "invalid_since: no such day or time, or a year before 2000 or "
                           "after 9000"),),
              params=(_limit(admin.DEFAULT_AUDIT, admin.MAX_AUDIT), BEFORE_ID,
                      Param("since", "query", s.when(admin.WHEN.pattern)),
                      Param("actor", "query", s.text(admin.MAX_SEARCH_CHARS)),
                      Param("action", "query", s.text(admin.MAX_SEARCH_CHARS)))),
    Operation("GET", "/v1/models", openai_compat.get_models, "openai", s.MODELS, openai=True),
    Operation("POST", "/v1/chat/completions", openai_compat.post_chat_completions, "openai",
              s.COMPLETION, body=_completion_body, errors=TURN_ERRORS, streams=True,
              openai=True, notes=(CONTEXT_TOO_LARGE, (400, (
                  f"missing_thread: neither {openai_compat.THREAD_HEADER} nor "
                  "metadata.thread_id names the thread; invalid_messages: no user message; "
                  f"invalid_message: not so, where {openai_compat.TURN_MESSAGE}"))),
              params=(Param(openai_compat.THREAD_HEADER, "header", s.THREAD_ID,
                            description="or metadata.thread_id"),)),
)


def routes() -> list[web.RouteDef]:
    """The aiohttp routes of :data:`OPERATIONS`."""
    return [web.get(op.route_path, op.handler) if op.method == "GET"  # and HEAD, as aiohttp
            else web.route(op.method, op.route_path, op.handler) for op in OPERATIONS]
