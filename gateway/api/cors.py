"""Cross-origin use of the API (``CLOUDYBOT_CORS_ORIGINS``): a dashboard served from another
origin may call it from a browser.

Off by default, and then nothing here is installed: browsers keep every other origin out, as
they do for any server that sends no CORS headers. With origins configured, a preflight
(``OPTIONS`` with ``Access-Control-Request-Method``) from one of them is answered here, before
authentication (a browser sends no credentials with it), and every answer to such an origin,
errors and event streams included, carries ``Access-Control-Allow-Origin``. Credentials are
the bearer token in ``Authorization``; cookies are not allowed across origins (the dashboard's
session cookie is ``SameSite=Strict`` anyway).
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import web

from gateway.api.middleware import Handler

ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE"
ALLOWED_HEADERS = "Authorization, Content-Type, Accept, X-CSRF-Token, X-CloudyBot-Thread"
EXPOSED_HEADERS = "Retry-After"
PREFLIGHT_MAX_AGE = "600"  # seconds a browser may reuse a preflight's answer


def add_cors(app: web.Application, origins: Collection[str]) -> None:
    """Let pages from ``origins`` (``*``: any) call ``app``; nothing if there are none."""
    if not origins:
        return
    any_origin = "*" in origins

    def allowed(request: web.BaseRequest) -> str | None:
        origin = request.headers.get("Origin")
        if origin is None or not (any_origin or origin in origins):
            return None
        return "*" if any_origin else origin

    @web.middleware
    async def preflight(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Answer an allowed origin's preflight before anything else looks at the request."""
        if (request.method == "OPTIONS" and allowed(request) is not None
                and "Access-Control-Request-Method" in request.headers):
            return web.Response(status=204, headers={
                "Access-Control-Allow-Methods": ALLOWED_METHODS,
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE})
        return await handler(request)

    async def allow_origin(request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Every answer to an allowed origin says so (just before its headers go out)."""
        origin = allowed(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        if not any_origin:
            response.headers.add("Vary", "Origin")

    app.middlewares.insert(0, preflight)
    app.on_response_prepare.append(allow_origin)
