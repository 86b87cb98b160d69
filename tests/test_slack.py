"""Slack end to end: the channel verifying signed requests (its check is the only one: bolt's is
off), slack-bolt dispatching them, slack_sdk against a fake Web API."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

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
from tests.helpers import session_events

PAYLOADS = Path(__file__).parent / "payloads"


def payload(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / name).read_text())
    return data


async def post_signed(harness: Harness, body: bytes, *, timestamp: int | None = None,
                      headers: dict[str, str] | None = None, secret: str = SIGNING_SECRET) -> Any:
    signed = sign(secret, body, timestamp)
    return await harness.client.post("/slack/events", data=body,
                                     headers={**signed, **(headers or {})})


async def test_signature_test_vector_matches_slack_documentation() -> None:
    body = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
            b"channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
            b"command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2F"
            b"commands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id="
            b"398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
    assert sign(SIGNING_SECRET, body, 1531420618)["X-Slack-Signature"] == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")


async def test_url_verification_is_answered(slack: Harness, fake_slack: FakeSlack) -> None:
    body = json.dumps(payload("slack_url_verification.json")).encode()
    response = await post_signed(slack, body)
    assert response.status == 200
    assert (await response.json())["challenge"] == (
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")


async def test_dm_is_answered_in_the_dm(slack: Harness, fake_slack: FakeSlack,
                                        fake_llm: FakeLLM) -> None:
    response = await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    assert response.status == 200
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert fake_slack.calls[0].method == "auth.test"
    assert post.params["channel"] == "D0LAN2Q65"
    assert "thread_ts" not in post.params
    assert post.params["text"] == "echo: hey, can you remind me what we decided yesterday?"
    await slack.gateway.drain()
    key = f"slack:{TEAM_ID}:D0LAN2Q65"
    thread = await slack.gateway.store.get_thread(key)
    assert thread is not None and thread.ref.user_id == f"slack:{TEAM_ID}:U061F7AUR"
    [header, *_] = await session_events(slack.gateway, key)
    assert header["key"] == key


async def test_mention_is_answered_in_its_thread_and_followups_continue_it(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    mention = payload("slack_app_mention_channel.json")
    await post_signed(slack, json.dumps(mention).encode())
    [first] = await fake_slack.wait_for("chat.postMessage", 1)
    assert first.params["channel"] == "C0LAN2Q65"
    assert first.params["thread_ts"] == "1767225650.000200"
    assert fake_llm.chat_requests[0].messages[-1]["content"] == (
        "what's the status of the deploy?")

    await post_signed(slack, json.dumps(payload("slack_thread_reply.json")).encode())
    posts = await fake_slack.wait_for("chat.postMessage", 2)
    assert posts[1].params["thread_ts"] == "1767225650.000200"
    sent = fake_llm.chat_requests[1].messages
    assert [m["content"] for m in sent[1:]] == [
        "what's the status of the deploy?", "echo: what's the status of the deploy?",
        "and roughly how long until it finishes?"]
    key = f"slack:{TEAM_ID}:C0LAN2Q65:1767225650.000200"
    assert await slack.gateway.store.get_thread(key) is not None


async def test_thread_message_in_an_unknown_thread_is_ignored(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    await post_signed(slack, json.dumps(payload("slack_thread_reply.json")).encode())
    await slack.gateway.drain()
    assert fake_llm.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_mention_delivered_as_app_mention_and_message_is_answered_once(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    mention = payload("slack_app_mention_channel.json")
    await post_signed(slack, json.dumps(mention).encode())
    await fake_slack.wait_for("chat.postMessage", 1)
    # the same channel message, in its thread now, as a message.channels event
    as_message = dict(mention["event"], type="message", channel_type="channel",
                      thread_ts=mention["event"]["ts"])
    await post_signed(slack, event_body(as_message, "Ev0MENTIONMSG"))
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_retried_event_is_answered_once(slack: Harness, fake_slack: FakeSlack,
                                              fake_llm: FakeLLM) -> None:
    body = json.dumps(payload("slack_message_im.json")).encode()
    assert (await post_signed(slack, body)).status == 200
    for attempt in (1, 2):
        response = await post_signed(slack, body, headers={
            "X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "http_timeout"})
        assert response.status == 200
    await slack.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1
    assert len(fake_llm.chat_requests) == 1


async def test_retry_after_a_restart_is_answered_once(
        start_slack: Callable[..., Awaitable[Harness]], fake_slack: FakeSlack,
        fake_llm: FakeLLM) -> None:
    body = json.dumps(payload("slack_message_im.json")).encode()
    first = await start_slack()
    await post_signed(first, body)
    await fake_slack.wait_for("chat.postMessage", 1)
    await first.client.close()
    second = await start_slack()
    await post_signed(second, body, headers={"X-Slack-Retry-Num": "1"})
    await second.gateway.drain()
    assert len(fake_slack.calls_to("chat.postMessage")) == 1


UNVERIFIED = ["bad-signature", "stale", "no-headers", "wrong-secret", "no-signature",
              "future"]


def unverified_headers(case: str, body: bytes) -> dict[str, str]:
    """Headers of a request the channel must refuse, as ``case`` says."""
    if case == "bad-signature":
        return {**sign(SIGNING_SECRET, body), "X-Slack-Signature": "v0=" + "0" * 64}
    if case == "stale":
        return sign(SIGNING_SECRET, body, int(time.time()) - 301)
    if case == "future":
        return sign(SIGNING_SECRET, body, int(time.time()) + 301)
    if case == "wrong-secret":
        return sign("not-the-secret", body)
    if case == "no-signature":
        signed = sign(SIGNING_SECRET, body)
        return {key: value for key, value in signed.items() if key != "X-Slack-Signature"}
    return {"Content-Type": "application/json"}


@pytest.mark.parametrize("case", UNVERIFIED)
async def test_unverified_requests_are_refused_and_leave_no_trace(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, case: str) -> None:
    # The channel's check is the only one (bolt's is off): without it this event is stored
    # and answered.
    body = json.dumps(payload("slack_message_im.json")).encode()
    response = await slack.client.post("/slack/events", data=body,
                                       headers=unverified_headers(case, body))
    assert response.status == 401
    await slack.gateway.drain()
    assert fake_llm.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []
    assert await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:D0LAN2Q65") is None
    assert await slack.gateway.store.inbox_pending() == []
    # Nothing was recorded as seen either: the genuine delivery is answered, once.
    fake_llm.script.append(Scripted(body=completion("Hello from the bot.")))
    assert (await post_signed(slack, body)).status == 200
    posts = await fake_slack.wait_for("chat.postMessage", 1)
    assert [post.params["text"] for post in posts] == ["Hello from the bot."]


@pytest.mark.parametrize("case", UNVERIFIED)
async def test_an_unverified_slash_command_changes_nothing(
        slack: Harness, fake_llm: FakeLLM, case: str) -> None:
    body = slash_command_body("remember team Platform", "trigger-unsigned")
    headers = {**unverified_headers(case, body),
               "Content-Type": "application/x-www-form-urlencoded"}
    response = await slack.client.post("/slack/events", data=body, headers=headers)
    assert response.status == 401
    assert await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:D0LAN2Q65") is None


@pytest.mark.parametrize("body", [b"{broken", b"\xff\xfe\x00", b"[" * 50000])
async def test_the_signature_is_checked_before_the_body_is_parsed(
        slack: Harness, body: bytes) -> None:
    response = await slack.client.post("/slack/events", data=body,
                                       headers=unverified_headers("bad-signature", body))
    assert response.status == 401  # not 400: an unsigned body is never read


@pytest.mark.parametrize("body", [b"{broken", b"\xff\xfe\x00", b"[" * 50000, b"[]", b"{}"])
async def test_malformed_signed_bodies_are_4xx_not_500(slack: Harness, fake_llm: FakeLLM,
                                                       body: bytes) -> None:
    response = await post_signed(slack, body)
    assert 400 <= response.status < 500 or (response.status == 200 and body in (b"{}", b"[]"))
    assert fake_llm.requests == []


async def test_own_bot_messages_and_subtypes_are_ignored(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    im = payload("slack_message_im.json")["event"]
    ours = dict(im, user=BOT_USER_ID, bot_id=BOT_ID, ts="1767225601.000100")
    edit = dict(im, subtype="message_changed", ts="1767225602.000100")
    join = dict(im, subtype="channel_join", ts="1767225603.000100")
    other_bot = dict(im, bot_id="B0OTHERBOT", ts="1767225604.000100")
    for index, event in enumerate((ours, edit, join, other_bot)):
        assert (await post_signed(slack, event_body(event, f"Ev0IGN{index}"))).status == 200
    await slack.gateway.drain()
    assert fake_llm.requests == []
    assert fake_slack.calls_to("chat.postMessage") == []


async def test_two_dms_arriving_together_are_answered_in_order(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    def slow_first(request: Any) -> Scripted:
        text = request.messages[-1]["content"]
        return Scripted(body=completion(f"echo: {text}"), delay=0.3 if text == "one" else 0)

    fake_llm.responder = slow_first
    im = payload("slack_message_im.json")["event"]
    bodies = [event_body(dict(im, text=text, ts=f"1767225700.00010{i}"), f"Ev0ORDER{i}")
              for i, text in enumerate(["one", "two"])]
    for body in bodies:  # each acked at once, while the first is still being answered
        assert (await post_signed(slack, body)).status == 200
    posts = await fake_slack.wait_for("chat.postMessage", 2)
    assert [p.params["text"] for p in posts] == ["echo: one", "echo: two"]


async def test_slash_command_pins_and_lists_privately(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    answers = []
    for index, text in enumerate(["remember team Platform", "memory", "usage", "new"]):
        body = slash_command_body(text, f"trigger-{index}")
        headers = {**sign(SIGNING_SECRET, body),
                   "Content-Type": "application/x-www-form-urlencoded"}
        response = await slack.client.post("/slack/events", data=body, headers=headers)
        assert response.status == 200
        answers.append(await response.text())  # the ack's body: shown to the user only
    assert answers[0] == "Pinned team."
    assert answers[1] == "Pinned facts:\n• team: Platform"
    assert answers[2].startswith("Plan: free.")
    assert answers[3].startswith("Started a new conversation")
    assert fake_llm.requests == []
    thread = await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:D0LAN2Q65")
    assert thread is not None
    assert await slack.gateway.store.get_pinned(thread.ref) == {"team": "Platform"}


async def test_slash_command_in_a_channel_points_to_threads_and_dms(
        slack: Harness, fake_llm: FakeLLM) -> None:
    body = slash_command_body("remember team Platform", "trigger-channel").replace(
        b"channel_id=D0LAN2Q65", b"channel_id=C0LAN2Q65")
    headers = {**sign(SIGNING_SECRET, body), "Content-Type": "application/x-www-form-urlencoded"}
    response = await slack.client.post("/slack/events", data=body, headers=headers)
    assert "per thread" in await response.text()
    assert await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:C0LAN2Q65") is None


async def test_long_reply_is_split(slack: Harness, fake_slack: FakeSlack,
                                   fake_llm: FakeLLM) -> None:
    long_text = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum " * 40 for i in range(20))
    fake_llm.script = [Scripted(body=completion(long_text))]
    await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    await slack.gateway.drain()
    texts = [c.params["text"] for c in fake_slack.calls_to("chat.postMessage")]
    assert len(texts) > 1
    assert all(len(t) <= 3900 for t in texts)
    assert " ".join(" ".join(texts).split()) == " ".join(long_text.split())


async def test_rate_limited_post_is_retried_without_rerunning_the_agent(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    fake_slack.fail_next["chat.postMessage"] = [
        (429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "0"})] * 3
    await post_signed(slack, json.dumps(payload("slack_message_im.json")).encode())
    await slack.gateway.drain()
    posts = fake_slack.calls_to("chat.postMessage")
    assert len(posts) == 4  # three refusals, then the delivery
    assert len(fake_llm.chat_requests) == 1
