"""The Discord channel plugin. discord.py is imported only when a bot token is set, so a
gateway without Discord does not carry it in memory."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway import Channel, PluginHost, PluginSettings, ReservedChannel, hookimpl, options, setting

NAME = "discord"
API_BASE = "https://discord.com/api/v10"


def snowflakes(raw: Any) -> tuple[int, ...]:
    """Comma-separated Discord ids (a TOML array too); empty: none."""
    items = raw if isinstance(raw, list) else options.text(raw).split(",")
    values = [str(item).strip() for item in items if str(item).strip()]
    for value in values:
        if not re.fullmatch(r"\d{1,20}", value):
            raise ValueError(f"{value!r} is not a Discord id (digits; copy it with Developer "
                             "Mode on)")
    return tuple(sorted({int(value) for value in values}))


@dataclass(frozen=True)
class DiscordSettings:
    """``[plugins.discord]`` and ``CLOUDYBOT_DISCORD_*``."""

    bot_token: str = setting("", "bot token from the Developer Portal (Bot, Reset Token); "
                             "empty: the Discord channel is off", secret=True)
    api_base: str = setting(API_BASE, "REST API base URL, ending in /api/v10 (the websocket's "
                            "address comes from its GET /gateway/bot)", parse=options.name)
    respond_mode: str = setting("mention", "in servers, answer only when mentioned or replied "
                                "to (mention), or every message in the allowed channels (all)",
                                parse=options.choice("mention", "all"))
    guilds: tuple[int, ...] = setting((), "server (guild) ids to answer in, "
                                     "comma-separated; empty: every server the bot is in",
                                     parse=snowflakes)
    channels: tuple[int, ...] = setting((), "channel ids to answer in (a thread "
                                       "counts as its channel), comma-separated; empty: "
                                       "every channel", parse=snowflakes)


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the Discord channel's settings."""
    return PluginSettings(NAME, DiscordSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the Discord channel (a reserved name only, without a bot token)."""
    if not host.settings.plugin(DiscordSettings).bot_token:
        return [ReservedChannel(NAME)]
    from .adapter import DiscordChannel

    return [DiscordChannel(host)]
