"""The Slack channel plugin. slack-bolt is imported only when a bot token is set, so a gateway
without Slack does not carry it in memory."""

from __future__ import annotations

from gateway import Channel, Gateway, hookimpl
from gateway.interfaces import ReservedChannel

NAME = "slack"


@hookimpl
def register_channels(gateway: Gateway) -> list[Channel]:
    """Register the Slack channel (a reserved name only, without a bot token)."""
    if not gateway.settings.slack_bot_token:
        return [ReservedChannel(NAME)]
    from .adapter import SlackChannel

    return [SlackChannel(gateway)]
