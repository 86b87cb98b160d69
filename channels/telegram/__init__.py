"""The Telegram channel plugin. python-telegram-bot is imported only when a token is set, so a
gateway without Telegram does not carry it in memory."""

from __future__ import annotations

from gateway import Channel, Gateway, hookimpl
from gateway.interfaces import ReservedChannel

NAME = "telegram"


@hookimpl
def register_channels(gateway: Gateway) -> list[Channel]:
    """Register the Telegram channel (a reserved name only, without a token)."""
    if not gateway.settings.telegram_token:
        return [ReservedChannel(NAME)]
    from .adapter import TelegramChannel

    return [TelegramChannel(gateway)]
