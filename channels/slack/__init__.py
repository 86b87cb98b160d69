"""The Slack channel plugin. slack-bolt is imported only when a bot token is set, so a gateway
without Slack does not carry it in memory."""

from __future__ import annotations

from dataclasses import dataclass

from gateway import Channel, PluginHost, PluginSettings, ReservedChannel, hookimpl, options, setting

NAME = "slack"


@dataclass(frozen=True)
class SlackSettings:
    """``[plugins.slack]`` and ``CLOUDYBOT_SLACK_*``."""

    bot_token: str = setting("", "xoxb- bot token; empty: the Slack channel is off",
                             secret=True)
    signing_secret: str = setting("", "signing secret that verifies POST /slack/events "
                                  "(the Events API)", secret=True)
    app_token: str = setting("", "xapp- app-level token (scope connections:write): Socket "
                             "Mode, events over a websocket the gateway opens, no public "
                             "address needed", secret=True)
    api_base: str = setting("https://slack.com/api/", "Web API base URL, ending in / "
                            "(AsyncWebClient)", parse=options.name)

    def __post_init__(self) -> None:
        if self.bot_token and not (self.signing_secret or self.app_token):
            raise ValueError("CLOUDYBOT_SLACK_BOT_TOKEN needs CLOUDYBOT_SLACK_APP_TOKEN (Socket "
                             "Mode) or CLOUDYBOT_SLACK_SIGNING_SECRET (the Events API): "
                             "without either no event reaches the gateway")

    def half_set(self) -> list[str]:
        """One warning line per setting that does nothing as configured (set without the bot
        token that would use it). A bot token without a way in for events is an error
        instead (see ``__post_init__``): that channel would run and never hear anything."""
        if self.bot_token:
            return []
        return [f"slack: CLOUDYBOT_SLACK_{name.upper()} is set but CLOUDYBOT_SLACK_BOT_TOKEN "
                "is not: the Slack channel is off" for name in ("signing_secret", "app_token")
                if getattr(self, name)]


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the Slack channel's settings."""
    return PluginSettings(NAME, SlackSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the Slack channel (a reserved name only, without a bot token, warning about
    the settings that are then unused)."""
    settings = host.settings.plugin(SlackSettings)
    for warning in settings.half_set():
        host.log.warning("%s", warning)
    if not settings.bot_token:
        return [ReservedChannel(NAME)]
    from .adapter import SlackChannel

    return [SlackChannel(host)]
