"""More Slack end to end: threads, subtypes, other teams, commands, limits, acks, Web API errors.

slack-bolt verifies the real v0 signatures; slack_sdk talks HTTP to the fake Web API on
127.0.0.1; nothing is mocked. Waits are bounded polls on what the fakes recorded. Tests marked
``xfail(strict=True)`` pin known bugs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.commands import help_text
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.slack import (
    BOT_ID,
    BOT_USER_ID,
    SIGNING_SECRET,
    TEAM_ID,
    FakeSlack,
    event_body,
    sign,
    slash_command_body,
)
from tests.conftest import Harness
from tests.helpers import stop_while_held, until
from tests.test_slack import payload, post_signed

CHANNEL = "C0LAN2Q65"
ROOT_TS = "1767225650.000200"


def im_event(text: str, ts: str, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = dict(payload("slack_message_im.json")["event"], text=text, ts=ts,
                                 event_ts=ts)
    event.pop("blocks", None)
    event.update(fields)
    return event


def mention_event(text: str, ts: str, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = dict(payload("slack_app_mention_channel.json")["event"],
                                 text=f"<@{BOT_USER_ID}> {text}", ts=ts, event_ts=ts)
    event.pop("blocks", None)
    event.update(fields)
    return event


async def post_command(harness: Harness, text: str, trigger: str, **fields: str) -> Any:
    body = slash_command_body(text, trigger, **fields)
    headers = {**sign(SIGNING_SECRET, body), "Content-Type": "application/x-www-form-urlencoded"}
    return await harness.client.post("/slack/events", data=body, headers=headers)


# --- threads and mentions -----------------------------------------------------------------------
async def test_mention_inside_an_existing_thread_replies_in_that_thread(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    event = mention_event("can you weigh in?", "1767225800.000500", thread_ts=ROOT_TS)
    assert (await post_signed(slack, event_body(event, "Ev0INTHREAD1"))).status == 200
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert post.params["channel"] == CHANNEL
    assert post.params["thread_ts"] == ROOT_TS
    assert post.params["text"] == "echo: can you weigh in?"
    await slack.gateway.drain()
    assert await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:{CHANNEL}:{ROOT_TS}")
    assert await slack.gateway.store.get_thread(
        f"slack:{TEAM_ID}:{CHANNEL}:1767225800.000500") is None


async def test_our_reply_echoed_back_into_the_thread_is_not_answered(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    await post_signed(slack, event_body(mention_event("status?", ROOT_TS), "Ev0ECHO0"))
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    # Slack sends the bot's own post back as a message.channels event in the thread
    echo = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID,
            "text": post.params["text"], "ts": "1767226000.000001", "thread_ts": ROOT_TS,
            "channel": CHANNEL, "channel_type": "channel", "team": TEAM_ID}
    other_bot = dict(echo, user="U0OTHERBOT", bot_id="B0OTHER", ts="1767226000.000002")
    for index, event in enumerate((echo, other_bot)):
        assert (await post_signed(slack, event_body(event, f"Ev0ECHO{index + 1}"))).status == 200
    await slack.gateway.drain()
    assert len(fake_llm.chat_requests) == 1
    assert len(fake_slack.calls_to("chat.postMessage")) == 1


async def test_mention_as_message_first_then_app_mention_is_answered_once(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    """Inside a thread the bot is already in, the two events may arrive in either order."""
    await post_signed(slack, event_body(mention_event("start", ROOT_TS), "Ev0ORD0"))
    await fake_slack.wait_for("chat.postMessage", 1)
    mention = mention_event("second thought", "1767225900.000900", thread_ts=ROOT_TS)
    as_message = dict(mention, type="message", channel_type="channel")
    await post_signed(slack, event_body(as_message, "Ev0ORD1"))
    await post_signed(slack, event_body(mention, "Ev0ORD2"))
    await fake_slack.wait_for("chat.postMessage", 2)
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 2
    assert [r.messages[-1]["content"] for r in fake_llm.chat_requests] == [
        "start", "second thought"]


async def test_thread_broadcast_followup_continues_the_conversation(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    await post_signed(slack, event_body(mention_event("deploy status?", ROOT_TS), "Ev0BC0"))
    await fake_slack.wait_for("chat.postMessage", 1)
    broadcast = dict(payload("slack_thread_reply.json")["event"], subtype="thread_broadcast")
    broadcast.pop("client_msg_id")
    await post_signed(slack, event_body(broadcast, "Ev0BC1"))
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 2


# --- DMs -----------------------------------------------------------------------------------
async def test_dm_with_a_file_and_text_is_answered(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    event = im_event("what does this log say?", "1767225610.000100", subtype="file_share",
                     files=[{"id": "F0FILE0001", "name": "app.log", "mimetype": "text/plain"}])
    await post_signed(slack, event_body(event, "Ev0FILE0001"))
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert post.params["text"] == "echo: what does this log say?"
    assert post.params["channel"] == "D0LAN2Q65"


async def test_dm_from_a_user_of_another_team_is_answered_in_the_dm(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    """A Slack Connect user: the event's ``team``/``user_team`` is theirs, the envelope's
    ``team_id`` is the workspace that installed the bot."""
    event = im_event("hello from the partner org", "1767225620.000100", user="U0EXTERNAL",
                     team="T0PARTNER", user_team="T0PARTNER", source_team="T0PARTNER")
    await post_signed(slack, event_body(event, "Ev0SHARED01"))
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert post.params["channel"] == "D0LAN2Q65"
    await slack.gateway.drain()
    thread = await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:D0LAN2Q65")
    assert thread is not None
    assert thread.ref.user_id.startswith("slack:") and thread.ref.user_id.endswith(":U0EXTERNAL")
    assert await slack.gateway.store.get_user(thread.ref.user_id) is not None


async def test_dm_edit_of_an_answered_message_is_ignored(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    original = im_event("first version", "1767225630.000100")
    await post_signed(slack, event_body(original, "Ev0EDIT0"))
    await fake_slack.wait_for("chat.postMessage", 1)
    edit = {"type": "message", "subtype": "message_changed", "hidden": True,
            "channel": "D0LAN2Q65", "channel_type": "im", "ts": "1767225640.000100",
            "message": dict(original, text="second version", edited={"user": "U061F7AUR"}),
            "previous_message": original}
    assert (await post_signed(slack, event_body(edit, "Ev0EDIT1"))).status == 200
    await slack.gateway.drain()
    assert len(fake_llm.chat_requests) == 1


# --- slash commands -----------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   ", "help"])
async def test_slash_command_without_a_subcommand_gives_help(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, text: str) -> None:
    response = await post_command(slack, text, f"trigger-help-{len(text)}")
    assert response.status == 200
    # answered in the ack, shown to the user only
    assert await response.text() == help_text(slack.gateway.commands)
    assert fake_slack.calls_to("chat.postEphemeral") == []
    assert fake_llm.requests == []


async def test_slash_command_is_acked_at_once_and_not_run_twice(
        slack: Harness, fake_slack: FakeSlack) -> None:
    answers = []
    for _ in range(2):  # the same trigger_id twice
        response = await post_command(slack, "remember team Platform", "trigger-same")
        assert response.status == 200
        answers.append(await response.text())
    await slack.gateway.drain()
    assert answers[0] == "Pinned team."
    assert "Pinned" not in answers[1]  # a redelivered command is not run again


# --- verification, limits, acks -------------------------------------------------------------
async def test_url_verification_with_a_bad_signature_is_401(
        slack: Harness, fake_slack: FakeSlack) -> None:
    body = json.dumps(payload("slack_url_verification.json")).encode()
    response = await post_signed(slack, body, secret="not-the-signing-secret")
    assert response.status == 401
    assert "challenge" not in await response.text()
    stale = await post_signed(slack, body, timestamp=int(time.time()) - 400)
    assert stale.status == 401


async def test_stale_retry_is_refused_like_any_stale_request(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    """Slack signs each retry afresh: an old timestamp on a retry is a replay."""
    body = json.dumps(payload("slack_message_im.json")).encode()
    response = await post_signed(slack, body, timestamp=int(time.time()) - 600,
                                 headers={"X-Slack-Retry-Num": "3",
                                          "X-Slack-Retry-Reason": "http_timeout"})
    assert response.status == 401
    await slack.gateway.drain()
    assert fake_llm.requests == []


async def test_retry_of_an_event_never_handled_before_a_restart_is_answered(
        start_slack: Callable[..., Awaitable[Harness]], fake_slack: FakeSlack,
        fake_llm: FakeLLM) -> None:
    """Retries are de-duplicated, not dropped: a first delivery lost while the gateway was
    down is answered when Slack retries, once."""
    first = await start_slack()
    await first.client.close()  # the gateway went down before the event arrived
    second = await start_slack()
    body = json.dumps(payload("slack_message_im.json")).encode()
    for attempt in ("2", "3"):
        response = await post_signed(second, body, headers={
            "X-Slack-Retry-Num": attempt, "X-Slack-Retry-Reason": "connection_failed"})
        assert response.status == 200
    await fake_slack.wait_for("chat.postMessage", 1)
    await second.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_body_over_the_limit_is_413_json_and_nothing_processed(
        start_slack: Callable[..., Awaitable[Harness]], fake_slack: FakeSlack,
        fake_llm: FakeLLM) -> None:
    slack = await start_slack(max_request_bytes=4096)
    body = event_body(im_event("x" * 6000, "1767225650.000100"), "Ev0HUGE0001")
    response = await post_signed(slack, body)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == "too_large"
    await slack.gateway.drain()
    assert fake_llm.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_the_event_is_acked_while_the_llm_has_not_answered(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    answer = asyncio.Event()  # Slack wants its ack within 3 s: it must not wait for the model
    fake_llm.script = [Scripted(body=completion("worth the wait"), release=answer)]
    response = await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    assert response.status == 200
    assert fake_slack.calls_to("chat.postMessage") == []
    answer.set()
    [post] = await fake_slack.wait_for("chat.postMessage", 1, timeout=10)
    assert post.params["text"] == "worth the wait"


@pytest.mark.parametrize("event", ["not an object", [1, 2]])
async def test_signed_event_callback_with_a_malformed_event_is_4xx(
        slack: Harness, fake_llm: FakeLLM, event: Any) -> None:
    body = json.dumps({"type": "event_callback", "team_id": TEAM_ID, "event": event,
                       "event_id": "Ev0BROKEN"}).encode()
    response = await post_signed(slack, body)
    assert 400 <= response.status < 500
    await slack.gateway.drain()
    assert fake_llm.requests == []


# --- Web API failures -------------------------------------------------------------------
async def test_channel_not_found_is_not_retried(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack.gateway.outbox.backoff_seconds = 0.01
    fake_slack.fail_next["chat.postMessage"] = [
        (200, {"ok": False, "error": "channel_not_found"}, {})]
    await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    await until(lambda: len(fake_slack.calls_to("chat.postMessage")) >= 1)
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_server_error_from_post_message_is_retried(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack.gateway.outbox.backoff_seconds = 0.01
    fake_slack.fail_next["chat.postMessage"] = [
        (500, {"ok": False, "error": "internal_error"}, {})]
    await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    await until(lambda: len(fake_slack.calls_to("chat.postMessage")) >= 2)
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 2
    assert len(fake_llm.chat_requests) == 1


async def test_missing_scope_is_not_retried(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack.gateway.outbox.backoff_seconds = 0.01
    fake_slack.fail_next["chat.postMessage"] = [
        (200, {"ok": False, "error": "missing_scope", "needed": "chat:write"}, {})] * 5
    await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    await until(lambda: len(fake_slack.calls_to("chat.postMessage")) >= 1)
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1


# --- shutdown ---------------------------------------------------------------------------
async def test_stopping_the_gateway_delivers_queued_replies(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    release = asyncio.Event()

    def slow_first(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"),
                        release=release if text == "one" else None)

    fake_llm.responder = slow_first
    for index, text in enumerate(["one", "two"]):
        body = event_body(im_event(text, f"1767225660.00010{index}"), f"Ev0STOP{index}")
        assert (await post_signed(slack, body)).status == 200
    await until(lambda: len(fake_llm.chat_requests) == 1)
    await stop_while_held(slack, release)  # while "one" is answered and "two" waits
    assert [c.params["text"] for c in fake_slack.calls_to("chat.postMessage")] == [
        "echo: one", "echo: two"]


async def test_slack_signature_with_non_ascii_is_401_not_500(slack: Harness) -> None:
    body = json.dumps({"type": "event_callback", "event": {}}).encode()
    headers = {**sign(SIGNING_SECRET, body), "X-Slack-Signature": "v0=é" + "0" * 63}
    response = await slack.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 401


async def test_slack_new_behind_a_running_turn_is_acked_then_confirmed(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    channel = slack.gateway.channels["slack"]
    channel.command_ack_seconds = 0.05  # type: ignore[attr-defined]
    release = asyncio.Event()
    fake_llm.script = [Scripted(body=completion("slow answer"), release=release)]
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
    assert "Working on it" in await response.text()  # acked while the turn still runs
    release.set()
    [confirmation] = await fake_slack.wait_for("chat.postEphemeral", 1)
    assert confirmation.params["text"].startswith("Started a new conversation")
    await asyncio.wait_for(slack.gateway.drain(), 5)
