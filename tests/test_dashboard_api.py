"""The API answers the dashboard reads besides the SPEC §7 ones: credits per day by kind (the
ledger's figures) and a thread's session status (active file, last rotation, archives)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error

StartGateway = Callable[..., Awaitable[Harness]]
DAY = 86400


async def test_credits_per_day_by_kind_are_the_ledgers_spending(
        start_clocked: StartGateway, clock: Clock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked(summarize_at=4, keep_recent=2)
    auth = await harness.user()
    fake_llm.script = [Scripted(body=completion("one", 1000, 500))]
    assert (await harness.chat(auth, "first")).status == 200
    clock.advance(DAY)
    for text in ("second", "third"):
        assert (await harness.chat(auth, text)).status == 200
    await harness.gateway.drain()  # the summarization is charged too

    response = await harness.client.get("/api/user/usage/daily", headers=auth,
                                        params={"days": "7"})
    assert response.status == 200
    days = (await response.json())["days"]
    assert len(days) == 7 and days == sorted(days, key=lambda d: d["date"])
    yesterday, today = days[-2], days[-1]
    ledger = await harness.gateway.store.ledger("alice")
    spent = [row for row in ledger if row.credits > 0]
    assert sum(d["credits"] for d in days) == sum(row.credits for row in spent)
    assert set(yesterday["kinds"]) == {"chat"}
    assert set(today["kinds"]) == {"chat", "summarize"}
    assert today["credits"] == sum(k["credits"] for k in today["kinds"].values())
    assert all(d["credits"] == 0 and d["kinds"] == {} for d in days[:-2])
    assert "grant" not in str(days)


async def test_daily_usage_refuses_bad_day_counts(harness: Harness) -> None:
    auth = await harness.user()
    for bad in ("0", "367", "abc", "-1", "9" * 30):
        response = await harness.client.get("/api/user/usage/daily", headers=auth,
                                            params={"days": bad})
        await assert_json_error(response, 400, "invalid_days")
    default = await (await harness.client.get("/api/user/usage/daily", headers=auth)).json()
    assert len(default["days"]) == 30


async def test_session_status_shows_the_active_file_then_the_archive(
        harness: Harness) -> None:
    auth = await harness.user()
    empty = await (await harness.client.get("/api/threads/t1/session", headers=auth)).json()
    assert empty["active"] is None and empty["archives"] == [] and empty["lastRotation"] is None
    assert (await harness.chat(auth, "hello")).status == 200
    status = await (await harness.client.get("/api/threads/t1/session", headers=auth)).json()
    assert status["sessionKey"] == "alice--t1"
    assert status["active"]["bytes"] > 0 and status["active"]["updatedAt"].endswith("Z")
    assert status["maxBytes"] == harness.gateway.settings.session_max_file_bytes
    size = status["active"]["bytes"]

    assert (await harness.client.post("/api/threads/t1/clear", headers=auth)).status == 200
    after = await (await harness.client.get("/api/threads/t1/session", headers=auth)).json()
    assert after["active"] is None
    [archive] = after["archives"]
    assert archive["bytes"] == size and archive["name"].startswith("alice--t1.")
    assert after["lastRotation"] == archive["archivedAt"] and archive["archivedAt"].endswith("Z")



async def test_the_page_and_its_files_are_served_with_a_strict_policy(harness: Harness) -> None:
    page = await harness.client.get("/")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    html = await page.text()
    assert 'data-testid="token-input"' in html and "/static/main.js" in html
    script = await harness.client.get("/static/main.js")
    assert script.status == 200
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert script.headers["X-Content-Type-Options"] == "nosniff"
    moved = await harness.client.get("/dashboard", allow_redirects=False)
    assert (moved.status, moved.headers["Location"]) == (308, "/")


async def test_only_shipped_files_are_served(harness: Harness) -> None:
    for path in ("/static/nope.js", "/static/..%2Findex.html", "/static/%2e%2e/__init__.py",
                 "/static/../../gateway/config.py"):
        response = await harness.client.get(path)
        assert response.status == 404, path
        assert (await response.json())["error"]["code"] == "not_found"
    ranged = await harness.client.get("/", headers={"Range": "bytes=5-1"})
    assert ranged.status == 200  # the whole page; no request header changes what is sent
