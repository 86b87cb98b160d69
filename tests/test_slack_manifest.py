"""The Slack app manifests shipped in channels/slack/ (docs/channels.md#slack) ask for what the
code uses and no more: the events its bolt listeners take, the scopes those events and its Web
API calls need, its slash command; one for Socket Mode, one for the Events API, otherwise
alike."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

SLACK = Path(__file__).resolve().parents[1] / "channels" / "slack"
SOURCES = [SLACK / "adapter.py", SLACK / "socket_mode.py"]
# the Slack events each bolt listener takes: ``message`` in DMs and in the threads of public
# and private channels the bot talks in
LISTENER_EVENTS = {"message": {"message.im", "message.channels", "message.groups"},
                   "app_mention": {"app_mention"}}
EVENT_SCOPES = {"app_mention": "app_mentions:read", "message.im": "im:history",
                "message.channels": "channels:history", "message.groups": "groups:history"}
# Web API methods the code calls, and the bot scope each needs (None: none; apps.connections.open
# takes the app-level token, whose connections:write scope no manifest can grant)
METHOD_SCOPES = {"chat_postMessage": "chat:write", "chat_update": "chat:write",
                 "chat_postEphemeral": "chat:write", "auth_test": None,
                 "apps_connections_open": None}


def manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SLACK / name).read_text())
    return data


def code() -> str:
    return "\n".join(path.read_text() for path in SOURCES)


def needed() -> tuple[set[str], set[str], set[str]]:
    """(events, bot scopes, slash commands) the code needs, read from its source."""
    source = code()
    events: set[str] = set()
    for listener in re.findall(r'self\.bolt\.event\("([^"]+)"\)', source):
        assert listener in LISTENER_EVENTS, f"a listener of {listener!r}: add its events here"
        events |= LISTENER_EVENTS[listener]
    scopes = {EVENT_SCOPES[event] for event in events}
    called = set(re.findall(r"client\.(\w+)\b", source))
    assert "api_call" not in called  # a method by name: this check could not see it
    for method in {name for name in called if hasattr(AsyncWebClient, name)}:
        assert method in METHOD_SCOPES, f"client.{method}: add its scope here and to the manifest"
        if METHOD_SCOPES[method]:
            scopes.add(str(METHOD_SCOPES[method]))
    if "url_private" in source:  # pictures shared with a message, downloaded with the token
        scopes.add("files:read")
    commands = set(re.findall(r'self\.bolt\.command\("([^"]+)"\)', source))
    if commands:
        scopes.add("commands")
    return events, scopes, commands


@pytest.mark.parametrize("name", ["manifest.json", "manifest-events-api.json"])
def test_the_manifest_asks_for_what_the_code_uses_and_no_more(name: str) -> None:
    events, scopes, commands = needed()
    app = manifest(name)
    assert set(app["settings"]["event_subscriptions"]["bot_events"]) == events
    assert set(app["oauth_config"]["scopes"]["bot"]) == scopes
    assert {command["command"] for command in app["features"]["slash_commands"]} == commands
    # people DM the bot from its Messages tab
    assert app["features"]["app_home"]["messages_tab_enabled"] is True
    assert app["features"]["app_home"]["messages_tab_read_only_enabled"] is False


def test_one_manifest_per_way_in_otherwise_alike() -> None:
    socket, events_api = manifest("manifest.json"), manifest("manifest-events-api.json")
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["event_subscriptions"]
    assert events_api["settings"]["socket_mode_enabled"] is False
    url = "https://your.host/slack/events"  # the route the Events API is served on
    assert events_api["settings"]["event_subscriptions"].pop("request_url") == url
    assert events_api["features"]["slash_commands"][0].pop("url") == url
    events_api["settings"]["socket_mode_enabled"] = True
    assert events_api == socket
    assert 'web.post("/slack/events"' in code()
