"""Accounts: API tokens, dashboard sessions and login links, creating users on a plan, and the
monthly grant."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

from gateway.accounts.secrets import hash_token, new_api_token
from gateway.base import validation
from gateway.base.errors import BadRequest, Unauthorized
from gateway.billing.credits import period_of
from gateway.config.settings import Settings, unknown_plan
from gateway.store import Store, User, WebSession

AUTH_CACHE_SECONDS = 10.0
AUTH_CACHE_SIZE = 10_000
WEB_SESSION_SECONDS = 14 * 86400
LOGIN_LINK_SECONDS = 15 * 60


class Accounts:
    """Who a token belongs to, and each account's balance as of this billing period."""

    def __init__(self, settings: Settings, store: Store, clock: Callable[[], float]) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self._auth_cache: dict[str, tuple[float, User]] = {}
        self._epoch: int | None = None  # the store's access epoch the cache is good for

    async def authenticate(self, token: str) -> User:
        """The account of an API token; raise Unauthorized.

        Known tokens are remembered for ``AUTH_CACHE_SECONDS`` (a request then costs no
        token lookup), as long as the store's access epoch stays where it was: a token
        revoked, replaced or deleted with its account, by this process or another, is
        refused from the next request on (:meth:`Store.access_epoch`).
        """
        if not token:
            raise Unauthorized("missing or invalid API token")
        digest = hash_token(token)
        epoch = await self.store.access_epoch()
        if epoch != self._epoch:
            self._auth_cache.clear()
            self._epoch = epoch
        now = time.monotonic()
        cached = self._auth_cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        user = await self.store.user_for_token(digest)
        if user is None:
            raise Unauthorized("missing or invalid API token")
        if await self.store.access_epoch() != epoch:
            return user  # a revocation came while it was read: answer, but remember nothing
        if len(self._auth_cache) >= AUTH_CACHE_SIZE:
            self._auth_cache.clear()
        self._auth_cache[digest] = (now + AUTH_CACHE_SECONDS, user)
        return user

    async def add_user(self, user_id: str, plan: str | None = None,
                       credits: int | None = None) -> tuple[User, str]:
        """Create an account on a plan and issue its first API token."""
        validation.user_id(user_id)
        plan_name = plan or self.settings.default_plan
        chosen = self.settings.plans.get(plan_name)
        if chosen is None:
            raise BadRequest(unknown_plan(plan_name, self.settings.plans), code="unknown_plan")
        opening = chosen.credits if credits is None else credits
        if opening < 0:
            raise BadRequest("credits must be >= 0", code="invalid_credits")
        user = await self.store.create_user(user_id, plan_name, opening, chosen.browser_minutes,
                                            period_of(self.clock()))
        return user, await self.issue_token(user_id)

    async def current_user(self, user: User) -> User:
        """The account with this period's monthly grant applied (once per period, on its own:
        no cron needed). An account on a plan the configuration no longer has is left as is."""
        period = period_of(self.clock())
        plan = self.settings.plans.get(user.plan)
        if user.period >= period or plan is None:
            return user
        return await self.store.roll_period(user.user_id, user.period, period, plan.credits,
                                            plan.browser_minutes)

    async def issue_token(self, user_id: str) -> str:
        """A new API token for the account; earlier tokens stop working."""
        token = new_api_token()
        await self.store.replace_token(user_id, hash_token(token))  # moves the access epoch
        return token

    # --- the dashboard ----------------------------------------------------------------------
    async def sign_in(self, user: User) -> tuple[str, str]:
        """Start a dashboard session for ``user``: (its id, for the cookie; its CSRF token).
        Only the id's hash is stored."""
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        await self.store.create_web_session(hash_token(session_id), user.user_id, csrf,
                                            self.clock() + WEB_SESSION_SECONDS)
        return session_id, csrf

    async def web_session(self, session_id: str) -> WebSession | None:
        """The signed-in session of a cookie's id, or None (unknown, expired or signed out)."""
        if not session_id:
            return None
        return await self.store.web_session(hash_token(session_id))

    async def sign_out(self, session_id: str) -> None:
        """End the session on the server: its cookie never works again."""
        await self.store.delete_web_session(hash_token(session_id))

    async def login_link_code(self, user_id: str) -> str:
        """A single-use sign-in code for ``user_id``, valid ``LOGIN_LINK_SECONDS``."""
        code = secrets.token_urlsafe(32)
        await self.store.create_login_link(hash_token(code), user_id,
                                           self.clock() + LOGIN_LINK_SECONDS)
        return code

    async def redeem_login_code(self, code: str) -> User | None:
        """The account a sign-in code signs in (spent now), or None if it is not valid."""
        if not code:
            return None
        user_id = await self.store.use_login_link(hash_token(code))
        return await self.store.get_user(user_id) if user_id is not None else None
