"""One headless Chromium per gateway process, one browser context per session key, and the
browser minutes they cost.

Chromium starts at the first ``open`` and sends everything through the :class:`EgressProxy`.
A context (its own cookies, storage and page) belongs to one session key. It is closed when
that session rotates, is cleared or deleted (the ``session_rotated`` hook), after
``idle_minutes`` unused, when its user has no browser minutes left, and when the gateway stops.
At most ``max_contexts`` are open at once; past that a new session is refused.

Minutes are wall time with a context open, per started minute, each charged when it starts (a
``browser`` ledger row of the user who last used the context): the first when the context
opens, the next ones by the reaper as they start, so that the balance is current after every
turn. A minute the balance cannot pay closes the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway import PluginHost

from .egress import EgressProxy
from .settings import BrowserSettings

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
MINUTE = 60.0
# The reaper wakes at the next minute start or idle deadline, within these bounds (seconds).
REAPER_MIN_SLEEP, REAPER_MAX_SLEEP = 0.2, 30.0
VIEWPORT_WIDTH, VIEWPORT_HEIGHT = 1280, 800
CHROMIUM_ARGS = (
    "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--mute-audio", "--no-pings", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--disable-breakpad",

    # WebRTC could reach local addresses over UDP, around the proxy
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)
NO_MINUTES_LEFT = "no browser minutes left"


class BrowserRefusal(Exception):
    """The browser cannot serve this session now; the message is for the model."""


@dataclass
class BrowserSession:
    """A session key's browser context and page, and what it has cost."""

    key: str
    user_id: str  # billed for the minutes: the user of the latest action
    context: BrowserContext
    page: Page
    opened_at: float
    last_used: float
    minutes: int = 0  # charged so far
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # passwords fill_credential put into this context's pages: kept out of the page hint
    filled: set[str] = field(default_factory=set)
    title: str = ""
    screenshot: bytes = b""

    def minutes_started(self, now: float) -> int:
        """Minutes begun by ``now`` since the context opened (the first counts at once)."""
        return int(max(0.0, now - self.opened_at) // MINUTE) + 1

    def minutes_used(self, closed_at: float) -> int:
        """Minutes begun while the context was open, if it closes at ``closed_at`` (a minute
        that would begin at that very moment does not count)."""
        return max(1, math.ceil(max(0.0, closed_at - self.opened_at) / MINUTE))


class BrowserPool:
    """The browser contexts of one gateway process (see the module's docstring)."""

    def __init__(self, settings: BrowserSettings, host: PluginHost,
                 proxy: EgressProxy | None = None) -> None:
        self.settings = settings
        self.host = host
        self.clock = host.now
        self.proxy = proxy or EgressProxy(settings.allow_private)
        self.sessions: dict[str, BrowserSession] = {}
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._launching = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    # --- sessions ---------------------------------------------------------------------------
    def get(self, key: str) -> BrowserSession | None:
        """The session's open context, if any."""
        return self.sessions.get(key)

    async def open_session(self, key: str, user_id: str) -> BrowserSession:
        """The session's context, opened (and its first minute charged) if it has none;
        :class:`BrowserRefusal` past ``max_contexts`` or with no minutes left."""
        existing = self.sessions.get(key)
        if existing is not None:
            return existing
        if self._closed:
            raise BrowserRefusal("the browser is shutting down")
        if len(self.sessions) >= self.settings.max_contexts:
            await self.tick()  # a context past its idle time makes room
        if len(self.sessions) >= self.settings.max_contexts:
            raise BrowserRefusal(
                f"the browser is busy: {self.settings.max_contexts} conversations have a page "
                "open in this gateway; try again in a few minutes")
        browser = await self._ensure_browser()
        context = await browser.new_context(
            viewport={"width": VIEWPORT_WIDTH, "height": VIEWPORT_HEIGHT},
            accept_downloads=False, service_workers="block", locale="en-US")
        try:
            context.set_default_timeout(self.settings.action_timeout_seconds * 1000)
            page = await context.new_page()
            now = self.clock()
            session = BrowserSession(key, user_id, context, page, now, now)
            # a link that opens a new tab (target=_blank, window.open): work on in that tab
            context.on("page", lambda opened: setattr(session, "page", opened))
            if not await self._charge_due(session):
                raise BrowserRefusal(NO_MINUTES_LEFT)
        except BaseException:
            with contextlib.suppress(Exception):
                await context.close()
            raise
        self.sessions[key] = session
        self._wake_reaper()
        log.info("browser: opened a context for %s (%d open)", key, len(self.sessions))
        return session

    async def keep_paid(self, session: BrowserSession, user_id: str) -> None:
        """Before an action: bill ``user_id`` from now on, charge the minutes begun; close
        the context and raise :class:`BrowserRefusal` when they cannot be paid."""
        session.user_id = user_id
        if not await self._charge_due(session):
            await self.close(session.key, "no minutes left")
            raise BrowserRefusal(NO_MINUTES_LEFT)

    async def close(self, key: str, reason: str) -> None:
        """Close the session's context, if it has one, and charge the minutes it used that
        were not charged yet (a reaper that woke late must not make them free), never past
        its idle deadline (when it should have closed at the latest)."""
        session = self.sessions.pop(key, None)
        if session is None:
            return
        with contextlib.suppress(Exception):  # a crashed browser has nothing left to close
            await session.context.close()
        closed_at = min(self.clock(), session.last_used + self.settings.idle_minutes * MINUTE)
        unpaid = session.minutes_used(closed_at) - session.minutes
        if unpaid > 0:
            session.minutes += await self.host.take_browser_minutes(session.user_id, key, unpaid)
        log.info("browser: closed the context of %s (%s; %d minute(s) charged)", key, reason,
                 session.minutes)

    async def tick(self) -> None:
        """Close the contexts idle past ``idle_minutes``, charge the minutes begun by the
        others (closing those that cannot pay). A context busy with an action is left alone."""
        now = self.clock()
        idle_seconds = self.settings.idle_minutes * MINUTE
        for session in list(self.sessions.values()):
            if session.lock.locked():
                continue
            async with session.lock:  # free: taken at once, so no action starts meanwhile
                if now - session.last_used >= idle_seconds:
                    await self.close(session.key, "idle")
                elif not await self._charge_due(session):
                    await self.close(session.key, "no minutes left")

    async def _charge_due(self, session: BrowserSession) -> bool:
        """Charge the minutes begun and not yet charged; False if the balance could not pay
        them all."""
        due = session.minutes_started(self.clock()) - session.minutes
        if due <= 0:
            return True
        taken = await self.host.take_browser_minutes(session.user_id, session.key, due)
        session.minutes += taken
        return taken == due

    # --- the browser ------------------------------------------------------------------------
    async def _ensure_browser(self) -> Browser:
        """Chromium, launched on first use (again if it died), behind the egress proxy."""
        async with self._launching:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            self.sessions.clear()  # a dead browser took its contexts with it
            from playwright.async_api import async_playwright

            port = await self.proxy.start()
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=str(self.settings.executable), headless=True,
                args=list(CHROMIUM_ARGS), proxy={"server": f"http://127.0.0.1:{port}"})
            # Chromium crashed or was killed: its contexts are gone, the next open relaunches
            self._browser.on("disconnected", lambda _: self.sessions.clear())
            log.info("browser: Chromium started (%s)", self._browser.version)
            return self._browser

    async def aclose(self) -> None:
        """Close every context, Chromium, Playwright and the proxy (the gateway stops)."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self.sessions):
            await self.close(key, "gateway stopping")
        if self._browser is not None:
            with contextlib.suppress(Exception):
                await self._browser.close()
            self._browser = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        await self.proxy.close()

    # --- the reaper -------------------------------------------------------------------------
    def _wake_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    def _next_due(self) -> float:
        """Seconds until the next minute starts or a context's idle time is up."""
        now = self.clock()
        idle_seconds = self.settings.idle_minutes * MINUTE
        deadlines = [deadline for s in self.sessions.values()
                     for deadline in (s.opened_at + s.minutes * MINUTE,
                                      s.last_used + idle_seconds)]
        wait = min(deadlines, default=now + REAPER_MAX_SLEEP) - now
        return min(REAPER_MAX_SLEEP, max(REAPER_MIN_SLEEP, wait))

    async def _reap(self) -> None:
        while self.sessions:
            await asyncio.sleep(self._next_due())
            try:
                await self.tick()
            except Exception:
                log.exception("browser: the reaper failed; will try again")

    # --- for the hints and the benchmark ------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Open contexts and whether Chromium runs (for logs and the benchmark)."""
        return {"contexts": len(self.sessions),
                "running": self._browser is not None and self._browser.is_connected()}
