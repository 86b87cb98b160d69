"""A small website on loopback for the browser tool's tests: a login form that sets a session
cookie, an account page behind it (which carelessly echoes the password), and a table.

``logins`` records every (username, password) the login form received, so a test can assert
what the page saw.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from html import escape

from aiohttp import web

from gateway.testing.loopback import LoopbackServer

USERNAME = "alice@example.com"
PASSWORD = "Correct-Horse-Battery-9"
TABLE_ROWS = (("Paris", "2,161,000"), ("Lyon", "522,000"), ("Marseille", "873,000"))


def _page(title: str, body: str) -> web.Response:
    return web.Response(text=f"<!doctype html><html><head><title>{escape(title)}</title></head>"
                             f"<body>{body}</body></html>", content_type="text/html")


@dataclass
class Website:
    """The site's state; :meth:`start` serves it and returns its base URL."""

    logins: list[tuple[str, str]] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    server: LoopbackServer = field(default_factory=LoopbackServer)
    port: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def site(self) -> str:
        """The site as a saved login names it."""
        return f"127.0.0.1:{self.port}"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/login", self.login_form)
        app.router.add_post("/login", self.login)
        app.router.add_get("/account", self.account)
        app.router.add_get("/table", self.table)
        app.router.add_get("/pixel", self.pixel)
        self.port = await self.server.serve(app)
        return self.base

    async def close(self) -> None:
        await self.server.close()

    async def login_form(self, request: web.Request) -> web.Response:
        self.hits.append("/login")
        return _page("Sign in", (
            "<h1>Sign in to Example Bank</h1>"
            "<form method='post' action='/login'>"
            "<label>Email <input type='email' name='user'></label>"
            "<label>Password <input type='password' name='pass'></label>"
            "<button type='submit'>Sign in</button></form>"))

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        user, password = str(form.get("user", "")), str(form.get("pass", ""))
        self.logins.append((user, password))
        if (user, password) != (USERNAME, PASSWORD):
            return _page("Wrong password", "<p>Wrong email or password.</p>")
        token = secrets.token_hex(16)
        self.sessions.add(token)
        response = web.HTTPSeeOther("/account")
        response.set_cookie("session", token, httponly=True)
        raise response

    async def account(self, request: web.Request) -> web.Response:
        self.hits.append("/account")
        if request.cookies.get("session") not in self.sessions:
            raise web.HTTPSeeOther("/login")
        # A careless site: the title and the text echo the password.
        return _page(f"Account ({PASSWORD})",
                     f"<h1>Welcome back, Alice</h1><p>Balance: 42.00 EUR</p>"
                     f"<p>Your password is {PASSWORD}</p>")

    async def table(self, request: web.Request) -> web.Response:
        self.hits.append("/table")
        rows = "".join(f"<tr><td>{city}</td><td>{people}</td></tr>"
                       for city, people in TABLE_ROWS)
        return _page("Cities", "<table><tr><th>City</th><th>Population</th></tr>"
                               f"{rows}</table><a href='/login' target='_blank'>Sign in</a>"
                               "<button onclick='window.close()'>Close</button>")

    async def pixel(self, request: web.Request) -> web.Response:
        self.hits.append("/pixel")
        return web.Response(body=b"GIF89a", content_type="image/gif")
