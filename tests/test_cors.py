"""Cross-origin use of the API (``CLOUDYBOT_CORS_ORIGINS``): off by default; when on, a
preflight is answered before authentication and every answer to an allowed origin says so, as
a real browser (Chromium) on another origin checks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from gateway.api.operations import OPERATIONS
from gateway.testing.loopback import LoopbackServer
from tests.conftest import Harness
from tests.test_dashboard_browser import browser  # noqa: F401 (a fixture)

DASH = "https://dash.example.com"
PREFLIGHT = {"Origin": DASH, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}


async def test_by_default_no_origin_is_allowed(harness: Harness) -> None:
    alice = await harness.user("alice")
    response = await harness.client.get("/api/threads", headers={**alice, "Origin": DASH})
    assert response.status == 200
    assert "Access-Control-Allow-Origin" not in response.headers
    preflight = await harness.client.options("/chat", headers=PREFLIGHT)
    assert preflight.status >= 400  # as before: the API knows no OPTIONS
    assert "Access-Control-Allow-Origin" not in preflight.headers


async def test_an_allowed_origin_gets_its_preflight_before_authentication(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(cors_origins=(DASH,))
    preflight = await harness.client.options("/chat", headers=PREFLIGHT)  # no token

    assert preflight.status == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == DASH
    methods = preflight.headers["Access-Control-Allow-Methods"].split(", ")
    assert {op.method for op in OPERATIONS} <= set(methods)  # PATCH (renaming) too
    allowed = preflight.headers["Access-Control-Allow-Headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert "Origin" in preflight.headers.getall("Vary")

    other = await harness.client.options("/chat", headers={**PREFLIGHT,
                                                           "Origin": "https://evil.example"})
    assert other.status != 204 and "Access-Control-Allow-Origin" not in other.headers


async def test_answers_errors_and_streams_carry_the_origin(
        start_gateway: Callable[..., Awaitable[Harness]]) -> None:
    harness = await start_gateway(cors_origins=(DASH, "http://localhost:3000"))
    alice = await harness.user("alice")
    origin = {"Origin": DASH}

    ok = await harness.chat({**alice, **origin}, "hello")
    unauthorized = await harness.client.get("/api/threads", headers=origin)
    streamed = await harness.client.post(
        "/chat", json={"threadId": "t1", "message": "stream"},
        headers={**alice, **origin, "Accept": "text/event-stream"})
    await streamed.read()
    for response in (ok, unauthorized, streamed):
        assert response.headers["Access-Control-Allow-Origin"] == DASH
        assert response.headers["Access-Control-Expose-Headers"] == "Retry-After"
    assert unauthorized.status == 401
    no_origin = await harness.chat(alice, "no origin")
    assert "Access-Control-Allow-Origin" not in no_origin.headers


async def test_a_star_allows_any_origin(start_gateway: Callable[..., Awaitable[Harness]]
                                        ) -> None:
    harness = await start_gateway(cors_origins=("*",))
    preflight = await harness.client.options(
        "/api/threads", headers={**PREFLIGHT, "Origin": "https://anywhere.example"})
    assert preflight.status == 204 and preflight.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize("value", ["dash.example.com", "ftp://x", "https://a.example/path"])
def test_a_value_that_is_not_an_origin_is_a_config_error(value: str) -> None:
    from gateway.config import options
    with pytest.raises(ValueError, match="not an origin"):
        options.origins(value)


PAGE = """<!doctype html><script>
async function call(base, token) {
  try {
    const r = await fetch(base + "/api/threads", {headers: {Authorization: "Bearer " + token}});
    return "status " + r.status;
  } catch (e) { return "blocked"; }
}
</script>"""


@pytest.fixture
async def other_origin() -> AsyncIterator[str]:
    """A page served from another origin (another port of 127.0.0.1)."""
    server = LoopbackServer()
    app = web.Application()

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")
    app.router.add_get("/", page)
    port = await server.serve(app)
    yield f"http://127.0.0.1:{port}"
    await server.close()


@pytest.mark.parametrize("allowed", [True, False])
async def test_a_browser_on_another_origin_calls_the_api_only_when_allowed(
        start_gateway: Callable[..., Awaitable[Harness]], browser: Any,  # noqa: F811
        other_origin: str, allowed: bool) -> None:
    harness = await start_gateway(cors_origins=(other_origin,) if allowed else ())
    alice = await harness.user("alice")
    token = alice["Authorization"].split()[-1]
    page = await browser.new_page()
    try:
        await page.goto(other_origin + "/")
        base = str(harness.client.make_url("")).rstrip("/")
        result = await page.evaluate(f"call({json.dumps(base)}, {json.dumps(token)})")
    finally:
        await page.close()
    assert result == ("status 200" if allowed else "blocked")
