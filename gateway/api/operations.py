"""Every operation of the HTTP API, declared once: its route, handler, parameters, body and
answers. :func:`gateway.api.api_routes` registers the routes from this list and ``GET
/openapi.json`` describes them from it (:mod:`gateway.api.openapi`), so a route cannot exist
undescribed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.api import account, chat, inspector, openai_compat, pinned, signin, threads, webhooks
from gateway.api import schemas as s
from gateway.base import validation
from gateway.config.settings import Settings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BodySchema = s.Schema | Callable[[Settings], s.Schema]

# What any authenticated call may answer besides its own statuses.
COMMON_ERRORS = (400, 401, 403, 408, 413, 429, 503)
TURN_ERRORS = (402, 404, 502, 504)  # a turn: spent, unknown thread or specialist, the provider


@dataclass(frozen=True)
class Param:
    """A query, path or header parameter."""

    name: str
    where: str  # query, path or header
    schema: s.Schema
    required: bool = False
    description: str = ""


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

    @property
    def operation_id(self) -> str:
        """The operation's name in the description."""
        return f"{self.method.lower()}_{self.handler.__name__}"


def _limit(default: int, high: int) -> Param:
    return Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": high,
                                    "default": default})


def _text(max_length: int) -> s.Schema:
    return {"type": "string", "minLength": 1, "maxLength": max_length}


THREAD_IN_QUERY = Param("threadId", "query", s.THREAD_ID, required=True)
THREAD_IN_PATH = Param("thread_id", "path", s.THREAD_ID, required=True)
NAME_IN_PATH = Param("name", "path", s.NAME, required=True)
WEBHOOK_IN_PATH = Param("webhook_id", "path", {"type": "string"}, required=True)
BEFORE_ID = Param("before", "query", {"type": "integer", "minimum": 1, "maximum": 2**62},
                  description="the nextBefore of the previous page")


def _chat_body(settings: Settings) -> s.Schema:
    return {**s.obj({"threadId": s.THREAD_ID, "message": _text(settings.max_message_chars)},
                    {"specialist": s.NAME}),
            "examples": [{"threadId": "t1", "message": "hello"}]}


def _completion_body(settings: Settings) -> s.Schema:
    schema = s.obj({"messages": {"type": "array", "minItems": 1, "items": s.obj(
        {"role": s.STRING}, {"content": {"anyOf": [s.STRING, s.array({})]}})}},
        {"model": s.STRING, "stream": s.BOOLEAN, "metadata": s.obj({}, {"thread_id": s.STRING}),
         "stream_options": s.obj({}, {"include_usage": s.BOOLEAN})})
    return {**schema, "examples": [{"model": settings.llm_model, "metadata": {"thread_id": "t1"},
                                    "messages": [{"role": "user", "content": "hello"}]}]}


def _to_thread(expression: str) -> tuple[tuple[str, str, str], ...]:
    """Links to the operations on the thread whose id ``expression`` finds."""
    return tuple((target, "thread_id", expression) for target in (
        "get_get_thread", "get_get_context", "get_get_session", "post_clear_thread",
        "delete_delete_thread"))


OPERATIONS: tuple[Operation, ...] = (
    Operation("POST", "/auth/session", signin.post_sign_in, "dashboard", s.SIGNED_IN,
              body=s.obj({"token": s.STRING}), errors=(400, 401, 408, 413),
              authenticated=False),
    Operation("GET", "/auth/login", signin.get_login_link, "dashboard", None, status=303,
              params=(Param("code", "query", s.STRING),), errors=(), authenticated=False),
    Operation("GET", "/api/session", signin.get_session, "dashboard", s.SIGNED_IN),
    Operation("DELETE", "/api/session", signin.delete_session, "dashboard", None, status=204),
    Operation("POST", "/chat", chat.post_chat, "chat", s.CHAT_ANSWER, body=_chat_body,
              errors=TURN_ERRORS, streams=True,
              links=_to_thread("$response.body#/threadId")),
    Operation("GET", "/api/user/memory", pinned.get_memory, "memory", s.MEMORY,
              params=(THREAD_IN_QUERY,), errors=(404,)),
    Operation("PUT", "/api/user/memory", pinned.put_memory, "memory", s.MEMORY,
              params=(THREAD_IN_QUERY,), errors=(404,),
              body=s.obj({"key": s.MEMORY_KEY, "value": {
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
              s.CREDENTIALS, body=s.obj({
                  "site": _text(account.MAX_SITE_CHARS),
                  "username": _text(account.MAX_SECRET_CHARS),
                  "password": {"type": "string", "minLength": account.MIN_PASSWORD_CHARS,
                               "maxLength": account.MAX_SECRET_CHARS}})),
    Operation("DELETE", "/api/user/browser-credentials", account.delete_credential, "account",
              s.CREDENTIALS,
              params=(Param("site", "query", _text(account.MAX_SITE_CHARS), required=True),)),
    Operation("GET", "/api/threads", threads.list_threads, "threads", s.THREADS,
              params=(_limit(threads.DEFAULT_THREADS, threads.MAX_PAGE),
                      Param("before", "query", s.STRING,
                            description="the nextBefore of the previous page")),
              links=_to_thread("$response.body#/threads/0/threadId")),
    Operation("GET", "/api/threads/{thread_id}", threads.get_thread, "threads", s.THREAD,
              params=(THREAD_IN_PATH, _limit(threads.DEFAULT_PAGE, threads.MAX_PAGE),
                      BEFORE_ID), errors=(404,)),
    Operation("GET", "/api/threads/{thread_id}/context", inspector.get_context, "threads",
              s.CONTEXT, params=(THREAD_IN_PATH, Param("specialist", "query", s.NAME)),
              errors=(404,)),
    Operation("GET", "/api/threads/{thread_id}/session", threads.get_session, "threads",
              s.SESSION_STATUS, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/threads/{thread_id}/clear", threads.clear_thread, "threads",
              s.CLEARED, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("DELETE", "/api/threads/{thread_id}", threads.delete_thread, "threads", None,
              status=204, params=(THREAD_IN_PATH,), errors=(404,)),
    Operation("GET", "/api/specialists", account.list_specialists, "specialists",
              s.SPECIALISTS),
    Operation("GET", "/api/specialists/{name}", account.get_specialist, "specialists",
              s.SPECIALIST, params=(NAME_IN_PATH,), errors=(404,)),
    Operation("PUT", "/api/specialists/{name}", account.put_specialist, "specialists",
              s.SPECIALIST, params=(NAME_IN_PATH,),
              body=s.obj({"instructions": _text(validation.MAX_INSTRUCTIONS_CHARS)})),
    Operation("DELETE", "/api/specialists/{name}", account.delete_specialist, "specialists",
              None, status=204, params=(NAME_IN_PATH,), errors=(404,)),
    Operation("POST", "/api/webhooks", webhooks.post_webhook, "webhooks", s.NEW_WEBHOOK,
              status=201, links=tuple((target, "webhook_id", "$response.body#/id") for target in (
                  "get_list_deliveries", "post_post_test", "delete_delete_webhook")),
              body={**s.obj({
                  "url": {"type": "string", "format": "uri", "maxLength": 2048},
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
    Operation("GET", "/v1/models", openai_compat.get_models, "openai", s.MODELS, openai=True),
    Operation("POST", "/v1/chat/completions", openai_compat.post_chat_completions, "openai",
              s.COMPLETION, body=_completion_body, errors=TURN_ERRORS, streams=True,
              openai=True, params=(Param(openai_compat.THREAD_HEADER, "header", s.THREAD_ID,
                                         description="or metadata.thread_id"),)),
)


def routes() -> list[web.RouteDef]:
    """The aiohttp routes of :data:`OPERATIONS`."""
    return [web.get(op.path, op.handler) if op.method == "GET"  # and HEAD, as aiohttp does
            else web.route(op.method, op.path, op.handler) for op in OPERATIONS]
