"""What the ``browser`` tool does on a session's page: open, read, click, fill,
fill_credential, submit and screenshot (SPEC §20).

Each action answers the model with a short JSON-able result, or raises :class:`ActionError`
with a message for it. The agent redacts saved passwords from every result, so that a page
echoing one (its text, its title, a URL after a GET form) never shows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gateway import BadRequest, Credential, DestinationRefused, Image, ToolOutput, web_url
from gateway import valid_site as saved_site

from .pool import BrowserSession

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

ACTIONS = ("open", "read", "click", "fill", "fill_credential", "submit", "screenshot")
MAX_TARGET_CHARS = 500
MAX_VALUE_CHARS = 10_000
# A submit that navigates nowhere (a form sent by script) is done after this long.
SUBMIT_NAVIGATION_SECONDS = 5.0
_BLANK_LINES = re.compile(r"\n\s*\n+")

# The username field of a login form: the last text-like input before the password field, in
# its form (else in the page); None when there is none.
_USERNAME_FIELD = """(password) => {
  const scope = password.form || document;
  const textual = (i) => ['', 'text', 'email', 'tel']
      .includes((i.getAttribute('type') || '').toLowerCase());
  const shown = (i) => !i.disabled && i.getClientRects().length > 0;
  const fields = [...scope.querySelectorAll('input')].filter((i) => textual(i) && shown(i));
  const before = fields.filter(
      (i) => i.compareDocumentPosition(password) & Node.DOCUMENT_POSITION_FOLLOWING);
  return before.length ? before[before.length - 1] : (fields[0] || null);
}"""
# Whether clicking the element opens a new tab: a link (or a form's button) with a target
# other than the page itself.
_OPENS_A_TAB = """(element) => {
  const owner = element.closest('a[href][target]') || (element.form || null);
  const target = owner ? (owner.getAttribute('target') || '').toLowerCase() : '';
  return !['', '_self', '_parent', '_top'].includes(target);
}"""
# The focused element's form, else the page's only form.
_FORM_TO_SUBMIT = """() => {
  const focused = document.activeElement;
  if (focused && focused.form) return focused.form;
  return document.forms.length === 1 ? document.forms[0] : null;
}"""

Check = Callable[[str, int], Awaitable[str]]


class ActionError(Exception):
    """An action that cannot be done as asked; the message is for the model."""


def site_of(url: str) -> str:
    """A page's site as saved logins name it: host, with ``:port`` when not the default."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = parts.port
    return host if port is None or port == default else f"{host}:{port}"


def argument(arguments: dict[str, Any], name: str, limit: int) -> str:
    """A required string argument of at most ``limit`` characters."""
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ActionError(f"this action needs '{name}' (a non-empty string)")
    if len(value) > limit:
        raise ActionError(f"'{name}' is longer than {limit} characters")
    return value


def page_text(raw: str, limit: int) -> str:
    """Visible text with blank runs squeezed and each line trimmed, at most ``limit``
    characters (the rest counted)."""
    lines = (line.strip() for line in raw.replace("\r", "").split("\n"))
    text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    if len(text) > limit:
        return f"{text[:limit]}\n[... {len(text) - limit} more characters]"
    return text


async def _where(page: Page, status: int | None = None) -> dict[str, Any]:
    where: dict[str, Any] = {"url": page.url, "title": await page.title()}
    if status is not None:
        where["status"] = status
    return where


async def _locate(page: Page, target: str) -> Locator:
    """The first element ``target`` names: a CSS selector, else a button, link, field label,
    placeholder or visible text."""
    from playwright.async_api import Error as PlaywrightError

    try:
        css = page.locator(target)
        if await css.count():
            return css.first
    except PlaywrightError:
        pass  # not a selector: a name or text
    candidates = [page.get_by_role("button", name=target), page.get_by_role("link", name=target),
                  page.get_by_label(target), page.get_by_placeholder(target),
                  page.get_by_text(target)]
    for candidate in candidates:
        if await candidate.count():
            return candidate.first
    raise ActionError(f'nothing on the page matches "{target}" (a CSS selector, or a button, '
                      "link, label or visible text)")


async def checked_url(arguments: dict[str, Any], check: Check) -> str:
    """``url`` if it is http or https on an address the browser may reach (checked before
    any context opens: a refused URL costs nothing)."""
    raw = argument(arguments, "url", 2048)
    try:
        url, host, port = web_url(raw)
        await check(host, port)
    except BadRequest as exc:
        raise ActionError(exc.message) from None
    except DestinationRefused as exc:
        raise ActionError(f"refused: {exc}") from None
    return url


async def open_page(session: BrowserSession, url: str, timeout: float) -> dict[str, Any]:
    """Go to ``url`` (see :func:`checked_url`)."""
    response = await session.page.goto(url, wait_until="domcontentloaded",
                                       timeout=timeout * 1000)
    return await _where(session.page, response.status if response is not None else None)


async def read_page(session: BrowserSession, limit: int) -> dict[str, Any]:
    """The page's visible text, trimmed."""
    page = session.page
    title, raw = await page.evaluate(
        "() => [document.title, document.body ? document.body.innerText : '']")
    return {"url": page.url, "title": str(title),
            "text": page_text(raw if isinstance(raw, str) else "", limit)}


async def click(session: BrowserSession, arguments: dict[str, Any],
                timeout: float) -> dict[str, Any]:
    """Click what ``target`` names; wait for a page it opens."""
    target = argument(arguments, "target", MAX_TARGET_CHARS)
    element = await _locate(session.page, target)
    if await element.evaluate(_OPENS_A_TAB):
        # wait for the tab it opens: the context's "page" event alone may come after the
        # click returned (a tab opened by a script is followed as that event comes)
        async with session.context.expect_page(timeout=timeout * 1000) as opened:
            await element.click()
        session.page = await opened.value
    else:
        await element.click()
    await session.page.wait_for_load_state("domcontentloaded", timeout=timeout * 1000)
    return {"clicked": target, **await _where(session.page)}


async def fill(session: BrowserSession, arguments: dict[str, Any]) -> dict[str, Any]:
    """Type ``value`` into the field ``target`` names."""
    target = argument(arguments, "target", MAX_TARGET_CHARS)
    value = arguments.get("value")
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        raise ActionError(f"fill needs 'value' (a string of at most {MAX_VALUE_CHARS} "
                          "characters)")
    await (await _locate(session.page, target)).fill(value)
    return {"filled": target}


async def fill_credential(session: BrowserSession, arguments: dict[str, Any],
                          saved_logins: Sequence[Credential]) -> str:
    """Fill the saved username and password of ``site`` into the page's login form, only on
    that site's own pages; neither passes through the model."""
    try:
        site = saved_site(argument(arguments, "site", 300))
    except BadRequest as exc:
        raise ActionError(exc.message) from None
    page = session.page
    here = site_of(page.url)
    if here != site:
        raise ActionError(f"the page is on {here or 'no site'}, not {site}: open {site}'s "
                          "login page first (a saved login is only filled into its own site)")
    saved = next((c for c in saved_logins if c.site.lower() == site), None)
    if saved is None:
        raise ActionError(f"there is no saved login for {site}")
    password_field = page.locator("input[type=password]:visible").first
    if not await password_field.count():
        raise ActionError("this page has no password field: open the login form first")
    username_field = (await password_field.evaluate_handle(_USERNAME_FIELD)).as_element()
    if username_field is not None:
        await username_field.fill(saved.username)
    await password_field.fill(saved.password)
    session.filled.add(saved.password)
    filled = "username and password" if username_field is not None else "password"
    return f"filled the saved {filled} for {site} into the login form; submit it to sign in"


async def submit(session: BrowserSession, timeout: float) -> dict[str, Any]:
    """Submit the focused form (or the page's only one) and wait for the page it opens."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    page = session.page
    form = (await page.evaluate_handle(_FORM_TO_SUBMIT)).as_element()
    if form is None:
        raise ActionError("there is no form to submit: fill or click a field of the form "
                          "first, or click its button")
    wait = min(timeout, SUBMIT_NAVIGATION_SECONDS) * 1000
    try:
        async with page.expect_navigation(wait_until="domcontentloaded", timeout=wait):
            await form.evaluate("(form) => form.requestSubmit()")
    except PlaywrightTimeout:
        return {"submitted": True, "navigated": False, **await _where(page)}
    return {"submitted": True, "navigated": True, **await _where(page)}


async def screenshot(session: BrowserSession) -> ToolOutput | dict[str, Any]:
    """A PNG of the visible page, kept as the session's latest screenshot: the model reads
    what it shows (where, how large) and, a vision model, sees the picture; but not once a
    saved login was filled in on the session's pages, since no redaction reaches pixels."""
    page = session.page
    session.screenshot = await page.screenshot(type="png")
    size = page.viewport_size or {"width": 0, "height": 0}
    shown = {"screenshot": "taken", **await _where(page), "width": size["width"],
             "height": size["height"], "bytes": len(session.screenshot)}
    if session.filled:
        return {**shown, "picture": "not shown: a saved login was filled in on this page"}
    return ToolOutput(json.dumps(shown),
                      (Image("image/png", session.screenshot, "screenshot.png"),))
