"""``GET /openapi.json``: an OpenAPI 3.1 description of every route the server has.

The API's operations come from their declarations (:data:`gateway.api.operations.OPERATIONS`,
which also registers them); ``/healthz`` and this document are the core's own; any other route
of the application (a channel's webhook, the dashboard's pages, a plugin's) is described from
its handler's docstring with a ``default`` answer, so that no route is missing. The document is
built once per application, from its settings (a message's longest length, say).
"""

from __future__ import annotations

import inspect
from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.api import schemas as s
from gateway.api.keys import gateway_key
from gateway.api.operations import COMMON_ERRORS, OPERATIONS, Operation, Param
from gateway.config.settings import Settings

OPENAPI_VERSION = "3.1.0"
_document_key = web.AppKey("openapi_document", dict)  # filled at the first request
_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 204: "No content", 303: "See other",
            400: "Bad input", 401: "No valid token or session", 402: "Out of credits",
            403: "Refused: a cookie session's change without its CSRF token (csrf_failed), a "
                 "sign-in from another site's page (cross_site), a blocked account "
                 "(account_blocked), an /api/admin/ route for an account that is not an "
                 "admin (admin_only)",
            404: "No such thing for this caller", 408: "The body did not arrive in time",
            409: "Conflict: nothing to replace (replaceLast), or the turn was stopped before "
                 "the model wrote anything (nothing stored or charged)",
            413: "Too large", 415: "The body is not application/json",
            429: "Rate limited, or the credits are held by other requests in flight (see "
                 "Retry-After)", 502: "The LLM provider failed",
            503: "Stopping, or the database is unavailable",
            504: "The LLM provider did not answer in time"}
SECURITY: list[dict[str, list[str]]] = [{"bearer": []}, {"session": []}]


def add_openapi(app: web.Application) -> None:
    """Serve ``GET /openapi.json`` from ``app`` (before it starts)."""
    app[_document_key] = {}
    app.router.add_get("/openapi.json", get_openapi)


async def get_openapi(request: web.Request) -> web.Response:
    """This server's OpenAPI 3.1 description (no authentication)."""
    cached = request.app[_document_key]
    if not cached:
        cached.update(document(request.app))
    return web.json_response(cached)


def document(app: web.Application) -> dict[str, Any]:
    """The description of every route of ``app``."""
    settings: Settings = app[gateway_key].settings
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, settings)
    core = paths.setdefault("/healthz", {})
    core["get"] = _plain("healthz", "Liveness: no authentication, no store access.", s.HEALTH)
    paths.setdefault("/openapi.json", {})["get"] = _plain(
        "openapi", "This description.", {"type": "object"})
    paths.setdefault("/metrics", {})["get"] = {
        "operationId": "metrics", "tags": ["server"], "security": [{"bearer": []}, {}],
        "summary": "Prometheus metrics: open from loopback, elsewhere with "
                   "CLOUDYBOT_METRICS_TOKEN as a bearer token.",
        "responses": {"200": {"description": "OK", "content": {"text/plain": {
            "schema": s.STRING}}},
                      "401": {"description": _REASONS[401], "content": _json(s.ERROR)},
                      "403": {"description": "not from loopback, and no token configured",
                              "content": _json(s.ERROR)}}}
    for route in app.router.routes():
        method = route.method.lower()
        template = route.resource.canonical if route.resource is not None else ""
        if method in ("head", "*") or method in paths.get(template, {}):
            continue
        paths.setdefault(template, {})[method] = _other(route, template)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "CloudyBot gateway", "version": __version__,
                 "description": "Chat with an LLM agent over HTTP; see the README."},
        "paths": paths,
        "components": {"securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "an API token (cloudybot users add)"},
            "session": {"type": "apiKey", "in": "cookie", "name": "cloudybot_session",
                        "description": "a dashboard session (POST /auth/session)"}}},
    }


def _summary(handler: Any) -> tuple[str, str]:
    text = inspect.cleandoc(handler.__doc__ or "")
    return (text.split("\n\n")[0].replace("\n", " "), text)


def _parameter(param: Param) -> dict[str, Any]:
    described: dict[str, Any] = {"name": param.name, "in": param.where, "schema": param.schema,
                                 "required": param.required or param.where == "path"}
    if param.description:
        described["description"] = param.description
    return described


def _json(schema: s.Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _operation(op: Operation, settings: Settings) -> dict[str, Any]:
    summary, description = _summary(op.handler)
    error = s.OPENAI_ERROR if op.openai else s.ERROR
    success: dict[str, Any] = {"description": _REASONS[op.status]}
    if op.answer is not None:
        success["content"] = {op.media: {"schema": op.answer}}
        if op.streams:
            success["content"]["text/event-stream"] = {"schema": s.EVENT_STREAM}
    if op.links:
        success["links"] = {f"{target}.{name}": {"operationId": target,
                                                 "parameters": {name: expression}}
                            for target, name, expression in op.links}
    if op.status == 303:
        success["headers"] = {"Location": {"schema": s.STRING}}
    responses: dict[str, Any] = {str(op.status): success}
    statuses = (*COMMON_ERRORS, *op.errors) if op.authenticated else op.errors
    notes = dict(op.notes)
    for status in sorted(set(statuses) | set(notes)):
        reason = f"{_REASONS[status]}: {notes[status]}" if status in notes else _REASONS[status]
        responses[str(status)] = {"description": reason, "content": _json(error)}
        if status == 429:
            responses["429"]["headers"] = {"Retry-After": {"schema": s.INTEGER}}
    described: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": summary, "description": description, "tags": [op.tag],
        "responses": responses, "security": SECURITY if op.authenticated else []}
    if op.params:
        described["parameters"] = [_parameter(p) for p in op.params]
    if op.body is not None:
        body = op.body(settings) if callable(op.body) else op.body
        described["requestBody"] = {"required": True, "content": _json(body)}
    return described


def _plain(name: str, summary: str, answer: s.Schema) -> dict[str, Any]:
    return {"operationId": name, "summary": summary, "tags": ["server"], "security": [],
            "responses": {"200": {"description": "OK", "content": _json(answer)}}}


def _other(route: web.AbstractRoute, template: str) -> dict[str, Any]:
    """A route the API does not declare (a channel's or a plugin's)."""
    summary, description = _summary(route.handler)
    described: dict[str, Any] = {
        "operationId": f"{route.method.lower()}_{template.strip('/').replace('/', '_')}"
                       .replace("{", "").replace("}", "") or "index",
        "summary": summary or f"{route.method} {template}", "description": description,
        "tags": ["channels"], "security": [],
        "responses": {"default": {"description": "as the channel answers it"}}}
    names = [part[1:-1] for part in template.split("/") if part.startswith("{")]
    if names:
        described["parameters"] = [{"name": name, "in": "path", "required": True,
                                    "schema": s.STRING} for name in names]
    if route.method in ("POST", "PUT", "PATCH"):
        described["requestBody"] = {"content": {"*/*": {"schema": {}}}}
    return described
