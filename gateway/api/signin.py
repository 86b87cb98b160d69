"""Dashboard sign-in: an API token or a single-use login link becomes an ``HttpOnly``,
``SameSite=Strict`` session cookie; sign-out ends the session on the server.

Every route that sets or clears the cookie answers only the gateway's own pages (login CSRF:
another site must not sign a browser into an account of its choosing). Sign-in takes a JSON
body from them, and a login link only opens the dashboard, where the person signs in with it.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from gateway.accounts.access import WEB_SESSION_SECONDS
from gateway.api.context import caller
from gateway.api.keys import gateway_key, web_session_key
from gateway.api.middleware import SESSION_COOKIE, read_sign_in, require_own_page
from gateway.base.errors import AccountBlocked, BadRequest, Unauthorized
from gateway.store import User


async def _signed_in(request: web.Request, user: User) -> web.Response:
    """A new session for ``user``: ``{"userId", "csrf"}`` and its cookie (403
    ``account_blocked`` for a blocked account)."""
    if user.blocked:
        raise AccountBlocked()
    session_id, csrf = await request.app[gateway_key].accounts.sign_in(user)
    response = web.json_response({"userId": user.user_id, "csrf": csrf,
                                  **_abilities(request, user)})
    response.set_cookie(SESSION_COOKIE, session_id, max_age=WEB_SESSION_SECONDS, path="/",
                        httponly=True, samesite="Strict", secure=request.secure)
    return response


def _string(body: dict[str, object], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", code=f"invalid_{name}")
    return value.strip()


async def post_sign_in(request: web.Request) -> web.StreamResponse:
    """``POST /auth/session`` ``{"token"}`` (JSON, from the gateway's own page): sign in with
    an API token (401 if it is not one); answers ``{"userId", "csrf"}`` and sets the session
    cookie."""
    token = _string(await read_sign_in(request), "token")
    return await _signed_in(request, await request.app[gateway_key].accounts.authenticate(token))


async def get_login_link(request: web.Request) -> web.StreamResponse:
    """``GET /auth/login?code=``: a link from ``cloudybot users login-link`` opens the
    dashboard, which offers to sign in with it (``/#login=CODE``); the link itself signs no one
    in, since any site can make a browser follow it."""
    raise web.HTTPSeeOther("/#login=" + quote(request.query.get("code", ""), safe=""))


async def post_login_link(request: web.Request) -> web.StreamResponse:
    """``POST /auth/login`` ``{"code"}`` (JSON, from the gateway's own page): sign in with a
    login link's code, once; answers as ``POST /auth/session`` (401 ``link_expired`` for a
    code spent, expired or never issued)."""
    code = _string(await read_sign_in(request), "code")
    user = await request.app[gateway_key].accounts.redeem_login_code(code)
    if user is None:
        raise Unauthorized("that sign-in link was used already or has expired",
                           code="link_expired")
    return await _signed_in(request, user)


async def get_session(request: web.Request) -> web.Response:
    """``GET /api/session``: who is signed in, the CSRF token a cookie session's changes
    carry (null for a bearer token), and whether ``/chat`` takes pictures (``vision``)."""
    _, user = caller(request)
    session = request.get(web_session_key)
    return web.json_response({"userId": user.user_id,
                              "csrf": session.csrf if session is not None else None,
                              **_abilities(request, user)})


def _abilities(request: web.Request, user: User) -> dict[str, object]:
    """What a client may offer: pictures for the model (``vision``), up to ``maxImageBytes``
    each, and the admin pages to an admin (``admin``: ``/api/admin/*`` answers it)."""
    settings = request.app[gateway_key].settings
    return {"vision": settings.llm_vision, "maxImageBytes": settings.llm_max_image_bytes,
            "admin": user.admin}


async def delete_session(request: web.Request) -> web.Response:
    """``DELETE /api/session``: sign out; a cookie session (from the gateway's own page, with
    its CSRF token) ends on the server and its cookie is cleared; with a bearer token there is
    nothing to end."""
    response = web.Response(status=204)
    if request.get(web_session_key) is not None:
        require_own_page(request)
        await request.app[gateway_key].accounts.sign_out(request.cookies[SESSION_COOKIE])
        response.del_cookie(SESSION_COOKIE, path="/")
    return response
