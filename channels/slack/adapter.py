"""The Slack channel, on slack-bolt (async): the Events API behind the gateway's own aiohttp
server, or Socket Mode (:mod:`channels.slack.socket_mode`, with an app token), or both.

``POST /slack/events``, served when ``CLOUDYBOT_SLACK_SIGNING_SECRET`` is set, is verified
(signature v0 with that secret, timestamps older than 5 minutes refused: 401) before anything
is parsed, by this module alone (bolt's own check is off, so there is one check and its tests
test it); then bolt answers ``url_verification`` and runs the listeners before it acks
(``process_before_response``), over HTTP and Socket Mode alike: an event is acknowledged only
once it is committed to the gateway's durable inbox, which takes milliseconds, well within
Slack's 3 seconds.

- ``message.im``: a DM turn, key ``slack:{team}:{channel}``.
- ``app_mention``: a turn in the mention's thread, key ``slack:{team}:{channel}:{thread_ts}``
  (the mention's own ``ts`` when it starts a thread); the reply goes into that thread. Later
  messages in the thread continue the conversation without a mention.
- A message is answered once, however often it arrives: a mention comes both as
  ``app_mention`` and as a ``message`` event, and Slack retries deliveries
  (``X-Slack-Retry-Num``); both are de-duplicated by ``channel:ts``, durably.
- Edits, joins and other message subtypes, and bots' messages (ours included), are ignored.
- Text (:mod:`channels.slack.mrkdwn`): the model gets what the user typed (the bot's mention
  removed, Slack's markup made readable, entities decoded, line breaks kept); replies are the
  model's Markdown as escaped mrkdwn, so no reply can ping ``@channel`` or mention anyone, and
  links are not previewed.
- ``/cloudybot new|remember KEY VALUE|forget KEY|memory|usage``: commands, answered at once
  and privately in the command's acknowledgement. In a DM they act on the DM's conversation;
  in a channel (whose conversations are threads a slash command cannot name) only ``usage``
  and ``help`` do, the others say to use a DM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from gateway import (
    PICTURE_TYPES,
    Attachment,
    BadRequest,
    Channel,
    Command,
    ConfigError,
    DeliveryFailed,
    DeliveryRetry,
    Image,
    InboundMessage,
    NotFound,
    PluginHost,
    Unauthorized,
    Unavailable,
    redact_in_logs,
    split_text,
)

from . import NAME, SlackSettings
from .mrkdwn import escape, from_slack, to_mrkdwn
from .socket_mode import SocketMode, check_app_token

log = logging.getLogger(__name__)

MAX_CHARS = 3900  # Slack truncates message text past 40,000; keep replies readable
# message subtypes that still carry a user's words; every other subtype (edits, joins...) is not
ANSWERED_SUBTYPES: frozenset[str] = frozenset({"file_share", "thread_broadcast"})
# A slash command that acts on a conversation (per_conversation) cannot in a channel: there
# the conversations are threads, which a slash command cannot name.
IN_A_CHANNEL = ("In a channel my memory is per thread: mention me in a thread to talk there. "
                "Use /cloudybot {name} in a DM with me; /cloudybot help lists what works "
                "anywhere.")
COMMAND_ACK_SECONDS = 2.0  # Slack wants the ack within 3 s
HTTP_SECONDS = 30  # per Web API call or download, as slack_sdk's own default
# Posted replies: no link or media previews (see send), no name linking.
UNLINKED: dict[str, Any] = {"unfurl_links": False, "unfurl_media": False, "link_names": False}
# auth.test's errors that mean the token itself is refused (not a passing failure).
REFUSED_TOKEN_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive",
                                  "token_revoked", "token_expired", "no_permission"})
TOKEN_FORMAT = re.compile(r"xox[bp]-[A-Za-z0-9-]{8,}")
APP_TOKEN_FORMAT = re.compile(r"xapp-[A-Za-z0-9-]{8,}")
FILE_HOST = "files.slack.com"
MAX_PICTURES = 4  # per message
NOT_STORED = "cloudybot_not_stored"  # context flag: the event could not enter the inbox
WORKING_ON_IT = "Working on it: I'll confirm here in a moment."
# ok:false errors worth another try; every other one (missing_scope, channel_not_found...)
# would fail the same way again
TEMPORARY_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error",
                              "service_unavailable", "request_timeout"})


def _pictures(event: dict[str, Any]) -> tuple[Attachment, ...]:
    """The pictures shared with a message (``files`` of a ``file_share``), at most a few."""
    files = event.get("files")
    if not isinstance(files, list):
        return ()
    pictures = []
    for item in files:
        if not isinstance(item, dict) or item.get("mimetype") not in PICTURE_TYPES:
            continue
        url = item.get("url_private_download") or item.get("url_private")
        if isinstance(url, str):
            name = str(item.get("name") or "image")[:100]
            pictures.append(Attachment("image", name, {"url": url, "mime": item["mimetype"]}))
    return tuple(pictures[:MAX_PICTURES])


class SlackChannel(Channel):
    """Slack through slack-bolt's AsyncApp, served on ``POST /slack/events`` and/or over a
    Socket Mode connection."""

    name = NAME

    def __init__(self, host: PluginHost) -> None:
        settings = host.settings.plugin(SlackSettings)
        self.host = host
        self.bolt: AsyncApp | None = None
        self.verifier: SignatureVerifier | None = None
        self.socket: SocketMode | None = None
        self._holding: asyncio.Task[None] | None = None
        self.command_ack_seconds = COMMAND_ACK_SECONDS
        self._token = settings.bot_token
        self._app_token = settings.app_token
        for token, form in ((self._token, TOKEN_FORMAT), (self._app_token, APP_TOKEN_FORMAT)):
            if form.fullmatch(token):  # only a real token: masking "x" mangles logs
                redact_in_logs(token)
        if len(settings.signing_secret) >= 16:  # Slack's are 32 hex digits
            redact_in_logs(settings.signing_secret)
        # Pictures are downloaded only from Slack's file host (or the configured API's host).
        self._file_hosts = {FILE_HOST, urlparse(settings.api_base).hostname or ""}
        # One HTTP session, its connections kept alive, for the Web API and picture downloads:
        # without it slack_sdk opens a session, and a connection, per call.
        self._http: aiohttp.ClientSession | None = None
        if settings.bot_token:
            if settings.signing_secret:
                self.verifier = SignatureVerifier(settings.signing_secret)
            client = AsyncWebClient(token=settings.bot_token,
                                    base_url=settings.api_base)
            client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
            # One signature check, ours, in events(): before the body is parsed or anything
            # stored. Bolt's own would only repeat it, and hide ours from every test.
            self.bolt = AsyncApp(client=client, request_verification_enabled=False,
                                 process_before_response=True)
            self.bolt.event("message")(self._on_message)
            self.bolt.event("app_mention")(self._on_mention)
            self.bolt.command("/cloudybot")(self._on_command)
            self.bolt.error(self._on_error)
            if settings.app_token:
                self.socket = SocketMode(host, settings.app_token, client, self.dispatch)

    @property
    def enabled(self) -> bool:
        """On when a bot token is configured."""
        return self.bolt is not None

    def check_token(self) -> None:
        """Raise ConfigError unless the bot token (and the app token, when set) look like
        Slack's (no request is made)."""
        if self.enabled and not TOKEN_FORMAT.fullmatch(self._token):
            raise ConfigError("CLOUDYBOT_SLACK_BOT_TOKEN is not a Slack bot token: expected "
                              "xoxb- followed by letters, digits and dashes")
        if self._app_token and not APP_TOKEN_FORMAT.fullmatch(self._app_token):
            raise ConfigError("CLOUDYBOT_SLACK_APP_TOKEN is not a Slack app-level token: "
                              "expected xapp- followed by letters, digits and dashes (Basic "
                              "Information, App-Level Tokens)")

    def routes(self) -> list[web.RouteDef]:
        """``POST /slack/events`` when a signing secret is set (a malformed token is a
        ConfigError here, before the server starts)."""
        self.check_token()
        return [web.post("/slack/events", self.events)] if self.verifier is not None else []

    async def events(self, request: web.Request) -> web.Response:
        """Verify the signature before parsing anything, then let bolt ack and dispatch."""
        assert self.bolt is not None and self.verifier is not None
        raw = await request.read()
        try:
            verified = self.verifier.is_valid_request(raw, dict(request.headers))
        except (ValueError, TypeError):  # a timestamp that is not a number, a non-ASCII digest
            verified = False
        if not verified:
            raise Unauthorized("invalid or stale Slack signature")
        if not self.host.accepting:
            raise Unavailable("the gateway is shutting down; Slack will retry")
        try:
            text = raw.decode("utf-8")
            if text.lstrip().startswith(("{", "[")):
                payload = json.loads(text)
                if not isinstance(payload, dict) or not isinstance(payload.get("event", {}),
                                                                   dict):
                    raise ValueError("a JSON payload must be an object, its event too")
            bolt_request = AsyncBoltRequest(body=text, query=request.query_string,
                                            headers=dict(request.headers))
        except (ValueError, RecursionError, AttributeError, TypeError):
            raise BadRequest("the body is not a Slack payload", code="invalid_body") from None
        response = await self.dispatch(bolt_request)
        if response.status == 404:  # bolt has no listener for it
            raise NotFound("no handler for this Slack request", code="unhandled_request")
        return await to_aiohttp_response(response)

    async def dispatch(self, request: AsyncBoltRequest) -> BoltResponse:
        """Let bolt run the listeners and answer (over HTTP or Socket Mode alike).

        :raises Unavailable: the event could not be stored: do not acknowledge it, Slack
            delivers it again.
        """
        assert self.bolt is not None
        response = await self.bolt.async_dispatch(request)
        if request.context.get(NOT_STORED):
            raise Unavailable("the event cannot be stored right now; Slack will retry")
        if response.status == 404 and request.body.get("type") == "event_callback":
            # An event type nobody here listens to: acknowledged, or Slack would retry it and
            # in the end turn the subscription off.
            return BoltResponse(status=200, body="")
        return response

    async def _on_error(self, error: Exception, body: dict[str, Any]) -> None:
        log.error("slack: a listener failed: %s: %s", type(error).__name__, error)

    # --- listeners: each commits its event to the inbox before bolt acks it -----------------
    async def _on_message(self, event: dict[str, Any], body: dict[str, Any],
                          context: AsyncBoltContext) -> None:
        if event.get("subtype") not in (None, *ANSWERED_SUBTYPES) or event.get("bot_id"):
            return
        channel_type = event.get("channel_type")
        if channel_type == "im":  # one conversation per DM; a reply in a DM thread stays there
            await self._submit(event, body, context, thread_ts=None, only_known=False,
                               reply_ts=event.get("thread_ts"))
        elif event.get("thread_ts"):
            # A follow-up in a thread continues a conversation the bot is already in.
            await self._submit(event, body, context, thread_ts=event["thread_ts"],
                               only_known=True)

    async def _on_mention(self, event: dict[str, Any], body: dict[str, Any],
                          context: AsyncBoltContext) -> None:
        if event.get("bot_id"):
            return
        if event.get("channel_type") == "im" or str(event.get("channel", "")).startswith("D"):
            # A mention in a DM is the DM's conversation: the same message also arrives as
            # message.im, and both must be one turn (same id, same conversation).
            await self._submit(event, body, context, thread_ts=None, only_known=False,
                               reply_ts=event.get("thread_ts"))
            return
        await self._submit(event, body, context,
                           thread_ts=event.get("thread_ts") or event.get("ts"), only_known=False)

    async def _on_command(self, ack: AsyncAck, command: dict[str, Any],
                          context: AsyncBoltContext) -> None:
        """Commands touch no LLM: run at once and answer in the ack (seen only by the user,
        also where the bot is not a member). One that waits behind a running turn (``new``
        takes the thread's lock) is acked with a note and confirmed privately when done."""
        team, channel, user = (command.get("team_id"), command.get("channel_id"),
                               command.get("user_id"))
        if not (team and channel and user):
            await ack()
            return
        name, _, argument = from_slack(command.get("text") or "").partition(" ")
        name = name.lower() or "help"
        found = self.host.commands.get(name)
        if not channel.startswith("D") and found is not None and found.per_conversation:
            await ack(IN_A_CHANNEL.format(name=name))
            return

        task = self.host.spawn(self.host.answer_now(InboundMessage(
            channel=NAME, conversation=f"{NAME}:{team}:{channel}", sender=f"{NAME}:{team}:{user}",
            message_id=f"command:{command.get('trigger_id') or uuid.uuid4()}", text="",
            command=Command(name, argument.strip()), max_chars=MAX_CHARS)))
        try:
            answer = await asyncio.wait_for(asyncio.shield(task), self.command_ack_seconds)
        except TimeoutError:
            await ack(WORKING_ON_IT)
            client = context.client
            assert client is not None
            self.host.spawn(self._confirm_later(task, client, channel, user))
            return
        if answer:
            await ack(escape(answer))  # plain text, shown as mrkdwn: user text in it stays text
        else:
            await ack()

    async def _confirm_later(self, task: asyncio.Task[str | None], client: AsyncWebClient,
                             channel: str, user: str) -> None:
        answer = await task
        if answer:
            try:
                await self._post(client.chat_postEphemeral, channel=channel, user=user,
                                 text=escape(answer))
            except Exception as exc:
                log.warning("slack: cannot confirm a slash command to %s: %s", user, exc)

    async def _submit(self, event: dict[str, Any], body: dict[str, Any],
                      context: AsyncBoltContext, thread_ts: str | None, only_known: bool,
                      reply_ts: str | None = None) -> None:
        team = body.get("team_id") or event.get("team")
        # A Slack Connect user belongs to their own workspace: that names their account.
        user_team = event.get("user_team") or event.get("team") or team
        channel, user, ts = event.get("channel"), event.get("user"), event.get("ts")
        if not (team and channel and user and ts):
            return
        text = from_slack(event.get("text") or "", context.bot_user_id)
        pictures = _pictures(event) if self.host.settings.llm_vision else ()
        if pictures:  # the transcript names them; the model sees them
            text = " ".join([*(f"[image: {p.name}]" for p in pictures), text]).strip()
        if not text:
            return
        conversation = f"{NAME}:{team}:{channel}" + (f":{thread_ts}" if thread_ts else "")
        try:
            await self.host.receive(InboundMessage(
                channel=NAME, conversation=conversation, sender=f"{NAME}:{user_team}:{user}",
                message_id=f"{channel}:{ts}", text=text,
                address={"channel": channel, "thread_ts": thread_ts or reply_ts},
                only_known=only_known, max_chars=MAX_CHARS, attachments=pictures))
        except Unavailable:
            context[NOT_STORED] = True  # events() answers 503: Slack delivers it again

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """chat.postMessage of one chunk of the model's Markdown, as escaped mrkdwn, into the DM
        or the thread — or chat.update of the preview shown while the model wrote. No link
        previews: Slack would fetch every URL in the reply at once, so a link a prompt
        injection put there (data in its query string) would leak unclicked."""
        if self.bolt is None:
            raise DeliveryFailed("the Slack channel is not configured")
        mrkdwn = to_mrkdwn(text)
        if not mrkdwn:
            return  # nothing visible (a chunk of whitespace): Slack would refuse "no_text"
        preview = address.get("preview")
        if isinstance(preview, str):
            try:
                await self._post(self.bolt.client.chat_update, channel=address["channel"],
                                 ts=preview, text=mrkdwn)
                return
            except DeliveryFailed as exc:  # the preview was deleted: post the reply anew
                log.info("slack: cannot update the preview %s (%s); posting", preview, exc)
        await self._post(self.bolt.client.chat_postMessage, channel=address["channel"],
                         text=mrkdwn, thread_ts=address.get("thread_ts"), **UNLINKED)

    async def start(self) -> None:
        """Open the HTTP session the Web API calls and picture downloads share; check the
        tokens, with Slack too (``auth.test``, ``apps.connections.open``: a refused token
        stops start-up); then hold the Socket Mode connection, when configured, in the one
        process that does. Idempotent."""
        self.check_token()
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_SECONDS))
        if self.bolt is not None and self._holding is None:
            self.bolt.client.session = self._http
            await self._check_with_slack(self.bolt.client)
            if self.socket is not None:
                await check_app_token(self.bolt.client, self._app_token)
                self._holding = asyncio.get_running_loop().create_task(self.socket.hold())

    async def stop(self) -> None:
        """Let go of the Socket Mode connection (replies still go out over the Web API)."""
        holding, self._holding = self._holding, None
        if holding is not None:
            holding.cancel()
            await asyncio.gather(holding, return_exceptions=True)

    @staticmethod
    async def _check_with_slack(client: AsyncWebClient) -> None:
        """``auth.test``: a token Slack refuses is a ConfigError; Slack out of reach is only
        logged (events wait until it is back, as with any outage)."""
        try:
            answer = await client.auth_test()
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            if error in REFUSED_TOKEN_ERRORS:
                raise ConfigError(f"CLOUDYBOT_SLACK_BOT_TOKEN was refused by Slack ({error})") \
                    from None
            log.warning("slack: auth.test failed (%s); starting anyway", error)
            return
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("slack: cannot reach Slack to check the token (%s); starting anyway",
                        type(exc).__name__)
            return
        log.info("slack: connected as %s in %s", answer.get("user"), answer.get("team"))

    async def close(self) -> None:
        """Close the Socket Mode connection and the HTTP session."""
        await self.stop()
        http, self._http = self._http, None
        if self.bolt is not None:
            self.bolt.client.session = None
        if http is not None:
            await http.close()

    async def fetch(self, attachment: Attachment, max_bytes: int) -> Image | None:
        """Download a picture from Slack's file host with the bot token; None when it is
        larger than ``max_bytes``, not a picture, or not on Slack's host."""
        url, mime = attachment.ref.get("url"), attachment.ref.get("mime")
        if self._http is None or not isinstance(url, str) or mime not in PICTURE_TYPES \
                or urlparse(url).hostname not in self._file_hosts:
            return None
        async with self._http.get(url, headers={"Authorization": f"Bearer {self._token}"},
                                       allow_redirects=False) as response:
            if response.status != 200 or (response.content_length or 0) > max_bytes:
                return None
            data = await response.content.read(max_bytes + 1)
        return Image(str(mime), data, attachment.name) if len(data) <= max_bytes else None

    async def stream(self, address: Mapping[str, Any], text: str, handle: Any) -> Any:
        """The reply growing as the model writes: posted once (its ``ts`` is the handle), then
        updated with chat.update. It shows what the first message of the reply will hold."""
        if self.bolt is None:
            return handle
        mrkdwn = to_mrkdwn(split_text(text, MAX_CHARS)[0])
        if not mrkdwn:
            return handle
        client = self.bolt.client
        if handle is None:
            answer = await client.chat_postMessage(
                channel=address["channel"], text=mrkdwn, thread_ts=address.get("thread_ts"),
                **UNLINKED)
            return answer.get("ts")
        await client.chat_update(channel=address["channel"], ts=handle, text=mrkdwn)
        return handle

    @staticmethod
    async def _post(method: Any, **kwargs: Any) -> None:
        try:
            await method(**{k: v for k, v in kwargs.items() if v is not None})
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            if exc.response is not None and exc.response.status_code == 429:
                raise DeliveryRetry(float(exc.response.headers.get("Retry-After", 1))) from exc
            status = exc.response.status_code if exc.response is not None else 0
            if error not in TEMPORARY_ERRORS and status < 500:
                raise DeliveryFailed(str(error)) from exc
            raise
