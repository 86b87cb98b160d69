"""Slack's Socket Mode (``CLOUDYBOT_SLACK_APP_TOKEN``, ``xapp-…``): events and slash commands
arrive over a websocket the gateway opens to Slack, so it needs no public HTTPS address.

slack_sdk's aiohttp ``SocketModeClient`` holds the connection: it asks ``apps.connections.open``
for the websocket's address, answers pings, and connects anew when Slack closes the socket or
asks it to (a ``disconnect`` message). Each envelope goes through the same bolt app and
listeners as ``POST /slack/events`` and is acknowledged only once its event is committed to the
durable inbox; one that cannot be stored is not acknowledged, and Slack delivers it again (as it
does an envelope whose acknowledgement a crash cut short). A retried envelope carries the same
event, which the inbox answers once. Events are committed one at a time, in the order their
envelopes arrived (slack_sdk hands each to a task of its own), so a conversation's messages are
answered in order; slash commands, answered in their acknowledgement, do not wait for them.

With several processes on one PostgreSQL database, one of them holds the connection
(``host.play``); another takes over when it dies. Every process sends replies over the Web API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from gateway import ConfigError, Leadership, PluginHost, Unavailable

log = logging.getLogger(__name__)

ROLE = "slack-socket-mode"  # one process at a time holds the websocket
LEADER_CHECK_SECONDS = 5.0  # how often the holder checks it still holds the role
PING_SECONDS = 10.0  # slack_sdk pings this often; a silent socket is replaced after 4 missed
# apps.connections.open's errors that mean the app token itself is refused
REFUSED_APP_TOKEN_ERRORS = frozenset({"invalid_auth", "not_authed", "not_allowed_token_type",
                                      "token_revoked", "token_expired", "account_inactive",
                                      "missing_scope"})

Dispatch = Callable[[AsyncBoltRequest], Awaitable[BoltResponse]]


async def check_app_token(client: AsyncWebClient, app_token: str) -> None:
    """Ask Slack for a websocket address with the app token: a refused token is a ConfigError
    (start-up stops); Slack out of reach is only logged (the connection keeps trying)."""
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error in REFUSED_APP_TOKEN_ERRORS:
            raise ConfigError(f"CLOUDYBOT_SLACK_APP_TOKEN was refused by Slack ({error}): "
                              "an app-level token with the connections:write scope, and "
                              "Socket Mode switched on in the app's settings") from None
        log.warning("slack: apps.connections.open failed (%s); starting anyway", error)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("slack: cannot reach Slack to check the app token (%s); starting anyway",
                    type(exc).__name__)


async def close_fully(client: SocketModeClient) -> None:
    """Close the websocket and slack_sdk's own HTTP session, to the end even when the task
    closing it is cancelled meanwhile (the gateway stopping cancels the holder)."""
    async def close() -> None:
        try:
            await client.close()  # type: ignore[no-untyped-call]  # slack_sdk's, untyped
        finally:
            if not client.aiohttp_client_session.closed:
                await client.aiohttp_client_session.close()
    closing = asyncio.ensure_future(close())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        await closing
        raise


class SocketMode:
    """The Socket Mode connection, held by one process, feeding envelopes to ``dispatch``."""

    def __init__(self, host: PluginHost, app_token: str, web_client: AsyncWebClient,
                 dispatch: Dispatch) -> None:
        self.host = host
        self.app_token = app_token
        self.web_client = web_client
        self.dispatch = dispatch
        self.ping_seconds = PING_SECONDS
        self.leader_check_seconds = LEADER_CHECK_SECONDS
        self.client: SocketModeClient | None = None
        # asyncio.Lock is fair, and slack_sdk starts one task per envelope in arrival order,
        # each reaching handle() without a pause: the lock admits the events in that order.
        self._in_order = asyncio.Lock()

    async def hold(self) -> None:
        """Hold the connection as the one process that does, for as long as the gateway
        runs (cancel the task to let go)."""
        await self.host.play(ROLE, self._connected_while)

    async def _connected_while(self, leadership: Leadership) -> bool:
        """Stay connected while this process holds the role and the gateway runs; True when
        the role was lost (ask for it again)."""
        log.info("slack: this process holds the Socket Mode connection")
        client = SocketModeClient(app_token=self.app_token, web_client=self.web_client,
                                  ping_interval=self.ping_seconds, logger=log)
        client.socket_mode_request_listeners.append(self.handle)
        self.client = client
        try:
            await client.connect()  # type: ignore[no-untyped-call]
            while self.host.accepting:
                if not await leadership.alive():
                    return True
                await self.host.pause(self.leader_check_seconds)
            return False
        finally:
            self.client = None
            await close_fully(client)

    async def handle(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        """Run one envelope through bolt; acknowledge it (with a slash command's answer) only
        once it is stored, never when it could not be."""
        started = time.time()
        if not self.host.accepting:
            return  # stopping: not acknowledged, Slack delivers it again
        bolt_request = AsyncBoltRequest(mode="socket_mode", body=request.payload,
                                        headers=build_headers(request))
        try:
            if request.type == "events_api":
                async with self._in_order:
                    response = await self.dispatch(bolt_request)
            else:
                response = await self.dispatch(bolt_request)
        except Unavailable as exc:
            log.warning("slack: envelope %s not acknowledged (%s); Slack delivers it again",
                        request.envelope_id, exc)
            return
        await send_async_response(client, request, response, started)
