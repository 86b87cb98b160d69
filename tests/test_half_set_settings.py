"""Half-set channel settings: one clear warning line each at start when the gateway still works
(a setting that does nothing as configured), a ConfigError when the channel could not hear
anything (a Slack bot token with no way in for events)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.base.errors import ConfigError
from gateway.config.settings import Settings
from gateway.testing.slack import APP_TOKEN, SIGNING_SECRET
from gateway.testing.telegram import SECRET
from tests.conftest import Harness

Start = Callable[..., Awaitable[Harness]]
URL = "https://bot.example.com/telegram/webhook"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.levelno == logging.WARNING and record.name.startswith("cloudybot.plugin.")]


@pytest.mark.parametrize(("settings", "expected"), [
    ({"slack_signing_secret": SIGNING_SECRET},
     "slack: CLOUDYBOT_SLACK_SIGNING_SECRET is set but CLOUDYBOT_SLACK_BOT_TOKEN is not: the "
     "Slack channel is off"),
    ({"slack_app_token": APP_TOKEN},
     "slack: CLOUDYBOT_SLACK_APP_TOKEN is set but CLOUDYBOT_SLACK_BOT_TOKEN is not: the Slack "
     "channel is off"),
    ({"telegram_webhook_url": URL},
     "telegram: CLOUDYBOT_TELEGRAM_WEBHOOK_URL is set but CLOUDYBOT_TELEGRAM_TOKEN is not: the "
     "Telegram channel is off"),
])
async def test_a_setting_without_its_token_is_one_warning_at_start(
        start_gateway: Start, caplog: pytest.LogCaptureFixture, settings: dict[str, Any],
        expected: str) -> None:
    caplog.set_level(logging.WARNING)
    await start_gateway(**settings)
    assert warnings(caplog) == [expected]


@pytest.mark.parametrize(("settings", "expected"), [
    ({"telegram_webhook_secret": "", "telegram_webhook_url": URL},
     "telegram: CLOUDYBOT_TELEGRAM_WEBHOOK_URL is set without CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET: "
     "long polling, and the URL is not registered (set the secret too to use the webhook)"),
    ({"telegram_webhook_secret": SECRET},
     "telegram: CLOUDYBOT_TELEGRAM_WEBHOOK_SECRET is set without CLOUDYBOT_TELEGRAM_WEBHOOK_URL: "
     "POST /telegram/webhook is served but not registered with Telegram, so nothing arrives "
     "unless you called setWebhook yourself (set the URL to have it registered at start-up)"),
])
async def test_a_half_set_telegram_webhook_is_one_warning_at_start(
        start_telegram: Start, caplog: pytest.LogCaptureFixture, settings: dict[str, Any],
        expected: str) -> None:
    caplog.set_level(logging.WARNING)
    await start_telegram(**settings)
    assert warnings(caplog) == [expected]


@pytest.mark.parametrize("settings", [
    {"telegram_webhook_url": URL, "telegram_webhook_secret": SECRET},
    {"telegram_webhook_secret": ""},  # polling
])
async def test_a_whole_telegram_setup_warns_of_nothing(
        start_telegram: Start, caplog: pytest.LogCaptureFixture,
        settings: dict[str, Any]) -> None:
    caplog.set_level(logging.WARNING)
    await start_telegram(**settings)
    assert warnings(caplog) == []


@pytest.mark.parametrize("settings", [
    {},  # the Events API
    {"slack_signing_secret": "", "slack_app_token": APP_TOKEN},  # Socket Mode
    {"slack_app_token": APP_TOKEN},  # both
])
async def test_a_whole_slack_setup_warns_of_nothing(
        start_slack: Start, caplog: pytest.LogCaptureFixture, settings: dict[str, Any]) -> None:
    caplog.set_level(logging.WARNING)
    await start_slack(**settings)
    assert warnings(caplog) == []


def test_a_slack_bot_token_with_no_way_in_for_events_is_a_config_error(
        make_settings: Callable[..., Settings]) -> None:
    with pytest.raises(ConfigError) as refused:
        make_settings(slack_bot_token="xoxb-test-token")
    assert "CLOUDYBOT_SLACK_BOT_TOKEN needs CLOUDYBOT_SLACK_APP_TOKEN (Socket Mode) or " \
           "CLOUDYBOT_SLACK_SIGNING_SECRET (the Events API)" in refused.value.message
