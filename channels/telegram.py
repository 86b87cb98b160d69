"""The Telegram channel, on python-telegram-bot.

Webhook mode when ``CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET`` is set (``POST /telegram/webhook`` on the
gateway's own server; with ``CLOUDYBOT_TELEGRAM_WEBHOOK_URL`` it also calls ``setWebhook``), long
polling otherwise. Keys: ``telegram:{chat_id}``, ``telegram:{chat_id}:{message_thread_id}`` in a
forum topic; senders are accounts ``telegram:{user_id}``.

What it does with each kind of update:

- private text: a turn. In groups, only when the bot is @mentioned, replied to, or commanded
  (``CLOUDYBOT_TELEGRAM_GROUP_MODE=all`` answers every message it sees); the mention is removed.
- ``/start`` ``/help`` ``/new`` ``/remember KEY VALUE`` ``/forget KEY`` ``/memory`` ``/usage``:
  commands (no LLM call). Any other ``/command text`` is chat about ``text``.
- an edited message (``update.edited_message``; ``update.message`` is None): a new turn marked
  ``[edited]``, so the model knows it replaces the earlier text.
- a photo or document with a caption: a turn about ``[photo] caption``; any other non-text
  message (sticker, voice, photo without caption): a short note that only text is read, no LLM
  call.
- bots' messages, channel posts and service messages: ignored.

Replies are plain text (never a parse error on user text), split under 4096 characters, sent in
the same forum topic, with "typing…" shown while the agent works. A 429's ``retry_after`` is
honoured.
"""

from __future__ import annotations

import hmac
import json
import logging
import warnings
from datetime import timedelta
from typing import Any

from aiohttp import web
from telegram import Bot, Message, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, MessageLimit
from telegram.error import BadRequest as TelegramBadRequest
from telegram.error import Forbidden as TelegramForbidden
from telegram.error import RetryAfter, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.warnings import PTBDeprecationWarning

from gateway import Channel, Gateway, hookimpl
from gateway.errors import BadRequest, Forbidden
from gateway.inbound import Command, DeliveryFailed, DeliveryRetry, InboundMessage

log = logging.getLogger(__name__)

NAME = "telegram"
COMMANDS = frozenset({"start", "help", "new", "remember", "forget", "memory", "usage"})
TEXT_ONLY = ("I can only read text for now — send me your question as a message "
             "(photos and documents with a caption work too).")
ALLOWED_UPDATES = ["message", "edited_message"]


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


def _mentions(message: Message, username: str) -> bool:
    wanted = f"@{username}".lower()
    entities = message.parse_entities(["mention"]) or message.parse_caption_entities(["mention"])
    return any(text.lower() == wanted for text in entities.values())


def _strip_mention(text: str, username: str) -> str:
    mention = f"@{username}"
    index = text.lower().find(mention.lower())
    if index < 0:
        return text.strip()
    return (text[:index] + text[index + len(mention):]).strip()


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

    @property
    def enabled(self) -> bool:
        """On when a token is configured."""
        return bool(self.token)

    @property
    def uses_webhook(self) -> bool:
        """Webhook mode when a secret is configured; long polling otherwise."""
        return bool(self.secret)

    def routes(self) -> list[web.RouteDef]:
        """``POST /telegram/webhook`` in webhook mode."""
        if self.enabled and self.uses_webhook:
            return [web.post("/telegram/webhook", self.webhook)]
        return []

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (getMe), then register the webhook or start polling."""
        if not self.enabled or self.application is not None:
            return
        base = self.api_base.rstrip("/")
        builder = (ApplicationBuilder().token(self.token).base_url(base)
                   .base_file_url(base.removesuffix("/bot") + "/file/bot"))
        if self.uses_webhook:
            builder = builder.updater(None)
        application = builder.build()
        application.add_handler(TypeHandler(Update, self._on_update))
        application.add_error_handler(self._on_error)
        await application.initialize()
        self.application = application
        if self.uses_webhook:
            if self.webhook_url:
                await application.bot.set_webhook(self.webhook_url, secret_token=self.secret,
                                                  allowed_updates=ALLOWED_UPDATES)
            log.info("telegram: webhook mode as @%s", application.bot.username)
        else:
            assert application.updater is not None
            await application.updater.start_polling(allowed_updates=ALLOWED_UPDATES)
            await application.start()
            log.info("telegram: polling as @%s", application.bot.username)

    async def stop(self) -> None:
        """Stop polling (or the webhook listener) and close the HTTP client; idempotent."""
        application, self.application = self.application, None
        if application is None:
            return
        if application.updater is not None and application.updater.running:
            await application.updater.stop()
        if application.running:
            await application.stop()
        await application.shutdown()

    # --- inbound ------------------------------------------------------------------------------
    async def webhook(self, request: web.Request) -> web.Response:
        """Check the secret header, parse the update, hand it over, answer 200 at once."""
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            raise Forbidden("missing or wrong X-Telegram-Bot-Api-Secret-Token")
        if self.application is None:
            raise web.HTTPServiceUnavailable()
        try:
            data = json.loads(await request.read())
            if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
                raise ValueError("not an Update")
            update = Update.de_json(data, self.application.bot)
        except (ValueError, TypeError, KeyError, RecursionError):
            raise BadRequest("the body is not a Telegram Update", code="invalid_update") from None
        await self.application.process_update(update)  # our handler only queues it
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
        command = None
        if text.startswith("/"):
            word, _, rest = text[1:].partition(" ")
            name, _, addressee = word.partition("@")
            if addressee and addressee.lower() != username.lower():
                return None  # a command for another bot
            if name.lower() in COMMANDS:
                command = Command(name.lower(), rest.strip())
            text = rest.strip()
            addressed = True
        else:
            replied = message.reply_to_message
            addressed = (private or _mentions(message, username)
                         or (replied is not None and replied.from_user is not None
                             and replied.from_user.id == bot.id))
        if not addressed and self.group_mode == "mention":
            return None
        if username:
            text = _strip_mention(text, username)
        if command is None:
            if message.caption and (message.photo or message.document):
                text = f"[{'photo' if message.photo else 'document'}] {text}"
            if update.edited_message is not None and text:
                text = f"[edited] {text}"
        notice = None
        if command is None and not text:
            if message.text is not None:
                return None  # nothing to answer (an empty command, a mention alone)
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


@hookimpl
def register_channels(gateway: Gateway) -> list[Channel]:
    """Register the Telegram channel (inactive without a token)."""
    return [TelegramChannel(gateway)]
