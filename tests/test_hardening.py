"""Hardening found in review: odd input, a broken plugin, short secrets, retention of archives,
billing of calls that answered, what plugins and clients may see."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway import PromptSection, TurnContext, hookimpl
from gateway.config import Price
from gateway.inbound import BAD_SENDER
from gateway.plugins import PluginManager
from gateway.retention import purge
from gateway.sessions import Rotation
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from gateway.testing.slack import SIGNING_SECRET, FakeSlack, sign, slash_command_body
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock, assert_json_error, until

StartGateway = Callable[..., Awaitable[Harness]]


@pytest.mark.parametrize("body", [
    b'{"threadId": "t1", "message": "\\ud800 broken"}',
    b'{"threadId": "t1", "message": "ok", "specialist": "\\udfff"}',
])
async def test_lone_surrogates_in_chat_are_400_not_500(harness: Harness, fake_llm: FakeLLM,
                                                       body: bytes) -> None:
    auth = await harness.user()
    response = await harness.client.post("/chat", data=body, headers={
        **auth, "Content-Type": "application/json"})
    await assert_json_error(response, 400)
    assert fake_llm.requests == []


async def test_lone_surrogates_in_memory_and_specialists_are_400(harness: Harness) -> None:
    auth = await harness.user()
    headers = {**auth, "Content-Type": "application/json"}
    response = await harness.client.put("/api/user/memory?threadId=t1", headers=headers,
                                        data=b'{"key": "k", "value": "\\ud800"}')
    await assert_json_error(response, 400)
    response = await harness.client.put("/api/specialists/s", headers=headers,
                                        data=b'{"instructions": "\\ud800"}')
    await assert_json_error(response, 400)


async def test_a_short_password_is_refused_so_redaction_cannot_shred_text(
        harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": "e"})
    await assert_json_error(response, 400, "invalid_password")
    assert (await harness.chat(auth, "hello there")).status == 200
    thread = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert thread["messages"][0]["content"] == "hello there"


async def test_a_prompt_plugin_returning_garbage_does_not_break_turns(
        start_gateway: StartGateway, pm: PluginManager, fake_llm: FakeLLM) -> None:
    class Broken:
        @hookimpl
        def prompt_sections(self) -> list[Any]:
            return ["not a section", PromptSection(position="after_instructions", text="KEPT")]

    pm.register(Broken(), name="broken")
    harness = await start_gateway()
    auth = await harness.user()
    assert (await harness.chat(auth, "hi")).status == 200
    assert "KEPT" in fake_llm.requests[-1].system_text


async def test_plugins_see_the_message_with_saved_passwords_redacted(
        start_gateway: StartGateway, pm: PluginManager) -> None:
    seen: list[str] = []

    class Watcher:
        @hookimpl
        def prompt_sections(self, turn: TurnContext) -> list[PromptSection]:
            seen.append(turn.message)
            return []

    pm.register(Watcher(), name="watcher")
    harness = await start_gateway()
    auth = await harness.user()
    await harness.client.put("/api/user/browser-credentials", headers=auth, json={
        "site": "example.com", "username": "ada", "password": "correct-horse-9"})
    assert (await harness.chat(auth, "my password is correct-horse-9")).status == 200
    assert seen == ["my password is [redacted]"]


async def test_provider_error_details_stay_in_the_log(start_gateway: StartGateway,
                                                      fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user()
    fake_llm.script = [Scripted(status=400, body={"error": {
        "message": "org-internal-quota-id 4242 exceeded"}})]
    response = await harness.chat(auth, "hi")
    error = await assert_json_error(response, 502)
    assert "4242" not in error["message"]


async def test_a_call_that_answered_is_billed_when_a_later_round_fails(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway(llm_max_retries=0)
    auth = await harness.user(credits=1000)
    fake_llm.script = [
        Scripted(body=tool_call_completion([("c1", "calculator", '{"expression": "1+1"}')],
                                           None, 1500, 500)),
        Scripted(status=500, body={"error": {"message": "down"}})]
    response = await harness.chat(auth, "what is 1+1?")
    assert response.status == 502
    ledger = await harness.gateway.store.ledger("alice")
    assert [(row.kind, row.prompt_tokens) for row in ledger] == [("grant", 0), ("chat", 1500)]
    credits = await (await harness.client.get("/api/user/credits", headers=auth)).json()
    assert credits["credits"] == 1000 - ledger[-1].credits


async def test_tool_rounds_do_not_stack_their_own_worst_cases(
        start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    # Each call's worst case is ~100 credits (1,000 max tokens at 100/1,000); each call really
    # costs 1. Three calls must fit in 250 credits: the turn's earlier estimates are replaced by
    # what it really spent, not added up.
    harness = await start_gateway(prices={"default": Price(0.0, 100.0)},
                                  llm_max_tokens=1000)
    auth = await harness.user(credits=250)
    call = tool_call_completion([("c1", "calculator", '{"expression": "2*3"}')], None, 10, 10)
    fake_llm.script = [Scripted(body=call), Scripted(body=call),
                       Scripted(body=completion("six", 10, 10))]
    response = await harness.chat(auth, "2*3 twice?")
    assert response.status == 200
    assert (await response.json())["reply"] == "six"


async def test_an_invalid_channel_sender_id_is_refused(
        loop: LoopChannel, start_gateway: StartGateway, fake_llm: FakeLLM) -> None:
    harness = await start_gateway()
    await harness.gateway.receive(loop.message("m1", "hi", sender="loop:a--b"))
    await harness.gateway.drain()
    assert loop.texts() == [BAD_SENDER]
    assert fake_llm.requests == []
    assert await harness.gateway.store.get_user("loop:a--b") is None


async def test_purge_tells_session_observers_and_sweeps_archives_of_deleted_threads(
        start_clocked: StartGateway, pm: PluginManager, clock: Clock) -> None:
    rotations: list[Rotation] = []

    class Observer:
        @hookimpl
        def session_rotated(self, rotation: Rotation) -> None:
            rotations.append(rotation)

    pm.register(Observer(), name="observer")
    harness = await start_clocked()
    auth = await harness.user()
    for thread in ("old", "gone"):
        assert (await harness.chat(auth, "hi", thread=thread)).status == 200
    assert (await harness.client.delete("/api/threads/gone", headers=auth)).status == 204
    archived = list(harness.gateway.settings.sessions_dir.glob("archive/alice--gone.*"))
    assert archived  # a delete archives the session
    clock.advance(31 * 86400)  # past the free plan's 30 days, for both
    for path in archived:  # the archive's age comes from the file, like the thread's
        os.utime(path, (clock() - 31 * 86400, clock() - 31 * 86400))
    report = await purge(harness.gateway)
    assert [t.session_key for t in report.threads] == ["alice--old"]
    assert report.orphans == 1
    assert not any(path.exists() for path in archived)
    assert [(r.key, r.reason) for r in rotations][-1] == ("alice--old", "purged")


async def test_slack_signature_with_non_ascii_is_401_not_500(slack: Harness) -> None:
    body = json.dumps({"type": "event_callback", "event": {}}).encode()
    headers = {**sign(SIGNING_SECRET, body), "X-Slack-Signature": "v0=é" + "0" * 63}
    response = await slack.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 401


async def test_slack_new_behind_a_running_turn_is_acked_then_confirmed(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    channel = slack.gateway.channels["slack"]
    channel.command_ack_seconds = 0.05  # type: ignore[attr-defined]
    fake_llm.script = [Scripted(body=completion("slow answer"), delay=0.5)]
    im = json.dumps({"type": "event_callback", "team_id": "T0G9PQBBK", "event_id": "EvSLOW",
                     "event": {"type": "message", "channel_type": "im", "channel": "D0LAN2Q65",
                               "user": "U061F7AUR", "text": "think hard",
                               "ts": "1767225600.000900"}}).encode()
    assert (await slack.client.post("/slack/events", data=im,
                                    headers=sign(SIGNING_SECRET, im))).status == 200
    await until(lambda: len(fake_llm.requests) == 1)
    body = slash_command_body("new", "trigger-new-busy")
    response = await slack.client.post("/slack/events", data=body, headers={
        **sign(SIGNING_SECRET, body), "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status == 200
    assert "Working on it" in await response.text()
    [confirmation] = await fake_slack.wait_for("chat.postEphemeral", 1)
    assert confirmation.params["text"].startswith("Started a new conversation")
    await asyncio.wait_for(slack.gateway.drain(), 5)
