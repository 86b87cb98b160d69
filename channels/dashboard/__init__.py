"""The dashboard channel: the web app served at ``/``, a client of the gateway's HTTP API
(``/chat``, ``/api/*``, threads keyed ``{userId}--{threadId}``), which the core serves.

The web app is static files in ``web/`` (HTML, one stylesheet, ES modules; nothing to build):
it talks only to the documented API, like any other client. Every page is sent with a Content
Security Policy that allows scripts, styles and connections from the gateway itself only, so
even a rendering bug could not run text from a model or a user as code.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from gateway import Channel, PluginHost, hookimpl

WEB = Path(__file__).parent / "web"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


# The shipped files by their path under /static/, read once (they are small): a request names
# one of these or gets 404, so no path from a request ever reaches the file system, and no
# request header (Range, If-Modified-Since) changes what is sent.
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                 ".svg": "image/svg+xml", ".png": "image/png", ".txt": "text/plain"}
STATIC = {path.relative_to(WEB / "static").as_posix(): path
          for path in sorted((WEB / "static").rglob("*")) if path.is_file()}


def _file_response(path: Path) -> web.Response:
    return web.Response(body=_read(path), headers={
        **SECURITY_HEADERS, "Cache-Control": "no-cache",
        "Content-Type": CONTENT_TYPES.get(path.suffix, "application/octet-stream")
        + ("; charset=utf-8" if path.suffix in (".html", ".js", ".css", ".txt") else "")})


_CACHE: dict[Path, bytes] = {}


def _read(path: Path) -> bytes:
    data = _CACHE.get(path)
    if data is None:
        data = _CACHE[path] = path.read_bytes()
    return data


async def index(request: web.Request) -> web.Response:
    """The web app's page (always revalidated: it names the current scripts)."""
    return _file_response(WEB / "index.html")


async def to_index(request: web.Request) -> web.Response:
    """``/dashboard`` is the page at ``/``."""
    raise web.HTTPPermanentRedirect("/")


async def static_file(request: web.Request) -> web.Response:
    """One of the web app's files (scripts, the stylesheet, icons)."""
    path = STATIC.get(request.match_info["name"])
    if path is None:
        raise web.HTTPNotFound()
    return _file_response(path)


class DashboardChannel(Channel):
    """The web app at ``/``; its turns are the HTTP API's (``{userId}--{threadId}`` keys)."""

    name = "dashboard"
    prefixed_keys = False

    def routes(self) -> list[web.RouteDef]:
        """The web app's page and files."""
        return [
            web.get("/", index),
            web.get("/dashboard", to_index),
            web.get("/static/{name:.+}", static_file),
        ]


@hookimpl(trylast=True)
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the dashboard channel."""
    return [DashboardChannel()]
