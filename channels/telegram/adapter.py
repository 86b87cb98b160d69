"""The Telegram channel, on python-telegram-bot.

Webhook mode when ``CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET`` is set (``POST /telegram/webhook`` on the
gateway's own server; with ``CLOUDYBOT_TELEGRAM_WEBHOOK_URL`` it also calls ``setWebhook``), long
polling otherwise. Keys: ``telegram:{chat_id}``, ``telegram:{chat_id}:{message_thread_id}`` in a
forum topic; senders are accounts ``telegram:{user_id}``.

What it does with each kind of update:

- private text: a turn. In groups, only when the bot is @mentioned, replied to, or given one of
  its commands (``CLOUDYBOT_TELEGRAM_GROUP_MODE=all`` answers every message it sees). The
  bot's own mention is removed; everything else (line breaks, indentation, code) reaches the
  model as written.
- ``/start`` ``/help`` ``/new`` ``/remember KEY VALUE`` ``/forget KEY`` ``/memory`` ``/usage``:
  commands (no LLM call). ``/other@thisbot text`` is chat about ``text``; ``/other`` without
  ``@thisbot`` is ordinary text (in a group, someone else's bot command).
- an edited message (``update.edited_message``; ``update.message`` is None): a new turn marked
  ``[edited]``, so the model knows it replaces the earlier text.
- a photo or document with a caption: a turn about ``[photo] caption``; other media (sticker,
  voice, photo without caption): a short note that only text is read, no LLM call.
- bots' messages, channel posts and service messages (joins, pins): ignored.

An update is acknowledged only once it is in the gateway's durable inbox: the webhook answers
200 after the commit, and polling asks for the next offset only after the batch before it was
committed. Replies are the model's Markdown sent as Telegram formatting (text plus entities, see
:mod:`.render`; the Markdown source as plain text if Telegram refuses them), at most 4096
UTF-16 code units a message, in the same forum topic, with "typing…" while the agent works.
Sends are paced by python-telegram-bot's ``AIORateLimiter`` to the Bot API's limits (30
messages a second, 20 a minute per group); a 429's ``retry_after`` is still honoured, by the
outbox. A group that became a supergroup is answered at its new id. A token that does not look
like one stops start-up; the bot token never reaches the logs. Every Bot API call goes through
the gateway's own HTTP client (:mod:`.request`), not python-telegram-bot's httpx.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import re
import warnings
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from typing import Any

from aiohttp import web
from telegram import Bot, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, FloodLimit, MessageLimit
from telegram.error import BadRequest as TelegramBadRequest
from telegram.error import ChatMigrated, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.error import Forbidden as TelegramForbidden
from telegram.ext import AIORateLimiter, ExtBot
from telegram.warnings import PTBDeprecationWarning

from gateway import (
    PICTURE_TYPES,
    Attachment,
    BadRequest,
    Channel,
    Command,
    ConfigError,
    DeliveryFailed,
    DeliveryRetry,
    Forbidden,
    Image,
    InboundMessage,
    Leadership,
    PluginHost,
    Unavailable,
    redact_in_logs,
)

from . import NAME, TelegramSettings, render
from .request import bot_api_requests

log = logging.getLogger(__name__)

TEXT_ONLY = ("I can only read text for now — send me your question as a message "
             "(photos and documents with a caption work too).")
ALLOWED_UPDATES = ["message", "edited_message"]
CONNECT_RETRY_SECONDS = (1, 2, 5, 10, 30, 60)
POLL_TIMEOUT_SECONDS = 30  # Telegram's long poll: getUpdates waits this long for an update
POLLING_ROLE = "telegram-polling"  # one process at a time plays it
# The Bot API's limits, (messages, per seconds), kept before sending (tests lower them).
OVERALL_RATE = (float(FloodLimit.MESSAGES_PER_SECOND), 1.0)
GROUP_RATE = (float(FloodLimit.MESSAGES_PER_MINUTE_PER_GROUP), 60.0)
TOKEN_FORMAT = re.compile(r"\d+:[A-Za-z0-9_-]+")  # what @BotFather gives: 123456:ABC-def_1
# Telegram's words when it refuses a message's formatting (BadRequest): send it plain instead.
REFUSED_FORMATTING = re.compile(r"entit|pars|url", re.IGNORECASE)


def retry_after_seconds(error: RetryAfter) -> float:
    """``retry_after`` in seconds, whether PTB gives an int or (PTB_TIMEDELTA) a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def session_key(message: Message) -> str:
    """``telegram:{chat}``, or ``telegram:{chat}:{topic}`` for a forum-topic message."""
    if message.is_topic_message and message.message_thread_id:
        return f"{NAME}:{message.chat.id}:{message.message_thread_id}"
    return f"{NAME}:{message.chat.id}"


PLAIN_MESSAGE_KEYS = frozenset({"message_id", "from", "chat", "date", "text"})


def plain_private_text(data: Mapping[str, Any]) -> InboundMessage | None:
    """The inbound message of the commonest update, a plain text in a private chat, read
    straight from its JSON; None for any other update (or anything unusual about this one):
    :meth:`TelegramChannel.to_inbound` reads those through PTB's ``Update``, whose objects
    cost more CPU than the rest of the webhook. What it gives is what ``to_inbound`` would
    (a test holds them equal): no mention, command, entity, topic, reply or media is
    possible here, so the text is the message's, trimmed.
    """
    message = data.get("message")
    if len(data) != 2 or not isinstance(message, dict) or not message.keys() <= PLAIN_MESSAGE_KEYS:
        return None
    chat, user, text = message.get("chat"), message.get("from"), message.get("text")
    if not (isinstance(chat, dict) and chat.get("type") == ChatType.PRIVATE
            and type(chat.get("id")) is int and isinstance(user, dict)
            and user.get("is_bot") is False and type(user.get("id")) is int
            and isinstance(user.get("first_name"), str) and type(message.get("date")) is int
            and 0 <= message["date"] < 2**33 and type(message.get("message_id")) is int
            and isinstance(text, str) and not text.startswith("/")):
        return None
    try:
        text.encode("utf-16-le")  # a lone surrogate: the full path refuses the update
    except UnicodeEncodeError:
        return None
    text = _trim(text)
    if not text:
        return None
    return InboundMessage(
        channel=NAME, conversation=f"{NAME}:{chat['id']}", sender=f"{NAME}:{user['id']}",
        message_id=str(data["update_id"]), text=text,
        address={"chat_id": chat["id"], "topic": None, "reply_to": None},
        max_chars=MessageLimit.MAX_TEXT_LENGTH)


def _our_mentions(message: Message, username: str) -> list[MessageEntity]:
    """The ``@username`` mention entities of the text (or caption) that name this bot."""
    wanted = f"@{username}".lower()
    entities = message.parse_entities([MessageEntity.MENTION]) if message.text \
        else message.parse_caption_entities([MessageEntity.MENTION])
    return [entity for entity, text in entities.items() if text.lower() == wanted]


def _without_mentions(text: str, mentions: Sequence[MessageEntity], start: int = 0) -> str:
    """``text[start:]`` with the given mention entities cut out (their offsets are UTF-16 code
    units into ``text``, as Telegram's), and trimmed: nothing else changes, so line breaks,
    indentation and code blocks reach the model as written. A cut after a space takes that
    space with it when a space, a line break, punctuation or the end follows: ``ask @bot now``
    is ``ask now``, ``thanks @bot!`` is ``thanks!``.
    """
    encoded = text.encode("utf-16-le")
    cursor = len(text[:start].encode("utf-16-le"))
    kept = ""
    for entity in sorted(mentions, key=lambda e: e.offset):
        begin, end = entity.offset * 2, (entity.offset + entity.length) * 2
        if begin < cursor:
            continue
        kept += encoded[cursor:begin].decode("utf-16-le")
        after = encoded[end:end + 4].decode("utf-16-le", "ignore")[:1]
        if kept.endswith(" ") and (not after or after.isspace() or after in ".,;:!?"):
            kept = kept[:-1]
        cursor = end
    return _trim(kept + encoded[cursor:].decode("utf-16-le"))


def _trim(text: str) -> str:
    """``text`` without the blank lines and spaces around it, keeping the indentation of its
    first line when a line break came before it (code pasted after a mention)."""
    text = text.rstrip()
    lead = len(text) - len(text.lstrip())
    newline = text.rfind("\n", 0, lead)
    return text[newline + 1 if newline >= 0 else lead:]


class PacedRateLimiter(AIORateLimiter):
    """python-telegram-bot's AIORateLimiter for messages; "typing…" (``sendChatAction``)
    passes without spending a group's 20 messages a minute."""

    async def process_request(
        self, callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any]
                                                | list[dict[str, Any]]]],
        args: Any, kwargs: dict[str, Any], endpoint: str, data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        if endpoint == "sendChatAction":
            return await callback(*args, **kwargs)
        return await super().process_request(callback, args, kwargs, endpoint, data,
                                             rate_limit_args)


class ChannelBot(ExtBot[int]):
    """The channel's ExtBot. Replies, drafts and edits go through :meth:`call`: PTB's own way of
    sending (defaults, the rate limiter, the request, its errors: ``RetryAfter``,
    ``ChatMigrated``, ``BadRequest``...), but the Bot API's answer is kept as JSON. A reply
    needs at most its message id, and building a ``Message`` from the answer costs more CPU
    than the HTTP exchange itself."""

    async def call(self, endpoint: str, data: dict[str, Any]) -> Any:
        """Call ``endpoint`` with ``data`` (None values are left out, as PTB's methods do);
        the result as the Bot API's JSON (a message's dict, or True)."""
        return await self._post(endpoint, data)


class TelegramChannel(Channel):
    """Telegram through python-telegram-bot, by webhook or long polling."""

    name = NAME

    def __init__(self, host: PluginHost) -> None:
        settings = host.settings.plugin(TelegramSettings)
        self.host = host
        self.token = settings.token
        self.secret = settings.webhook_secret
        self.webhook_url = settings.webhook_url
        self.group_mode = settings.group_mode
        self.api_base = settings.api_base
        self.bot: ChannelBot | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._drafts = itertools.count(1)  # draft ids: any non-zero number, animated per id
        self._polling: asyncio.Task[None] | None = None
        # Only a real token is masked in the logs: masking "x" would rewrite every log line.
        self.token_ok = TOKEN_FORMAT.fullmatch(self.token) is not None
        if self.token_ok:
            redact_in_logs(self.token)

    @property
    def uses_webhook(self) -> bool:
        """Webhook mode when a secret is configured; long polling otherwise."""
        return bool(self.secret)

    def check_token(self) -> None:
        """Raise ConfigError unless the token looks like one (no request is made)."""
        if not self.token_ok:
            raise ConfigError("CLOUDYBOT_TELEGRAM_TOKEN is not a bot token: expected digits, "
                              "a colon and letters, digits, _ or - (123456:ABC-def, from "
                              "@BotFather)")

    def routes(self) -> list[web.RouteDef]:
        """``POST /telegram/webhook`` in webhook mode.

        The token is checked here too: the server asks for routes before anything starts, so
        ``cloudybot serve`` stops with the config error alone.
        """
        self.check_token()
        return [web.post("/telegram/webhook", self.webhook)] if self.uses_webhook else []

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (getMe), then register the webhook or start polling. Idempotent.

        A malformed or rejected token stops start-up with a ConfigError; an unreachable Bot
        API does not: the channel keeps trying in the background while the rest of the gateway
        runs.
        """
        self.check_token()
        if self.bot is None:
            try:
                await self._connect()
            except NetworkError as exc:
                log.warning("telegram: cannot reach the Bot API (%s); retrying", exc)
                if self._connecting is None:
                    self._connecting = asyncio.get_running_loop().create_task(self._reconnect())
                return
        self._listen()

    async def _connect(self) -> None:
        base = self.api_base.rstrip("/")
        request, get_updates_request = bot_api_requests(base)  # the gateway's HTTP client
        bot = ChannelBot(
            self.token, base_url=base, base_file_url=base.removesuffix("/bot") + "/file/bot",
            request=request, get_updates_request=get_updates_request,
            # max_retries=0: a 429 goes to the outbox, which waits retry_after and resends.
            rate_limiter=PacedRateLimiter(
                overall_max_rate=OVERALL_RATE[0], overall_time_period=OVERALL_RATE[1],
                group_max_rate=GROUP_RATE[0], group_time_period=GROUP_RATE[1], max_retries=0))
        try:
            await bot.initialize()
        except BaseException as exc:
            await bot.shutdown()  # initialize() leaves the Bot's client open
            if isinstance(exc, InvalidToken):
                raise ConfigError("CLOUDYBOT_TELEGRAM_TOKEN was rejected by the Bot API") \
                    from None
            raise
        self.bot = bot
        if self.group_mode == "all" and not bot.can_read_all_group_messages:
            log.warning("telegram: CLOUDYBOT_TELEGRAM_GROUP_MODE=all, but @%s has privacy mode "
                        "on (see @BotFather /setprivacy): it only sees mentions, replies and "
                        "commands in groups", bot.username)
        if self.uses_webhook and self.webhook_url:
            await bot.set_webhook(self.webhook_url, secret_token=self.secret,
                                  allowed_updates=ALLOWED_UPDATES)
        log.info("telegram: %s as @%s", "webhook" if self.uses_webhook else "polling",
                 bot.username)

    async def _reconnect(self) -> None:
        for attempt in itertools.count():
            await asyncio.sleep(CONNECT_RETRY_SECONDS[min(attempt,
                                                          len(CONNECT_RETRY_SECONDS) - 1)])
            try:
                await self._connect()
            except NetworkError as exc:
                log.warning("telegram: still cannot reach the Bot API (%s)", exc)
                continue
            except Exception:
                log.exception("telegram: cannot start")
                return
            self._listen()
            return

    def _listen(self) -> None:
        if self.bot is None or self.uses_webhook or self._polling is not None:
            return
        self._polling = asyncio.get_running_loop().create_task(self._poll(self.bot))

    async def _poll(self, bot: Bot) -> None:
        """Long-poll getUpdates, as the one process that does (several processes may share a
        database): another takes over when this one dies. The offset that tells Telegram to
        forget an update is sent only after the update was committed to the inbox: a crash
        loses nothing."""
        async def poll(leadership: Leadership) -> bool:
            log.info("telegram: this process long-polls the Bot API")
            await bot.delete_webhook()  # getUpdates is refused while a webhook is set
            return await self._poll_while(bot, leadership)
        await self.host.play(POLLING_ROLE, poll)

    async def _poll_while(self, bot: Bot, leadership: Leadership) -> bool:
        """Poll while this process holds the role; False when the gateway stops."""
        offset: int | None = None
        for failures in itertools.count():
            if not await leadership.alive():
                return True
            try:
                updates = await bot.get_updates(offset=offset, timeout=POLL_TIMEOUT_SECONDS,
                                                allowed_updates=ALLOWED_UPDATES)
            except RetryAfter as exc:
                await asyncio.sleep(retry_after_seconds(exc))
                continue
            except TelegramError as exc:
                wait = CONNECT_RETRY_SECONDS[min(failures, len(CONNECT_RETRY_SECONDS) - 1)]
                log.warning("telegram: getUpdates failed (%s); again in %d s", exc, wait)
                await asyncio.sleep(wait)
                continue
            for update in updates:
                try:
                    await self._take(update, bot)
                except Unavailable:
                    return False  # stopping: Telegram keeps the update for the next start
                offset = update.update_id + 1
        return True  # not reached: the loop ends by returning

    async def stop(self) -> None:
        """Stop taking updates (polling stops; the webhook answers 503). Idempotent."""
        for task in (self._connecting, self._polling):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._connecting = self._polling = None

    async def close(self) -> None:
        """Shut the Bot API client down (after every queued reply went out)."""
        await self.stop()
        bot, self.bot = self.bot, None
        if bot is not None:
            await bot.shutdown()

    # --- inbound ------------------------------------------------------------------------------
    async def webhook(self, request: web.Request) -> web.Response:
        """Check the secret header, parse the update, commit it to the inbox, answer 200."""
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), self.secret.encode()):
            raise Forbidden("missing or wrong X-Telegram-Bot-Api-Secret-Token")
        bot = self.bot
        if bot is None or not self.host.accepting:
            raise Unavailable("the Telegram channel is not running; deliver this again later")
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(text="application/json expected")
        try:
            data = json.loads(await request.read())
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an Update")
            inbound = plain_private_text(data)
            if inbound is None:  # anything but the plainest message: PTB reads it
                inbound = self.to_inbound(Update.de_json(data, bot), bot)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            raise BadRequest("the body is not a Telegram Update", code="invalid_update") from None
        if inbound is not None:
            await self.host.receive(inbound)
        return web.json_response({"ok": True})

    async def _take(self, update: Update, bot: Bot) -> None:
        try:
            inbound = self.to_inbound(update, bot)
        except (ValueError, TypeError, KeyError, AttributeError):
            log.warning("telegram: update %s cannot be read; skipped", update.update_id)
            return
        if inbound is not None:
            await self.host.receive(inbound)

    def to_inbound(self, update: Update, bot: Bot) -> InboundMessage | None:
        """Map an Update to an inbound message, or None if it is not for us."""
        message = update.effective_message
        user = update.effective_user
        if message is None or user is None or user.is_bot or message.chat.type == ChatType.CHANNEL:
            return None
        text = message.text or message.caption or ""
        private = message.chat.type == ChatType.PRIVATE
        username = bot.username or ""
        mentions = _our_mentions(message, username) if username and text else []
        command = None
        addressed = private or bool(mentions) or self._replies_to_us(message, bot)
        start = 0  # where the text for the model begins
        if (word := re.match(r"/(\S*)", text)) is not None:
            name, _, addressee = word.group(1).partition("@")
            if addressee and addressee.lower() != username.lower():
                return None  # a command for another bot
            if name.lower() in self.host.commands:
                command, addressed = Command(name.lower(), text[word.end():].strip()), True
                start = len(text)
            elif addressee:  # /ask@thisbot why? -> chat about "why?"
                start, addressed = word.end(), True
        if not addressed and self.group_mode == "mention":
            return None
        text = _without_mentions(text, mentions, start)
        notice = None
        pictures = self._pictures(message) if command is None else ()
        if command is None:
            if pictures:  # for a vision model: named in the text, fetched for the turn
                text = f"[photo: {pictures[0].name}] {text}".strip()
            elif message.caption and (message.photo or message.document):
                text = f"[{'photo' if message.photo else 'document'}] {text}"
            if update.edited_message is not None and text:
                text = f"[edited] {text}"
            if not text:
                if message.text is not None or message.effective_attachment is None:
                    return None  # a mention alone, or a service message (a join, a pin)
                notice = TEXT_ONLY  # a sticker, a voice note, a photo without caption...
        return InboundMessage(
            channel=NAME,
            conversation=session_key(message),
            sender=f"{NAME}:{user.id}",
            message_id=str(update.update_id),
            text=text,
            address={"chat_id": message.chat.id,
                     "topic": message.message_thread_id if message.is_topic_message else None,
                     "reply_to": None if private else message.message_id},
            command=command,
            notice=notice,
            max_chars=MessageLimit.MAX_TEXT_LENGTH,
            attachments=pictures,
        )

    def _pictures(self, message: Message) -> tuple[Attachment, ...]:
        """The message's picture, when a vision model reads pictures: a photo (its largest
        size) or an image sent as a document."""
        if not self.host.settings.llm_vision:
            return ()
        if message.photo:
            largest = message.photo[-1]
            return (Attachment("image", f"photo-{largest.file_unique_id}.jpg",
                               {"file_id": largest.file_id, "mime": "image/jpeg"}),)
        document = message.document
        if document is not None and document.mime_type in PICTURE_TYPES:
            return (Attachment("image", document.file_name or "image",
                               {"file_id": document.file_id, "mime": document.mime_type}),)
        return ()

    async def fetch(self, attachment: Attachment, max_bytes: int) -> Image | None:
        """getFile, then download it from the Bot API's file URL; None over ``max_bytes``."""
        file_id, mime = attachment.ref.get("file_id"), attachment.ref.get("mime")
        if not isinstance(file_id, str) or mime not in PICTURE_TYPES:
            return None
        file = await self._running_bot().get_file(file_id)
        if file.file_size is not None and file.file_size > max_bytes:
            return None
        data = bytes(await file.download_as_bytearray())
        return Image(str(mime), data, attachment.name) if len(data) <= max_bytes else None

    @staticmethod
    def _replies_to_us(message: Message, bot: Bot) -> bool:
        replied = message.reply_to_message
        return (replied is not None and replied.from_user is not None
                and replied.from_user.id == bot.id)

    # --- outbound -----------------------------------------------------------------------------
    def _running_bot(self) -> ChannelBot:
        if self.bot is None:
            raise ConnectionError("the Telegram channel is not connected yet")
        return self.bot

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """Send one chunk of the model's Markdown as formatted messages (usually one) to the
        chat (and topic), quoting the message in a group.

        If Telegram refuses the formatting of the first message, the chunk goes out as plain
        text, its Markdown source; of a later one (a chunk too long once rendered), the rest
        goes out as its text without formatting.
        """
        bot = self._running_bot()
        chat_id = address["chat_id"]
        parts = render.formatted(text) or render.plain(text) or [render.Part(text)]
        preview = address.get("preview")
        if isinstance(preview, dict) and isinstance(preview.get("message"), int) \
                and await self._finish_preview(bot, address, preview["message"], parts[0]):
            parts = parts[1:]
        try:
            for index, part in enumerate(parts):
                try:
                    chat_id = await self._send_part(bot, address, chat_id, part)
                except TelegramBadRequest as exc:
                    if not part.entities or not REFUSED_FORMATTING.search(str(exc)):
                        raise
                    log.warning("telegram: formatting refused (%s); sent as plain text", exc)
                    rest = render.plain(text) if index == 0 else \
                        [render.Part(p.text) for p in parts[index:]]
                    for plain in rest:
                        chat_id = await self._send_part(bot, address, chat_id, plain)
                    return
        except RetryAfter as exc:
            raise DeliveryRetry(retry_after_seconds(exc)) from exc
        except (TelegramForbidden, TelegramBadRequest) as exc:
            raise DeliveryFailed(str(exc)) from exc
        # any other TelegramError (network trouble) is retried by the outbox with backoff

    async def _finish_preview(self, bot: ChannelBot, address: Mapping[str, Any],
                              message_id: int, part: render.Part) -> bool:
        """Turn the message shown while the model wrote into the reply's first part; False
        when that cannot be done (the preview is gone), so the part is sent anew."""
        try:
            await _edit(bot, address["chat_id"], message_id, part)
        except RetryAfter as exc:
            raise DeliveryRetry(retry_after_seconds(exc)) from exc
        except TelegramBadRequest as exc:
            if "not modified" in str(exc):
                return True  # the preview already shows exactly this
            if part.entities and REFUSED_FORMATTING.search(str(exc)):
                return await self._finish_preview(bot, address, message_id,
                                                  render.Part(part.text))
            log.info("telegram: cannot finish the preview %s (%s); sending", message_id, exc)
            return False
        return True

    async def stream(self, address: Mapping[str, Any], text: str, handle: Any) -> Any:
        """The reply growing as the model writes: in a private chat a message draft (Telegram
        animates it; the reply then persists it), in a group one message sent, then edited."""
        bot = self._running_bot()
        parts = render.formatted(text) or render.plain(text)
        if not parts:
            return handle
        part = parts[0]  # what the reply's first message will hold
        chat_id = address["chat_id"]
        if isinstance(chat_id, int) and chat_id > 0:  # a private chat (a user's id)
            draft = handle["draft"] if isinstance(handle, dict) else next(self._drafts)
            await bot.call("sendMessageDraft", {
                "chat_id": chat_id, "draft_id": draft, "text": part.text,
                "message_thread_id": address.get("topic"), "entities": part.entities or None})
            return {"draft": draft}
        if isinstance(handle, dict) and isinstance(handle.get("message"), int):
            await _edit(bot, chat_id, handle["message"], part)
            return handle
        sent = await _send(bot, chat_id, part, address.get("topic"), address.get("reply_to"))
        return {"message": sent["message_id"]}

    @staticmethod
    async def _send_part(bot: ChannelBot, address: Mapping[str, Any], chat_id: int | str,
                         part: render.Part) -> int | str:
        """sendMessage; return the chat it went to (a migrated group's new id)."""
        same_chat = chat_id == address["chat_id"]  # not a supergroup the group became
        try:
            await _send(bot, chat_id, part, address.get("topic") if same_chat else None,
                        address.get("reply_to") if same_chat else None)
        except ChatMigrated as exc:  # the group became a supergroup: answer it there
            await _send(bot, exc.new_chat_id, part)
            return exc.new_chat_id
        return chat_id

    async def typing(self, address: Mapping[str, Any]) -> None:
        """sendChatAction typing, in the topic."""
        await self._running_bot().send_chat_action(address["chat_id"], ChatAction.TYPING,
                                                   message_thread_id=address.get("topic"))


async def _send(bot: ChannelBot, chat_id: int | str, part: render.Part, topic: int | None = None,
                quote: int | None = None) -> Any:
    """sendMessage of one part (in a topic, quoting a message); the sent message's JSON."""
    return await bot.call("sendMessage", {
        "chat_id": chat_id, "text": part.text, "entities": part.entities or None,
        "message_thread_id": topic,
        "reply_parameters": ReplyParameters(quote, allow_sending_without_reply=True)
        if quote else None})


async def _edit(bot: ChannelBot, chat_id: int | str, message_id: int, part: render.Part) -> None:
    """editMessageText: the message now holds ``part``."""
    await bot.call("editMessageText", {"chat_id": chat_id, "message_id": message_id,
                                       "text": part.text, "entities": part.entities or None})
