"""The dashboard in a real browser (SPEC §14): Playwright drives Debian's headless Chromium
(``/usr/bin/chromium``; nothing is downloaded) against a gateway on loopback with the fake LLM.
Each view is saved as a screenshot under ``test-artifacts/dashboard/``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from tests.conftest import Harness
from tests.helpers import CHROMIUM, require_chromium

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "dashboard"
REPLY = ("Here is a **plan**:\n\n1. Pack light\n2. Book the train\n\n"
         "```python\nprint('bon voyage')\n```\n\nEnjoy the trip, it will be lovely.")
XSS_IMG = '<img src=x onerror="window.__xss = 1">'
XSS_SCRIPT = "<script>window.__xss = 2</script>"
ANSWERS = "[data-testid=message][data-role=assistant]"

playwright_api = require_chromium()
expect = playwright_api.expect
StartGateway = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield launched
        await launched.close()


class Dashboard:
    """A browser page on the harness's gateway, with the steps the tests share."""

    def __init__(self, harness: Harness, page: Any) -> None:
        self.harness = harness
        self.page = page
        self.errors: list[str] = []
        self.violations: list[str] = []  # what the page's Content Security Policy refused
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", self._console)

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            self.violations.append(message.text)

    def url(self, path: str = "/") -> str:
        return str(self.harness.client.make_url(path))

    def testid(self, name: str) -> Any:
        return self.page.get_by_test_id(name)

    async def sign_in(self, auth: dict[str, str]) -> None:
        await self.page.goto(self.url())
        await self.testid("token-input").fill(auth["Authorization"].removeprefix("Bearer "))
        await self.testid("sign-in").click()
        await self.testid("composer").wait_for()

    async def send(self, text: str) -> None:
        await self.testid("composer").fill(text)
        await self.testid("send").click()

    def messages(self, role: str) -> Any:
        return self.page.locator(f'[data-testid="message"][data-role="{role}"]')

    async def wait_reply(self, count: int) -> None:
        await self.page.wait_for_function(
            f"n => document.querySelectorAll('{ANSWERS}:not(.streaming)').length >= n",
            arg=count)

    async def tab(self, name: str) -> None:
        await self.page.get_by_role("tab", name=name).click()

    async def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@pytest.fixture
async def dashboard(harness: Harness, browser: Any) -> AsyncIterator[Dashboard]:
    page = await browser.new_page(viewport={"width": 1360, "height": 860})
    board = Dashboard(harness, page)
    yield board
    await page.close()
    assert board.errors == []


async def test_sign_in_with_a_token_and_sign_out(dashboard: Dashboard) -> None:
    auth = await dashboard.harness.user()
    await dashboard.page.goto(dashboard.url())
    await dashboard.testid("sign-in").wait_for()
    await dashboard.shot("sign-in")
    await dashboard.testid("token-input").fill("cb_wrong")
    await dashboard.testid("sign-in").click()
    await dashboard.page.get_by_text("That token is not valid.").wait_for()
    await dashboard.sign_in(auth)
    await expect(dashboard.page.locator("#who")).to_have_text("alice")
    await expect(dashboard.testid("credits")).to_contain_text("credits")
    cookies = await dashboard.page.context.cookies()
    [cookie] = [c for c in cookies if c["name"] == "cloudybot_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

    await dashboard.testid("sign-out").click()
    await dashboard.testid("token-input").wait_for()
    # ended on the server: the old cookie, sent again, is refused
    jar = dashboard.harness.client.session.cookie_jar
    response = await dashboard.harness.client.get(
        "/api/session", headers={"Cookie": f"cloudybot_session={cookie['value']}"})
    assert response.status == 401
    assert not [c for c in jar if c.key == "cloudybot_session"]


async def test_sign_in_with_a_login_link_works_once(dashboard: Dashboard) -> None:
    await dashboard.harness.user()
    code = await dashboard.harness.gateway.accounts.login_link_code("alice")
    link = dashboard.url(f"/auth/login?code={code}")
    await dashboard.page.goto(link)
    await dashboard.testid("sign-in-with-link").click()
    await dashboard.testid("composer").wait_for()
    await expect(dashboard.page.locator("#who")).to_have_text("alice")
    # the code is not left in the address bar: the thread opened took its place
    assert dashboard.page.url.startswith(dashboard.url("/#thread=chat-"))
    await dashboard.page.context.clear_cookies()
    await dashboard.page.goto(link)
    await dashboard.testid("sign-in-with-link").click()
    await dashboard.page.get_by_text("used already or has expired").wait_for()
    assert await dashboard.testid("token-input").is_visible()


async def session_cookies(dashboard: Dashboard) -> list[Any]:
    return [c for c in await dashboard.page.context.cookies()
            if c["name"] == "cloudybot_session"]


async def test_another_site_cannot_sign_the_browser_into_its_account(
        dashboard: Dashboard) -> None:
    """Login CSRF, as a browser lives it: mallory's page posts her token as a plain form (the
    one body a page may send anywhere without asking), or sends the browser to her login
    link; the browser must not end up signed in as mallory."""
    token = (await dashboard.harness.user("mallory"))["Authorization"].removeprefix("Bearer ")
    code = await dashboard.harness.gateway.accounts.login_link_code("mallory")
    form = (f'<form method="POST" action="{dashboard.url("/auth/session")}" '
            'enctype="text/plain"><input name=\'{"token": "' + token + '", "x": "\' '
            'value=\'"}\'></form><script>document.forms[0].submit()</script>')
    pages = {"http://evil.test/form": form,
             "http://evil.test/link": "<script>location.href = "
                                      f"'{dashboard.url(f'/auth/login?code={code}')}'</script>"}

    async def serve(route: Any) -> None:
        await route.fulfill(status=200, content_type="text/html", body=pages[route.request.url])

    await dashboard.page.route("http://evil.test/**", serve)
    await dashboard.page.goto("http://evil.test/form")
    await dashboard.page.wait_for_url(dashboard.url("/auth/session"))
    await expect(dashboard.page.locator("body")).to_contain_text("cross_site")
    assert await session_cookies(dashboard) == []

    await dashboard.page.goto("http://evil.test/link")
    await dashboard.testid("sign-in-with-link").wait_for()  # the person is asked first
    assert await session_cookies(dashboard) == []
    assert await dashboard.harness.gateway.accounts.redeem_login_code(code) is not None


async def test_a_reply_streams_into_the_transcript(dashboard: Dashboard,
                                                   fake_llm: FakeLLM) -> None:
    resume = asyncio.Event()
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=12, pause_after=3,
                                resume=resume)]
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.send("Plan my trip, please")
    answer = dashboard.messages("assistant").last
    # the model pauses after three pieces: the entry already shows them, still streaming
    await dashboard.page.wait_for_function(
        f"() => {{ const m = [...document.querySelectorAll('{ANSWERS}')].at(-1);"
        " return m && m.classList.contains('streaming') && m.innerText.includes('Pack'); }")
    partial = await answer.inner_text()
    assert "Enjoy the trip" not in partial
    await dashboard.shot("streaming")
    resume.set()
    await dashboard.wait_reply(1)
    body = answer.locator(".message-body")
    assert await body.locator("strong").inner_text() == "plan"
    assert await body.locator("ol li").all_inner_texts() == ["Pack light", "Book the train"]
    assert await body.locator("pre code").inner_text() == "print('bon voyage')"
    assert "Enjoy the trip, it will be lovely." in await body.inner_text()
    assert await dashboard.messages("user").last.inner_text() != ""
    await dashboard.page.locator('[data-testid="thread"]').first.wait_for()
    await dashboard.shot("thread")


async def test_scrollback_reaches_the_first_of_500_messages(dashboard: Dashboard) -> None:
    harness = dashboard.harness
    auth = await harness.user(plan="team")  # no rate limit for the 250 turns
    for index in range(250):
        assert (await harness.chat(auth, f"m{index:03d}", thread="long")).status == 200
    await dashboard.sign_in(auth)
    await dashboard.page.locator('[data-testid="thread"][data-thread-id="long"] button').click()
    first_user = dashboard.messages("user").first
    await dashboard.page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=message]').length >= 50")
    assert await first_user.inner_text() != "m000"
    for _ in range(20):
        if await dashboard.page.locator('[data-testid="message"]').count() >= 500:
            break
        count = await dashboard.page.locator('[data-testid="message"]').count()
        await dashboard.page.locator("#transcript-scroll").evaluate("el => { el.scrollTop = 0; }")
        await dashboard.page.wait_for_function(
            "n => document.querySelectorAll('[data-testid=message]').length > n", arg=count)
    assert await dashboard.page.locator('[data-testid="message"]').count() == 500
    assert "m000" in await first_user.inner_text()
    assert "echo: m249" in await dashboard.messages("assistant").last.inner_text()
    assert await dashboard.page.get_by_text("The beginning of this thread.").is_visible()


async def test_pinned_memory_reaches_the_next_prompt_and_the_inspector(
        dashboard: Dashboard, fake_llm: FakeLLM) -> None:
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.send("hello")
    await dashboard.wait_reply(1)
    await dashboard.tab("Memory")
    await dashboard.testid("memory-key").fill("name")
    await dashboard.testid("memory-value").fill("Ada Lovelace")
    await dashboard.testid("memory-save").click()
    entry = dashboard.page.locator('[data-testid="memory-entry"][data-key="name"]')
    await entry.wait_for()
    await dashboard.shot("memory")
    await dashboard.tab("Context")
    inspector = dashboard.testid("context-inspector")
    await inspector.locator('.segment[data-layer="pinned"]').wait_for()
    await dashboard.shot("context-inspector")
    await dashboard.send("who am I?")
    await dashboard.wait_reply(2)
    assert "name: Ada Lovelace" in fake_llm.chat_requests[-1].system_text

    await dashboard.tab("Memory")
    await entry.get_by_role("button", name="Edit name").click()
    await dashboard.testid("memory-value").fill("Grace Hopper")
    await dashboard.testid("memory-save").click()
    await entry.get_by_text("Grace Hopper").wait_for()
    await dashboard.send("and now?")
    await dashboard.wait_reply(3)
    assert "name: Grace Hopper" in fake_llm.chat_requests[-1].system_text

    await entry.get_by_test_id("memory-delete").click()
    await entry.wait_for(state="detached")
    await dashboard.tab("Context")
    await inspector.locator('.segment[data-layer="pinned"]').wait_for(state="detached")
    await dashboard.send("forgotten?")
    await dashboard.wait_reply(4)
    assert "<pinned>" not in fake_llm.chat_requests[-1].system_text


async def test_a_picked_specialist_shapes_the_next_turn(dashboard: Dashboard,
                                                       fake_llm: FakeLLM) -> None:
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.tab("Specialists")
    await dashboard.page.get_by_label("Name", exact=True).fill("chef")
    await dashboard.page.get_by_label("Instructions").fill("Answer as a French chef.")
    await dashboard.page.get_by_role("button", name="Save specialist").click()
    await dashboard.page.locator('[data-testid="specialist-select"] option[value="chef"]').wait_for(
        state="attached")
    await dashboard.testid("specialist-select").select_option("chef")
    await dashboard.tab("Context")
    await dashboard.testid("context-inspector").locator(
        '.segment[data-layer="specialist"]').wait_for()
    await dashboard.send("what's for dinner?")
    await dashboard.wait_reply(1)
    assert "Answer as a French chef." in fake_llm.chat_requests[-1].system_text


async def test_html_from_the_model_or_the_user_is_shown_as_text(
        dashboard: Dashboard, fake_llm: FakeLLM) -> None:
    def hostile(request: Recorded) -> Scripted:
        return Scripted(body=completion(
            f"Look: {XSS_IMG} and {XSS_SCRIPT} [x](javascript:alert(1))"))

    fake_llm.responder = hostile
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.send(f"mine: {XSS_SCRIPT} {XSS_IMG}")
    await dashboard.wait_reply(1)
    transcript = dashboard.page.locator("#transcript")
    assert await transcript.locator("img, script, iframe").count() == 0
    assert await transcript.locator('a[href^="javascript"]').count() == 0
    reply = await dashboard.messages("assistant").last.inner_text()
    assert XSS_IMG in reply and XSS_SCRIPT in reply
    assert XSS_SCRIPT in await dashboard.messages("user").last.inner_text()
    await dashboard.page.reload()  # rendered again from the stored transcript
    await dashboard.wait_reply(1)
    assert await dashboard.page.locator("#transcript img, #transcript script").count() == 0
    assert await dashboard.page.evaluate("() => window.__xss") is None
    await dashboard.shot("xss-as-text")


async def test_the_panels_show_usage_session_and_write_only_logins(
        dashboard: Dashboard) -> None:
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.send("hello")
    await dashboard.wait_reply(1)
    await dashboard.tab("Usage")
    chart = dashboard.testid("usage-chart")
    await chart.locator("rect.kind-chat").wait_for()
    await dashboard.shot("usage")
    await dashboard.tab("Session")
    await dashboard.page.locator("#session-status").get_by_text("Active file").wait_for()
    await dashboard.tab("Logins")
    await dashboard.page.get_by_label("Site", exact=True).fill("example.com")
    await dashboard.page.get_by_label("Username", exact=True).fill("ada")
    await dashboard.page.get_by_label("Password", exact=True).fill("Hunter2-Passwort")
    await dashboard.page.get_by_role("button", name="Save login").click()
    await dashboard.page.locator("#credential-list").get_by_text("example.com").wait_for()
    assert await dashboard.page.get_by_label("Password", exact=True).input_value() == ""
    assert "Hunter2-Passwort" not in await dashboard.page.content()


async def test_the_dashboard_fits_a_375_pixel_screen(harness: Harness, browser: Any) -> None:
    page = await browser.new_page(viewport={"width": 375, "height": 780})
    board = Dashboard(harness, page)
    await board.sign_in(await harness.user())
    await board.send("hello from a phone")
    await board.wait_reply(1)
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 375
    assert await board.testid("send").is_visible()
    await board.shot("phone")
    await page.get_by_role("button", name="Threads").click()
    await page.locator('[data-testid="thread"]').first.wait_for(state="visible")
    await page.locator("#threads").evaluate(  # the drawer has slid in
        "el => Promise.all(el.getAnimations().map(a => a.finished))")
    await board.shot("phone-threads")
    await page.close()
    assert board.errors == []
