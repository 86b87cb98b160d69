"""Slack in Socket Mode: slack_sdk's own aiohttp SocketModeClient (driven by slack-bolt's
listeners) against the kit's fake Socket Mode server on loopback. An envelope is acknowledged
only once its event is in the durable inbox; a retried one is answered once; the connection
comes back when Slack drops it."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.base.errors import ConfigError
from gateway.config.settings import Settings
from gateway.gateway import Gateway
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import APP_TOKEN, TEAM_ID, FakeSlack
from tests.conftest import Harness
from tests.helpers import until
from tests.test_channel_durability import break_inbox
from tests.test_slack import payload

StartSlack = Callable[..., Awaitable[Harness]]
DM = "D0LAN2Q65"


@pytest.fixture
async def socket(start_slack: StartSlack, fake_slack: FakeSlack) -> Harness:
    """A gateway with Slack in Socket Mode only (no signing secret), connected to the fake."""
    harness = await start_slack(slack_app_token=APP_TOKEN, slack_signing_secret="")
    await fake_slack.wait_until(lambda: fake_slack.connections == 1)
    return harness


def dm(text: str, ts: str) -> dict[str, Any]:
    return {"type": "message", "channel_type": "im", "channel": DM, "user": "U061F7AUR",
            "text": text, "ts": ts}


async def test_a_dm_is_acknowledged_and_answered_without_a_public_address(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    envelope = await fake_slack.send_event(dm("hello over the socket", "1767226000.000100"),
                                           "Ev-dm")
    assert await fake_slack.wait_for_ack(envelope) == {"envelope_id": envelope}
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert (post.params["channel"], post.params["text"]) == (DM, "echo: hello over the socket")
    assert "thread_ts" not in post.params
    thread = await socket.gateway.store.get_thread(f"slack:{TEAM_ID}:{DM}")
    assert thread is not None and thread.ref.user_id == f"slack:{TEAM_ID}:U061F7AUR"
    # no signing secret: the Events API's route is not served
    assert (await socket.client.post("/slack/events", data=b"{}")).status == 404
    assert fake_slack.stray_acks == []


async def test_a_mention_is_answered_in_its_thread(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    mention = payload("slack_app_mention_channel.json")
    envelope = await fake_slack.send_event(mention["event"], mention["event_id"])
    await fake_slack.wait_for_ack(envelope)
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert (post.params["channel"], post.params["thread_ts"]) == ("C0LAN2Q65",
                                                                  "1767225650.000200")
    assert post.params["text"] == "echo: what's the status of the deploy?"


async def test_a_retried_envelope_is_acknowledged_and_answered_once(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    event = dm("only once", "1767226000.000200")
    first = await fake_slack.send_event(event, "Ev-once")
    await fake_slack.wait_for_ack(first)
    for attempt in (1, 2):  # as Slack redelivers: a new envelope, the same event
        await fake_slack.wait_for_ack(await fake_slack.send_event(event, "Ev-once", attempt))
    await fake_slack.wait_for("chat.postMessage", 1)
    await socket.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_no_ack_while_the_inbox_cannot_store_then_the_redelivery_is_answered(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    refused = break_inbox(socket, monkeypatch)
    event = dm("store me", "1767226000.000300")
    envelope = await fake_slack.send_event(event, "Ev-store")
    await until(lambda: f"envelope {envelope} not acknowledged" in caplog.text)
    assert refused == [f"{DM}:1767226000.000300"]
    assert envelope not in fake_slack.acks
    await socket.gateway.drain()
    assert fake_llm.requests == []

    monkeypatch.undo()  # Slack delivers an unacknowledged envelope again
    retried = await fake_slack.send_event(event, "Ev-store", retry_attempt=1)
    await fake_slack.wait_for_ack(retried)
    await fake_slack.wait_for("chat.postMessage", 1)
    assert [c.params["text"] for c in fake_slack.calls_to("chat.postMessage")] == [
        "echo: store me"]
    assert envelope not in fake_slack.acks


@pytest.mark.parametrize("how", ["drop", "ask_to_reconnect"])
async def test_the_connection_comes_back_when_slack_drops_it_or_asks_for_a_new_one(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, how: str) -> None:
    await fake_slack.wait_for_ack(await fake_slack.send_event(dm("before", "1767226000.1"),
                                                              "Ev-1"))
    await getattr(fake_slack, how)()
    await fake_slack.wait_until(lambda: fake_slack.connections == 2 and
                                len(fake_slack.sockets) == 1)
    await fake_slack.wait_for_ack(await fake_slack.send_event(dm("after", "1767226000.2"),
                                                              "Ev-2"))
    posts = await fake_slack.wait_for("chat.postMessage", 2)
    assert sorted(call.params["text"] for call in posts) == ["echo: after", "echo: before"]
    assert len(fake_slack.calls_to("apps.connections.open")) == 3  # start's check, 2 sockets


async def test_a_slash_command_is_answered_in_its_acknowledgement(
        socket: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    answers = []
    for index, text in enumerate(["remember team Platform", "memory", "usage"]):
        envelope = await fake_slack.send_command(text, f"trigger-{index}")
        ack = await fake_slack.wait_for_ack(envelope)
        answers.append(ack["payload"]["text"])
    assert answers[:2] == ["Pinned team.", "Pinned facts:\n• team: Platform"]
    assert answers[2].startswith("Plan: free.")
    assert fake_llm.requests == []


async def test_an_event_nobody_listens_to_is_acknowledged(
        socket: Harness, fake_slack: FakeSlack) -> None:
    envelope = await fake_slack.send_event(
        {"type": "app_home_opened", "user": "U061F7AUR", "channel": DM, "tab": "home",
         "event_ts": "1767226000.000400"}, "Ev-home")
    assert await fake_slack.wait_for_ack(envelope) == {"envelope_id": envelope}


@pytest.mark.parametrize(("app_token", "message"), [
    ("xapp-1-A0KRD7HC3-1-not-the-fakes", "CLOUDYBOT_SLACK_APP_TOKEN was refused by Slack "
     "(invalid_auth)"),
    ("xoxb-test-token", "CLOUDYBOT_SLACK_APP_TOKEN is not a Slack app-level token"),
])
async def test_an_app_token_slack_refuses_stops_start(
        make_settings: Callable[..., Settings], pm: PluginManager, fake_slack: FakeSlack,
        app_token: str, message: str) -> None:
    gateway = Gateway(make_settings(slack_bot_token=fake_slack.token, slack_app_token=app_token,
                                    slack_api_base=fake_slack.base_url), pm)
    with pytest.raises(ConfigError) as refused:
        await gateway.start()
    assert refused.value.message.startswith(message)
    assert fake_slack.connections == 0


async def test_the_fake_refuses_the_bot_token_for_a_socket(fake_slack: FakeSlack) -> None:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient
    client = AsyncWebClient(base_url=fake_slack.base_url)
    with pytest.raises(SlackApiError) as refused:
        await client.apps_connections_open(app_token=fake_slack.token)
    assert refused.value.response["error"] == "not_allowed_token_type"


def test_settings_need_a_way_in_for_events(caplog: pytest.LogCaptureFixture) -> None:
    from channels.slack import SlackSettings
    with pytest.raises(ValueError, match=r"CLOUDYBOT_SLACK_APP_TOKEN \(Socket Mode\) or "):
        SlackSettings(bot_token="xoxb-1")
    assert SlackSettings(bot_token="xoxb-1", app_token=APP_TOKEN).signing_secret == ""
    caplog.set_level(logging.WARNING)
    assert json.dumps(SlackSettings(app_token=APP_TOKEN).half_set()) == json.dumps([
        "slack: CLOUDYBOT_SLACK_APP_TOKEN is set but CLOUDYBOT_SLACK_BOT_TOKEN is not: the "
        "Slack channel is off"])
