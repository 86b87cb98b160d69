"""Dashboard sign-in (SPEC §14): an API token or a single-use login link becomes an ``HttpOnly``,
``SameSite=Strict`` session cookie; with only the cookie, requests that change state need the
CSRF token; sign-out ends the session on the server; the Bearer API is unchanged."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from gateway.accounts.access import LOGIN_LINK_SECONDS
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error
from tests.test_cli import acloudybot, last_line

StartGateway = Callable[..., Awaitable[Harness]]
COOKIE = "cloudybot_session"


async def sign_in(harness: Harness, auth: dict[str, str]) -> str:
    """Sign in with the harness user's token; return the CSRF token (the cookie is in the
    client's jar)."""
    token = auth["Authorization"].removeprefix("Bearer ")
    response = await harness.client.post("/auth/session", json={"token": token})
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["userId"] == "alice"
    return str(body["csrf"])


def session_cookie(harness: Harness) -> str:
    [value] = [c.value for c in harness.client.session.cookie_jar if c.key == COOKIE]
    return value


async def test_a_token_signs_in_with_an_httponly_strict_cookie(harness: Harness) -> None:
    auth = await harness.user()
    token = auth["Authorization"].removeprefix("Bearer ")
    response = await harness.client.post("/auth/session", json={"token": token})
    assert response.status == 200
    header = response.headers["Set-Cookie"]
    assert header.startswith(f"{COOKIE}=")
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/" in header
    assert token not in header  # the cookie is a session of its own, not the API token
    # the cookie alone now reads the API
    session = await (await harness.client.get("/api/session")).json()
    assert session["userId"] == "alice" and session["csrf"]
    assert (await harness.client.get("/api/threads")).status == 200
    assert (await harness.client.get("/api/user/credits")).status == 200


async def test_with_only_the_cookie_changes_need_the_csrf_token(harness: Harness) -> None:
    auth = await harness.user()
    csrf = await sign_in(harness, auth)
    memory = {"key": "name", "value": "Ada"}
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        json=memory)
    await assert_json_error(response, 403, "csrf_failed")
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        json=memory, headers={"X-CSRF-Token": "wrong"})
    await assert_json_error(response, 403, "csrf_failed")
    response = await harness.client.post("/chat", json={"threadId": "t1", "message": "hi"})
    await assert_json_error(response, 403, "csrf_failed")
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        json=memory, headers={"X-CSRF-Token": csrf})
    assert response.status == 200
    assert (await response.json())["memory"] == {"name": "Ada"}


async def test_the_bearer_api_works_as_before_without_csrf(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.put("/api/user/memory", params={"threadId": "t1"},
                                        json={"key": "k", "value": "v"}, headers=auth)
    assert response.status == 200
    session = await (await harness.client.get("/api/session", headers=auth)).json()
    assert session == {"userId": "alice", "csrf": None, "vision": False,
                       "maxImageBytes": 5_000_000, "admin": False}


async def test_sign_out_ends_the_session_on_the_server(harness: Harness) -> None:
    auth = await harness.user()
    csrf = await sign_in(harness, auth)
    stolen = session_cookie(harness)
    response = await harness.client.delete("/api/session", headers={"X-CSRF-Token": csrf})
    assert response.status == 204
    assert f"{COOKIE}=\"\"" in response.headers["Set-Cookie"]
    # the old cookie, replayed, no longer works: the session is gone, not just forgotten
    response = await harness.client.get("/api/threads", headers={"Cookie": f"{COOKIE}={stolen}"})
    await assert_json_error(response, 401, "session_expired")


async def test_bad_sign_ins_are_4xx(harness: Harness) -> None:
    await harness.user()
    response = await harness.client.post("/auth/session", json={"token": "cb_not-a-token"})
    await assert_json_error(response, 401, "unauthorized")
    response = await harness.client.post("/auth/session", json={"token": 42})
    await assert_json_error(response, 400, "invalid_token")
    response = await harness.client.post("/auth/session", data=b"{not json",
                                         headers={"Content-Type": "application/json"})
    await assert_json_error(response, 400, "invalid_json")
    assert not [c for c in harness.client.session.cookie_jar if c.key == COOKIE]
    response = await harness.client.get("/api/threads", headers={"Cookie": f"{COOKIE}=made-up"})
    await assert_json_error(response, 401, "session_expired")


async def test_a_session_of_one_user_never_reads_another_users_thread(
        harness: Harness) -> None:
    bob = await harness.user("bob")
    assert (await harness.chat(bob, "bob's secret", thread="t1")).status == 200
    await sign_in(harness, await harness.user())
    thread = await (await harness.client.get("/api/threads")).json()
    assert thread["threads"] == []
    response = await harness.client.get("/api/threads/t1")
    await assert_json_error(response, 404, "thread_not_found")


async def sign_in_with_link(harness: Harness, code: str) -> aiohttp.ClientResponse:
    """What the dashboard does with a link: open it (no cookie yet), then POST its code."""
    opened = await harness.client.get("/auth/login", params={"code": code},
                                      allow_redirects=False)
    assert (opened.status, opened.headers["Location"]) == (303, f"/#login={code}")
    assert "Set-Cookie" not in opened.headers  # following a link signs no one in
    return await harness.client.post("/auth/login", json={"code": code})


@pytest.mark.sqlite_only
async def test_a_login_link_from_the_cli_signs_in_once(
        data_dir: Path, start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked()
    await harness.user()
    printed = await acloudybot(data_dir, "users", "login-link", "alice",
                               "--base-url", "https://bot.example.com/")
    assert printed.returncode == 0, printed.stderr
    link = urlsplit(last_line(printed))
    assert (link.scheme, link.netloc, link.path) == ("https", "bot.example.com", "/auth/login")
    code = parse_qs(link.query)["code"][0]

    response = await sign_in_with_link(harness, code)
    assert response.status == 200
    assert (await response.json())["userId"] == "alice"
    assert "HttpOnly" in response.headers["Set-Cookie"]
    assert (await (await harness.client.get("/api/session")).json())["userId"] == "alice"

    harness.client.session.cookie_jar.clear()
    again = await sign_in_with_link(harness, code)
    await assert_json_error(again, 401, "link_expired")
    assert "Set-Cookie" not in again.headers


async def test_a_login_link_expires_after_fifteen_minutes(
        start_clocked: StartGateway, clock: Clock) -> None:
    harness = await start_clocked()
    await harness.user()
    code = await harness.gateway.accounts.login_link_code("alice")
    clock.advance(LOGIN_LINK_SECONDS + 1)
    await assert_json_error(await sign_in_with_link(harness, code), 401, "link_expired")
    fresh = await harness.gateway.accounts.login_link_code("alice")
    clock.advance(LOGIN_LINK_SECONDS - 60)
    assert (await sign_in_with_link(harness, fresh)).status == 200


def no_cookie(harness: Harness) -> bool:
    return not [c for c in harness.client.session.cookie_jar if c.key == COOKIE]


async def test_another_sites_page_cannot_sign_a_browser_in(harness: Harness) -> None:
    """Login CSRF: a page elsewhere posts the attacker's token or link code so that the
    victim's browser is signed into the attacker's account. Every cookie-setting route answers
    only the gateway's own pages, and takes only JSON (which a plain form cannot send)."""
    token = (await harness.user())["Authorization"].removeprefix("Bearer ")
    own = str(harness.client.make_url("/")).rstrip("/")
    path, body = "/auth/session", {"token": token}
    # what a cross-site <form enctype="text/plain"> (or urlencoded) sends: refused as such
    for form in ({"Content-Type": "text/plain"},
                 {"Content-Type": "application/x-www-form-urlencoded"},
                 {"Content-Type": "text/plain", "Origin": own}):
        response = await harness.client.post(path, data=json.dumps(body), headers=form)
        await assert_json_error(response, 415, "unsupported_media_type")
    for elsewhere in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                      {"Origin": own.replace("http://", "https://")},
                      {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                      {"Sec-Fetch-Site": "cross-site", "Origin": own},
                      {"Origin": "https://evil.example", "Content-Type": "text/plain"}):
        response = await harness.client.post(path, data=json.dumps(body), headers={
            "Content-Type": "application/json", **elsewhere})
        await assert_json_error(response, 403, "cross_site")
    assert no_cookie(harness)
    # the gateway's own page (a same-origin fetch says so), or no page at all (curl)
    for own_page in ({"Origin": own}, {"Sec-Fetch-Site": "same-origin"},
                     {"Sec-Fetch-Site": "same-origin", "Origin": "https://proxied.example"},
                     {}):
        response = await harness.client.post(path, json=body, headers=own_page)
        assert response.status == 200, (own_page, await response.text())
        assert not no_cookie(harness)
        harness.client.session.cookie_jar.clear()

    code = await harness.gateway.accounts.login_link_code("alice")
    response = await harness.client.post("/auth/login", data=json.dumps({"code": code}),
                                         headers={"Content-Type": "text/plain"})
    await assert_json_error(response, 415, "unsupported_media_type")
    response = await harness.client.post("/auth/login", json={"code": code},
                                         headers={"Sec-Fetch-Site": "cross-site"})
    await assert_json_error(response, 403, "cross_site")
    assert no_cookie(harness)
    response = await harness.client.post("/auth/login", json={"code": code},
                                         headers={"Sec-Fetch-Site": "same-origin"})
    assert response.status == 200 and not no_cookie(harness)  # refused ones did not spend it


async def test_another_sites_page_cannot_sign_a_browser_out(harness: Harness) -> None:
    csrf = await sign_in(harness, await harness.user())
    response = await harness.client.delete("/api/session", headers={
        "X-CSRF-Token": csrf, "Origin": "https://evil.example"})
    await assert_json_error(response, 403, "cross_site")
    assert "Set-Cookie" not in response.headers
    assert (await harness.client.get("/api/session")).status == 200  # still signed in
    response = await harness.client.delete("/api/session", headers={
        "X-CSRF-Token": csrf, "Sec-Fetch-Site": "same-origin"})
    assert response.status == 204


async def test_a_login_link_for_nobody_is_refused(data_dir: Path, harness: Harness) -> None:
    printed = await acloudybot(data_dir, "users", "login-link", "nobody")
    assert printed.returncode != 0
    assert "nobody" in printed.stderr and "Traceback" not in printed.stderr

