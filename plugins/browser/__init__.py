"""The ``browser`` tool: a real headless Chromium for the agent, driven by Playwright (SPEC §20).

The model calls ``browser`` with ``{"action", "url"?, "target"?, "value"?, "site"?}``; each
session key gets its own browser context (:mod:`.pool`), pages reach only public addresses
(:mod:`.egress`), and every started minute with a context open is charged as browser minutes.
The hints layer of the prompt says whether the browser is available and which page the
session has open. Without Playwright (``pip install 'cloudybot[browser]'``) or Chromium the
tool is not offered, and the hint says why.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from gateway import (
    PluginHost,
    PluginSettings,
    PromptSection,
    Rotation,
    Tool,
    ToolContext,
    TurnContext,
    hookimpl,
    redact,
)

from . import actions
from .actions import ACTIONS, ActionError
from .pool import BrowserPool, BrowserRefusal, BrowserSession
from .settings import BrowserSettings, unavailable_reason

log = logging.getLogger(__name__)
MAX_HINT_URL_CHARS = 300
DESCRIPTION = (
    "A real web browser (headless Chromium) with its own cookies for this conversation. "
    "Actions: open (url), read (the page's visible text), click (target: a CSS selector or "
    "visible text), fill (target, value), fill_credential (site: fills the user's saved login "
    "for that site into the page's login form; you never see the password), submit (the "
    "focused or only form), screenshot. Each started minute with a page open uses one of the "
    "user's browser minutes.")
PARAMETERS = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "url": {"type": "string", "description": "for open: an http:// or https:// URL"},
        "target": {"type": "string",
                   "description": "for click and fill: a CSS selector or the visible text, "
                                  "label or placeholder of the element"},
        "value": {"type": "string", "description": "for fill: the text to type"},
        "site": {"type": "string",
                 "description": "for fill_credential: the saved login's site (host[:port])"},
    },
    "required": ["action"],
}

# By the host this plugin got from each gateway (tests run several gateways in one process).
_pools: weakref.WeakKeyDictionary[PluginHost, BrowserPool] = weakref.WeakKeyDictionary()
_unavailable: weakref.WeakKeyDictionary[PluginHost, str] = weakref.WeakKeyDictionary()


def pool_of(host: PluginHost) -> BrowserPool | None:
    """The browser pool of the gateway ``host`` belongs to (None when the browser is off or
    cannot run)."""
    return _pools.get(host)


@hookimpl
def plugin_settings() -> PluginSettings:
    """The browser's settings: ``[plugins.browser]``, ``CLOUDYBOT_BROWSER_*``."""
    return PluginSettings("browser", BrowserSettings)


@hookimpl
def register_tools(host: PluginHost) -> list[Tool]:
    """The ``browser`` tool, when enabled and Playwright and Chromium are installed."""
    settings = host.settings.plugin(BrowserSettings)
    if not settings.enabled:
        return []
    reason = unavailable_reason(settings)
    if reason is not None:
        log.info("browser: the browser tool is not offered: %s", reason)
        _unavailable[host] = reason
        return []
    pool = BrowserPool(settings, host)
    _pools[host] = pool

    async def run(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await _run(pool, arguments, context)

    return [Tool(name="browser", description=DESCRIPTION, parameters=PARAMETERS, run=run,
                 uses_saved_logins=True)]


@hookimpl
def prompt_sections(host: PluginHost, turn: TurnContext) -> list[PromptSection]:
    """The hints layer's browser part: available or not (and why), the page this session
    has open."""
    pool = _pools.get(host)
    if pool is None:
        reason = _unavailable.get(host)
        if reason is None:
            return []  # turned off, or not loaded into this gateway
        return [PromptSection("after_hints", f"No web browser is available here: {reason}.")]
    text = ("You have a web browser: the browser tool. Use it when the answer needs a live "
            "web page or a site the user has an account on.")
    session = pool.get(turn.session_key)
    if session is not None:
        text += f"\nThe browser's current page: {_page_line(session)}"
    return [PromptSection("after_hints", text)]


@hookimpl
async def session_rotated(host: PluginHost, rotation: Rotation) -> None:
    """A session ended (rotated, cleared, deleted, purged): its browser context goes with it."""
    pool = _pools.get(host)
    if pool is not None:
        await pool.close(rotation.key, f"session {rotation.reason}")


@hookimpl
async def gateway_stopping(host: PluginHost) -> None:
    """Close Chromium and everything it holds."""
    pool = _pools.pop(host, None)
    if pool is not None:
        await pool.aclose()


def _page_line(session: BrowserSession) -> str:
    """The session's page for the hint, without a password fill_credential put in it (a GET
    form shows it in the URL)."""
    url = session.page.url
    if len(url) > MAX_HINT_URL_CHARS:
        url = url[:MAX_HINT_URL_CHARS] + "..."
    title = session.title or "(no title)"
    return redact(f"{title} — {url}", tuple(session.filled))


async def _run(pool: BrowserPool, arguments: dict[str, Any], context: ToolContext) -> Any:
    """One tool call: the action on the session's page, the minutes kept paid."""
    action = arguments.get("action")
    if action not in ACTIONS:
        return f"error: 'action' must be one of {', '.join(ACTIONS)}"
    from playwright.async_api import Error as PlaywrightError

    session = pool.get(context.session_key)
    try:
        url = await actions.checked_url(arguments, pool.proxy.check) if action == "open" else ""
        if session is None:
            if action != "open":
                return "error: no page is open in this conversation; use action open first"
            try:
                session = await pool.open_session(context.session_key, context.user_id)
            except PlaywrightError as exc:
                log.error("browser: cannot start a browser context: %s", _first_line(exc.message))
                return "error: the browser could not start; try again later"
        async with session.lock:
            await pool.keep_paid(session, context.user_id)
            try:
                return await _perform(pool, session, arguments, context, url)
            finally:
                session.last_used = pool.clock()
    except BrowserRefusal as refusal:
        return str(refusal)
    except ActionError as exc:
        return f"error: {exc}"


async def _perform(pool: BrowserPool, session: BrowserSession, arguments: dict[str, Any],
                   context: ToolContext, url: str) -> Any:
    from playwright.async_api import Error as PlaywrightError

    action = arguments["action"]
    timeout = pool.settings.action_timeout_seconds

    try:
        if action == "open":
            result: Any = await actions.open_page(session, url, timeout)
        elif action == "read":
            result = await actions.read_page(session, pool.settings.read_max_chars)
        elif action == "click":
            result = await actions.click(session, arguments, timeout)
        elif action == "fill":
            result = await actions.fill(session, arguments)
        elif action == "fill_credential":
            result = await actions.fill_credential(session, arguments, context.saved_logins)
        elif action == "submit":
            result = await actions.submit(session, timeout)
        else:
            result = await actions.screenshot(session)
    except PlaywrightError as exc:
        # Playwright's message can quote the page's URL (a password in a GET form's query):
        # the model reads it redacted by the agent; the log keeps only the kind of failure.
        log.info("browser: %s failed (%s)", action, type(exc).__name__)
        if session.page.is_closed():  # the page (or Chromium) is gone: start afresh next time
            await pool.close(session.key, "page closed")
        raise ActionError(f"{action} failed: {_first_line(exc.message)}") from None
    title = result.get("title") if isinstance(result, dict) else None
    if isinstance(title, str):  # the actions that may change the page say where it is
        session.title = title[:200]
    return result


def _first_line(message: str) -> str:
    line = message.strip().split("\n", 1)[0]
    return line[:300]
