"""The Telegram channel plugin. python-telegram-bot is imported only when a token is set, so a
gateway without Telegram does not carry it in memory."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway import Channel, PluginHost, PluginSettings, ReservedChannel, hookimpl, options, setting

NAME = "telegram"
SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")  # Telegram's rule for secret_token


@dataclass(frozen=True)
class TelegramSettings:
    """``[plugins.telegram]`` and ``CLOUDYBOT_TELEGRAM_*``."""

    token: str = setting("", "bot token from @BotFather; empty: the Telegram channel is off",
                         secret=True)
    api_base: str = setting("https://api.telegram.org/bot", "Bot API base URL, ending in /bot "
                            "(python-telegram-bot's base_url)", parse=options.name)
    webhook_secret: str = setting("", "set: webhook mode on POST /telegram/webhook; empty: "
                                  "long polling", secret=True)
    webhook_url: str = setting("", "public URL of /telegram/webhook, registered with "
                               "setWebhook at start-up")
    group_mode: str = setting("mention", "in groups, answer only when mentioned or replied to "
                              "(mention), or every message (all)",
                              parse=options.choice("mention", "all"))

    def __post_init__(self) -> None:
        if self.webhook_secret and not SECRET_TOKEN.fullmatch(self.webhook_secret):
            raise ValueError("CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET must be 1-256 characters of "
                             "A-Z a-z 0-9 _ - (Telegram's rule)")


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the Telegram channel's settings."""
    return PluginSettings(NAME, TelegramSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the Telegram channel (a reserved name only, without a token)."""
    if not host.settings.plugin(TelegramSettings).token:
        return [ReservedChannel(NAME)]
    from .adapter import TelegramChannel

    return [TelegramChannel(host)]
