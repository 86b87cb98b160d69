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

    def half_set(self) -> list[str]:
        """One warning line per half-set group of settings: each still lets the gateway run
        (so none is an error), but does not do what it looks set up for."""
        if not self.token:
            return [f"telegram: CLOUDYBOT_TELEGRAM_{name.upper()} is set but "
                    "CLOUDYBOT_TELEGRAM_TOKEN is not: the Telegram channel is off"
                    for name in ("webhook_secret", "webhook_url") if getattr(self, name)]
        if self.webhook_url and not self.webhook_secret:
            return ["telegram: CLOUDYBOT_TELEGRAM_WEBHOOK_URL is set without "
                    "CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET: long polling, and the URL is not "
                    "registered (set the secret too to use the webhook)"]
        if self.webhook_secret and not self.webhook_url:
            return ["telegram: CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET is set without "
                    "CLOUDYBOT_TELEGRAM_WEBHOOK_URL: POST /telegram/webhook is served but not "
                    "registered with Telegram, so nothing arrives unless you called setWebhook "
                    "yourself (set the URL to have it registered at start-up)"]
        return []


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the Telegram channel's settings."""
    return PluginSettings(NAME, TelegramSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the Telegram channel (a reserved name only, without a token), warning about
    half-set settings."""
    settings = host.settings.plugin(TelegramSettings)
    for warning in settings.half_set():
        host.log.warning("%s", warning)
    if not settings.token:
        return [ReservedChannel(NAME)]
    from .adapter import TelegramChannel

    return [TelegramChannel(host)]
