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
    signing_secret: str = setting("", "signing secret that verifies POST /slack/events",
                                  secret=True)
    api_base: str = setting("https://slack.com/api/", "Web API base URL, ending in / "
                            "(AsyncWebClient)", parse=options.name)

    def __post_init__(self) -> None:
        if self.bot_token and not self.signing_secret:
            raise ValueError("CLOUDYBOT_SLACK_SIGNING_SECRET is required with "
                             "CLOUDYBOT_SLACK_BOT_TOKEN: Slack requests must be verified")


@hookimpl
def plugin_settings() -> PluginSettings:
    """Declare the Slack channel's settings."""
    return PluginSettings(NAME, SlackSettings)


@hookimpl
def register_channels(host: PluginHost) -> list[Channel]:
    """Register the Slack channel (a reserved name only, without a bot token)."""
    if not host.settings.plugin(SlackSettings).bot_token:
        return [ReservedChannel(NAME)]
    from .adapter import SlackChannel

    return [SlackChannel(host)]
