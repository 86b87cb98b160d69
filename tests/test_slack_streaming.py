"""Slack shows the reply growing while the model writes: one chat.postMessage, throttled
chat.update calls, and the stored reply as the last update — no second message."""

from __future__ import annotations

import itertools

import pytest

from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.slack import SIGNING_SECRET, FakeSlack, event_body, sign
from tests.conftest import Harness

REPLY = ("Here is **the plan**: first we gather the numbers, then we compare them with last "
         "quarter, and finally we write it up for the team. Say <!channel> if stuck.")


async def post_dm(slack: Harness, text: str, ts: str) -> None:
    body = event_body({"type": "message", "channel_type": "im", "channel": "D0LAN2Q65",
                       "user": "U061F7AUR", "text": text, "ts": ts}, f"Ev{ts}")
    response = await slack.client.post("/slack/events", data=body,
                                       headers=sign(SIGNING_SECRET, body))
    assert response.status == 200


async def test_a_streamed_reply_is_posted_once_then_updated_to_the_final_text(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack.gateway.inbox.preview_interval_seconds = 0.05
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=12, piece_delay=0.03)]
    await post_dm(slack, "what is the plan?", "1767226000.000100")
    await fake_slack.wait_for("chat.postMessage", 1)
    await slack.gateway.drain()

    [posted] = fake_slack.calls_to("chat.postMessage")
    updates = fake_slack.calls_to("chat.update")
    assert len(updates) >= 2
    assert all(call.params["ts"] == "1767226000.000001" for call in updates)
    final = updates[-1].params["text"]
    assert final.startswith("Here is *the plan*: first")
    assert final.endswith("Say &lt;!channel&gt; if stuck.")  # escaped, as every reply
    previews = [posted.params["text"]] + [call.params["text"] for call in updates[:-1]]
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(previews))
    assert "<!channel>" not in "".join(previews)


async def test_without_streaming_time_the_reply_is_one_message(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    fake_llm.script = [Scripted(body=completion("short"))]
    await post_dm(slack, "hi", "1767226000.000200")
    await fake_slack.wait_for("chat.postMessage", 1)
    await slack.gateway.drain()
    posted = fake_slack.calls_to("chat.postMessage")
    updates = fake_slack.calls_to("chat.update")
    # the preview (if any was shown) became the reply: one message in the chat either way
    assert len(posted) == 1
    assert (updates[-1].params["text"] if updates else posted[0].params["text"]) == "short"


@pytest.mark.parametrize("error", ["message_not_found", "cant_update_message"])
async def test_a_preview_that_cannot_be_updated_is_replaced_by_a_new_message(
        error: str, slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    slack.gateway.inbox.preview_interval_seconds = 0.01
    fake_llm.script = [Scripted(body=completion(REPLY), piece_chars=40, piece_delay=0.02)]
    fake_slack.fail_next["chat.update"] = [(200, {"ok": False, "error": error}, {})] * 20
    await post_dm(slack, "plan?", "1767226000.000300")
    await fake_slack.wait_for("chat.postMessage", 2)
    await slack.gateway.drain()
    assert fake_slack.calls_to("chat.postMessage")[-1].params["text"].endswith("if stuck.")
