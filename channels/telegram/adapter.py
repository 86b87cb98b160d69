"""The Telegram channel, on python-telegram-bot.

Webhook mode when ``CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET`` is set (``POST /telegram/webhook`` on the
gateway's own server; with ``CLOUDYBOT_TELEGRAM_WEBHOOK_URL`` it also calls ``setWebhook``), long
polling otherwise. Keys: ``telegram:{chat_id}``, ``telegram:{chat_id}:{message_thread_id}`` in a
forum topic; senders are accounts ``telegram:{user_id}``.

What it does with each kind of update:

- private text: a turn. In groups, only when the bot is @mentioned, replied to, or given one of
  its commands (``CLOUDYBOT_TELEGRAM_GROUP_MODE=all`` answers every message it sees); the
  mention is removed.
- ``/start`` ``/help`` ``/new`` ``/remember KEY VALUE`` ``/forget KEY`` ``/memory`` ``/usage``:
  commands (no LLM call). ``/other@thisbot text`` is chat about ``text``; ``/other`` without
  ``@thisbot`` is ordinary text (in a group, someone else's bot command).
- an edited message (``update.edited_message``; ``update.message`` is None): a new turn marked
  ``[edited]``, so the model knows it replaces the earlier text.
- a photo or document with a caption: a turn about ``[photo] caption``; other media (sticker,
  voice, photo without caption): a short note that only text is read, no LLM call.
- bots' messages, channel posts and service messages (joins, pins): ignored.

Replies are plain text (never a parse error on user text), split under 4096 characters, sent in
the same forum topic, with "typing…" while the agent works. A 429's ``retry_after`` is honoured;
a group that became a supergroup is answered at its new id. The bot token never reaches the
logs.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import logging
import warnings
from datetime import timedelta
from typing import Any

from aiohttp import web
from telegram import Bot, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, MessageLimit
from telegram.error import BadRequest as TelegramBadRequest
from telegram.error import ChatMigrated, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.error import Forbidden as TelegramForbidden
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.warnings import PTBDeprecationWarning

from gateway import Channel, Gateway
from gateway.errors import BadRequest, ConfigError, Forbidden, Unavailable
from gateway.inbound import Command, DeliveryFailed, DeliveryRetry, InboundMessage
from gateway.logs import redact_in_logs

from . import NAME

log = logging.getLogger(__name__)

COMMANDS = frozenset({"start", "help", "new", "remember", "forget", "memory", "usage"})
TEXT_ONLY = ("I can only read text for now — send me your question as a message "
             "(photos and documents with a caption work too).")
ALLOWED_UPDATES = ["message", "edited_message"]
CONNECT_RETRY_SECONDS = (1, 2, 5, 10, 30, 60)


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


def _our_mentions(message: Message, username: str) -> list[MessageEntity]:
    """The ``@username`` mention entities of the text (or caption) that name this bot."""
    wanted = f"@{username}".lower()
    entities = message.parse_entities([MessageEntity.MENTION]) if message.text \
        else message.parse_caption_entities([MessageEntity.MENTION])
    return [entity for entity, text in entities.items() if text.lower() == wanted]


def _without_mentions(text: str, mentions: list[MessageEntity]) -> str:
    """``text`` with the given mention entities cut out (offsets are UTF-16, as Telegram's)."""
    encoded = text.encode("utf-16-le")
    for entity in sorted(mentions, key=lambda e: e.offset, reverse=True):
        start, end = entity.offset * 2, (entity.offset + entity.length) * 2
        encoded = encoded[:start] + encoded[end:]
    return " ".join(encoded.decode("utf-16-le").split())


class TelegramChannel(Channel):
    """Telegram through python-telegram-bot, by webhook or long polling."""

    name = NAME

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings
        self.gateway = gateway
        self.token = settings.telegram_token
        self.secret = settings.telegram_webhook_secret
        self.webhook_url = settings.telegram_webhook_url
        self.group_mode = settings.telegram_group_mode
        self.api_base = settings.telegram_api_base
        self.application: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._connecting: asyncio.Task[None] | None = None
        redact_in_logs(self.token)

    @property
    def uses_webhook(self) -> bool:
        """Webhook mode when a secret is configured; long polling otherwise."""
        return bool(self.secret)

    def routes(self) -> list[web.RouteDef]:
        """``POST /telegram/webhook`` in webhook mode."""
        return [web.post("/telegram/webhook", self.webhook)] if self.uses_webhook else []

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (getMe), then register the webhook or start polling. Idempotent.

        A rejected token stops start-up with a ConfigError; an unreachable Bot API does not: the
        channel keeps trying in the background while the rest of the gateway runs.
        """
        if self.application is None:
            try:
                await self._connect()
            except NetworkError as exc:
                log.warning("telegram: cannot reach the Bot API (%s); retrying", exc)
                if self._connecting is None:
                    self._connecting = asyncio.get_running_loop().create_task(self._reconnect())
                return
        await self._listen()

    async def _connect(self) -> None:
        base = self.api_base.rstrip("/")
        builder = (ApplicationBuilder().token(self.token).base_url(base)
                   .base_file_url(base.removesuffix("/bot") + "/file/bot"))
        if self.uses_webhook:
            builder = builder.updater(None)
        application = builder.build()
        application.add_handler(TypeHandler(Update, self._on_update))
        application.add_error_handler(self._on_error)
        try:
            await application.initialize()
        except BaseException as exc:
            await application.bot.shutdown()  # initialize() leaves the Bot's client open
            if isinstance(exc, InvalidToken):
                raise ConfigError("CLOUDYBOT_TELEGRAM_TOKEN was rejected by the Bot API") \
                    from None
            raise
        self.application = application
        bot = application.bot
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
            await self._listen()
            return

    async def _listen(self) -> None:
        application = self.application
        if application is None or self.uses_webhook:
            return
        assert application.updater is not None
        if not application.updater.running:
            await application.updater.start_polling(allowed_updates=ALLOWED_UPDATES)
        if not application.running:
            await application.start()

    async def stop(self) -> None:
        """Stop taking updates (polling stops; the webhook answers 503). Idempotent."""
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
            self._connecting = None
        application = self.application
        if application is not None and application.updater is not None \
                and application.updater.running:
            await application.updater.stop()

    async def close(self) -> None:
        """Shut the Bot API client down (after every queued reply went out)."""
        await self.stop()
        application, self.application = self.application, None
        if application is None:
            return
        if application.running:
            await application.stop()
        await application.shutdown()

    # --- inbound ------------------------------------------------------------------------------
    async def webhook(self, request: web.Request) -> web.Response:
        """Check the secret header, parse the update, hand it over, answer 200 at once."""
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            raise Forbidden("missing or wrong X-Telegram-Bot-Api-Secret-Token")
        if self.application is None or not self.gateway.accepting:
            raise Unavailable("the Telegram channel is not running; deliver this again later")
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(text="application/json expected")
        try:
            data = json.loads(await request.read())
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an Update")
            update = Update.de_json(data, self.application.bot)
            inbound = self.to_inbound(update, self.application.bot)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            raise BadRequest("the body is not a Telegram Update", code="invalid_update") from None
        if inbound is not None:
            self.gateway.receive(inbound)
        return web.json_response({"ok": True})

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        inbound = self.to_inbound(update, context.bot)
        if inbound is not None:
            self.gateway.receive(inbound)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram: error while handling an update: %s", context.error,
                  exc_info=context.error)

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
        if text.startswith("/"):
            word, _, rest = text[1:].partition(" ")
            name, _, addressee = word.partition("@")
            if addressee and addressee.lower() != username.lower():
                return None  # a command for another bot
            if name.lower() in COMMANDS:
                command, text, addressed = Command(name.lower(), rest.strip()), "", True
            elif addressee:  # /ask@thisbot why? -> chat about "why?"
                text, addressed = rest, True
        if not addressed and self.group_mode == "mention":
            return None
        text = _without_mentions(text, mentions) if mentions else text.strip()
        notice = None
        if command is None:
            if message.caption and (message.photo or message.document):
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
            reply=self._replier(bot, message, private),
            typing=self._typist(bot, message),
            command=command,
            notice=notice,
            max_chars=MessageLimit.MAX_TEXT_LENGTH,
        )

    @staticmethod
    def _replies_to_us(message: Message, bot: Bot) -> bool:
        replied = message.reply_to_message
        return (replied is not None and replied.from_user is not None
                and replied.from_user.id == bot.id)

    # --- outbound -----------------------------------------------------------------------------
    @staticmethod
    def _topic(message: Message) -> int | None:
        return message.message_thread_id if message.is_topic_message else None

    def _replier(self, bot: Bot, message: Message, private: bool) -> Any:
        chat_id, topic = message.chat.id, self._topic(message)
        quote = None if private else ReplyParameters(message.message_id,
                                                     allow_sending_without_reply=True)

        async def reply(text: str) -> None:
            try:
                await bot.send_message(chat_id, text, message_thread_id=topic,
                                       reply_parameters=quote)
            except ChatMigrated as exc:  # the group became a supergroup: answer it there
                await bot.send_message(exc.new_chat_id, text)
            except RetryAfter as exc:
                raise DeliveryRetry(retry_after_seconds(exc)) from exc
            except (TelegramForbidden, TelegramBadRequest) as exc:
                raise DeliveryFailed(str(exc)) from exc
            except TelegramError:
                raise  # network trouble: the kit retries with backoff

        return reply

    def _typist(self, bot: Bot, message: Message) -> Any:
        chat_id, topic = message.chat.id, self._topic(message)

        async def typing() -> None:
            await bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=topic)

        return typing
