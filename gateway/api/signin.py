"""Dashboard sign-in: an API token or a single-use login link becomes an ``HttpOnly``,
``SameSite=Strict`` session cookie; sign-out ends the session on the server."""

from __future__ import annotations

from aiohttp import web

from gateway.accounts.access import WEB_SESSION_SECONDS
from gateway.api.context import caller
from gateway.api.keys import gateway_key, web_session_key
from gateway.api.middleware import SESSION_COOKIE, read_json_object
from gateway.base.errors import BadRequest


def _with_cookie(request: web.Request, response: web.StreamResponse,
                 session_id: str) -> web.StreamResponse:
    response.set_cookie(SESSION_COOKIE, session_id, max_age=WEB_SESSION_SECONDS, path="/",
                        httponly=True, samesite="Strict", secure=request.secure)
    return response


async def post_sign_in(request: web.Request) -> web.StreamResponse:
    """``POST /auth/session`` ``{"token"}``: sign in with an API token (401 if it is not
    one); answers ``{"userId", "csrf"}`` and sets the session cookie."""
    body = await read_json_object(request)
    token = body.get("token")
    if not isinstance(token, str):
        raise BadRequest("token must be a string", code="invalid_token")
    accounts = request.app[gateway_key].accounts
    user = await accounts.authenticate(token.strip())
    session_id, csrf = await accounts.sign_in(user)
    return _with_cookie(request, web.json_response({"userId": user.user_id, "csrf": csrf}),
                        session_id)


async def get_login_link(request: web.Request) -> web.StreamResponse:
    """``GET /auth/login?code=``: a link from ``cloudybot users login-link`` signs its user in
    once and goes to the dashboard; a spent or expired one goes there signed out, saying so."""
    accounts = request.app[gateway_key].accounts
    user = await accounts.redeem_login_code(request.query.get("code", ""))
    if user is None:
        raise web.HTTPSeeOther("/#link-expired")
    session_id, _ = await accounts.sign_in(user)
    response = web.HTTPSeeOther("/")
    _with_cookie(request, response, session_id)
    raise response


async def get_session(request: web.Request) -> web.Response:
    """``GET /api/session``: who is signed in, and the CSRF token a cookie session's changes
    carry (null for a bearer token)."""
    _, user = caller(request)
    session = request.get(web_session_key)
    return web.json_response({"userId": user.user_id,
                              "csrf": session.csrf if session is not None else None})


async def delete_session(request: web.Request) -> web.Response:
    """``DELETE /api/session``: sign out; the session ends on the server and its cookie is
    cleared (with a bearer token there is nothing to end)."""
    if request.get(web_session_key) is not None:
        await request.app[gateway_key].accounts.sign_out(request.cookies[SESSION_COOKIE])
    response = web.Response(status=204)
    response.del_cookie(SESSION_COOKIE, path="/")
    return response
