"""Slack text fidelity (SPEC §12): the model's Markdown is posted as escaped mrkdwn, and users'
messages reach the model as they typed them.

End to end: slack-bolt verifies signed events, the fake LLM answers, slack_sdk posts to the fake
Web API; each table row asserts the exact ``text`` of chat.postMessage, or the exact message the
model received.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channels.slack import mrkdwn
from gateway import Gateway
from gateway.app import build_app
from gateway.base.errors import ConfigError
from gateway.config.settings import Settings
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.slack import BOT_USER_ID, SIGNING_SECRET, TEAM_ID, FakeSlack, event_body, sign
from tests.conftest import Harness
from tests.test_slack import post_signed
from tests.test_slack_threads_and_delivery import im_event, mention_event

DM = "D0LAN2Q65"
_ts = itertools.count(1)


async def model_says(slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM,
                     markdown: str) -> dict[str, Any]:
    """Have the model answer ``markdown`` to a DM; return the chat.postMessage parameters."""
    fake_llm.script = [Scripted(body=completion(markdown))]
    count = len(fake_slack.calls_to("chat.postMessage")) + 1
    n = next(_ts)
    body = event_body(im_event("hi", f"1767227000.{n:06d}"), f"Ev0FMT{n:06d}")
    assert (await post_signed(slack, body)).status == 200
    posts = await fake_slack.wait_for("chat.postMessage", count)
    return posts[-1].params


# --- the model's Markdown as Slack mrkdwn ------------------------------------------------------
CONSTRUCTS = {
    "bold": ("**bold** text", "*bold* text"),
    "italic": ("an *italic* word", "an _italic_ word"),
    "strike": ("~~gone~~ now", "~gone~ now"),
    "inline code": ("run `a < b && c`", "run `a &lt; b &amp;&amp; c`"),
    "fenced code with language": ("```python\nif a < b:\n    print('x')\n```",
                                  "```\nif a &lt; b:\n    print('x')\n```"),
    "link": ("see [the docs](https://example.com/a?b=1&c=2)",
             "see <https://example.com/a?b=1&amp;c=2|the docs>"),
    "autolink": ("<https://example.com>", "<https://example.com|https://example.com>"),
    "bullet list": ("- one\n- two\n  - nested\n- three",
                    "•   one\n•   two\n    ◦   nested\n•   three"),
    "numbered list": ("1. one\n2. two\n   1. inner", "1.  one\n2.  two\n    1.  inner"),
    "quote": ("> quoted **line**\n> second line", "> quoted *line*\n> second line"),
    "heading": ("## Heading\nText under it", "*Heading*\n\nText under it"),
    "e-mail autolink": ("mail <ada@example.com> now",
                        "mail <mailto:ada@example.com|ada@example.com> now"),
    "numbered from five": ("5. five\n6. six", "5.  five\n6.  six"),
    "code in a quote": ("> run:\n> ```\n> ls <dir>\n> ```",
                        "> run:\n\n> ```\n> ls &lt;dir&gt;\n> ```"),
    "rule between paragraphs": ("# Title **b**\n\n---\n\nafter", "*Title b*\n\nafter"),
    "paragraphs and code": ("Try this:\n\n```sh\n#!/bin/sh\necho hi\n```\nThen rerun.",
                            "Try this:\n\n```\n#!/bin/sh\necho hi\n```\nThen rerun."),
}


@pytest.mark.parametrize(("markdown", "posted"), CONSTRUCTS.values(), ids=CONSTRUCTS.keys())
async def test_markdown_construct_is_posted_as_mrkdwn(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, markdown: str,
        posted: str) -> None:
    params = await model_says(slack, fake_slack, fake_llm, markdown)
    assert params["text"] == posted


ADVERSARIAL = {
    "broadcast and mention": ("say <!channel> & <@U2>", "say &lt;!channel&gt; &amp; &lt;@U2&gt;"),
    "every special mention": ("<!here> <!everyone> <#C1|general> <!subteam^S1|@devs>",
                              "&lt;!here&gt; &lt;!everyone&gt; &lt;#C1|general&gt; "
                              "&lt;!subteam^S1|@devs&gt;"),
    "numeric entities": ("&#60;!here&#62;", "&lt;!here&gt;"),
    "backslash escape": ("\\<!channel>", "&lt;!channel&gt;"),
    "raw html": ("<b>hi</b> & <script>", "&lt;b&gt;hi&lt;/b&gt; &amp; &lt;script&gt;"),
    "slack link syntax": ("a <http://x.y|evil> b", "a <http://x.y%7Cevil|http://x.y|evil> b"),
    "inline code": ("`<!here>`", "`&lt;!here&gt;`"),
    "code block": ("```\n<!channel> & <@U1>\n```", "```\n&lt;!channel&gt; &amp; &lt;@U1&gt;\n```"),
    "indented code": ("Run:\n\n    <!here> x", "Run:\n\n```\n&lt;!here&gt; x\n```"),
    "unclosed fence": ("```\nunclosed <!channel>", "```\nunclosed &lt;!channel&gt;\n```"),
    "link to a broadcast": ("[click](<!channel>)", "click"),
    "link to a user": ("[x](@U123) [y](#C1) [z](/relative) [j](javascript:alert(1))",
                       "x y z j"),
    "link breakout": ("[a|b>c](https://x.y/?q=a|b>c&d=<e>)",
                      "<https://x.y/?q=a%7Cb%3Ec&amp;d=%3Ce%3E|a|b&gt;c>"),
    "mention in a label": ("[<!here>](https://x.y)", "<https://x.y|&lt;!here&gt;>"),
    "label on two lines": ("[two\nlines](https://x.y)", "<https://x.y|two lines>"),
    "image alt": ("![<!here>](https://x.y/i.png)", "<https://x.y/i.png|&lt;!here&gt;>"),
    "image in a link": ("[![img](https://x/i.png)](https://y.z)", "<https://y.z|img>"),
    "unbalanced stars": ("5 * 3 & **not closed *either", "5 * 3 &amp; **not closed *either"),
    "underscores": ("__init__ & snake_case_name", "*init* &amp; snake_case_name"),
    "tildes": ("~approx~ & ~~struck~~", "~approx~ &amp; ~struck~"),
    "nested lists in a quote": ("> - a\n>   - b <!here>\n> - c",
                                "> •   a\n>     ◦   b &lt;!here&gt;\n> •   c"),
    "structural control characters": ("a\x02b\x03c\x04 & d", "abc &amp; d"),
}


@pytest.mark.parametrize(("markdown", "posted"), ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
async def test_adversarial_model_text_is_posted_escaped(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, markdown: str,
        posted: str) -> None:
    params = await model_says(slack, fake_slack, fake_llm, markdown)
    assert params["text"] == posted


async def test_replies_are_posted_without_link_previews(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    """Slack fetches a previewed URL at once: a link carrying data would leak unclicked."""
    params = await model_says(slack, fake_slack, fake_llm,
                              "[report](https://evil.example/?q=secret)")
    assert params["text"] == "<https://evil.example/?q=secret|report>"
    assert params["unfurl_links"] is False
    assert params["unfurl_media"] is False
    assert params["link_names"] is False


async def test_web_api_calls_share_one_kept_alive_connection(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    """slack_sdk alone opens an HTTP session, and a TCP connection, per call."""
    for markdown in ("one", "two", "three"):
        await model_says(slack, fake_slack, fake_llm, markdown)
    ports = {call.client_port for call in fake_slack.calls}
    assert [call.method for call in fake_slack.calls].count("chat.postMessage") == 3
    assert len(ports) == 1 and 0 not in ports


@pytest.mark.parametrize("invisible", [" ", "\n\n", "\x1f", "\u2028", "\x1c \x1d", "---"])
def test_invisible_markdown_converts_to_nothing_visible(invisible: str) -> None:
    assert mrkdwn.to_mrkdwn(invisible) == ("---" if invisible == "---" else "")


async def test_a_blank_chunk_posts_nothing(slack: Harness, fake_slack: FakeSlack) -> None:
    channel = slack.gateway.channels["slack"]
    await channel.send({"channel": DM}, " \n\n ")
    await channel.send({"channel": DM}, "---")  # a rule alone: shown as written
    assert [c.params["text"] for c in fake_slack.calls_to("chat.postMessage")] == ["---"]


async def test_a_failed_conversion_sends_the_text_escaped(
        slack: Harness, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any) -> str:
        raise RecursionError("too deep")

    monkeypatch.setattr(mrkdwn._Renderer, "render", broken)
    await slack.gateway.channels["slack"].send({"channel": DM}, " **hi** <!here> ")
    [post] = fake_slack.calls_to("chat.postMessage")
    assert post.params["text"] == "**hi** &lt;!here&gt;"


# --- property: no model text can notify anyone -------------------------------------------------
SLACK_LINK = re.compile(r"<(?:https?://|mailto:)[^\s<>|]+(?:\|[^<>]*)?>")
FORBIDDEN = ("<!channel>", "<!here>", "<!everyone>", "<@", "<#", "<!subteam")
FRAGMENTS = ["<!channel>", "<!here>", "<!everyone>", "<@U1>", "<#C1|x>", "<!subteam^S1>", "<",
             ">", "&", "&lt;", "&#60;", "&gt;", "&amp;", "\\", "[", "]", "](", ")", "(<", "|",
             "![", "https://x.y", "mailto:a@b.c", "@U2", "#C2", "!", "`", "```", "~~~", "\n",
             "\n\n", "    ", "*", "**", "_", "~", "~~", "> ", "- ", "1. ", "# ", "\x02",
             "\x03", "\x04", " "]
MODEL_TEXT = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)


def assert_notifies_nobody(markdown: str, posted: str) -> None:
    for forbidden in FORBIDDEN:
        assert forbidden not in posted
    links = SLACK_LINK.findall(posted)
    assert "<" not in SLACK_LINK.sub("", posted), "every < starts a link"
    # each link comes from a Markdown link (inline, autolink or image) the model wrote
    assert len(links) <= markdown.count("](") + markdown.count("<")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(markdown=MODEL_TEXT)
async def test_no_model_text_posts_a_mention_or_an_unwritten_link(
        slack: Harness, fake_slack: FakeSlack, markdown: str) -> None:
    fake_slack.calls.clear()
    await slack.gateway.channels["slack"].send({"channel": DM}, markdown)
    for post in fake_slack.calls_to("chat.postMessage"):
        assert_notifies_nobody(markdown, post.params["text"])


@settings(max_examples=2000, deadline=None)
@given(markdown=MODEL_TEXT | st.text())
def test_mrkdwn_conversion_never_notifies(markdown: str) -> None:
    assert_notifies_nobody(markdown, mrkdwn.to_mrkdwn(markdown))


# --- users' text as they typed it ---------------------------------------------------------------
BOT = f"<@{BOT_USER_ID}>"
TYPED = {
    "code block in a DM": ("fix this:\n```\ndef f():\n    return 1\n```",
                           "fix this:\n```\ndef f():\n    return 1\n```"),
    "mention then code": (f"{BOT} fix this:\n```\ndef f():\n    return 1\n```",
                          "fix this:\n```\ndef f():\n    return 1\n```"),
    "mention in the middle": (f"ask {BOT} about\n  - this\n  - that",
                              "ask about\n  - this\n  - that"),
    "mention at a line's end": (f"hello {BOT}\nnext line", "hello\nnext line"),
    "only the ends trimmed": (f"  {BOT}  two  spaces\n\tand a tab\n\n",
                              "two  spaces\n\tand a tab"),
    "entities": ("if a &lt; b &amp;&amp; c &gt; d", "if a < b && c > d"),
    "a typed entity": ("write &amp;lt; for <", "write &lt; for <"),
    "links": ("see <https://x.y/a?b=1&amp;c=2|the docs> and <http://example.com|example.com> "
              "or <mailto:ada@example.com|ada@example.com> or <https://x.y/raw>",
              "see the docs (https://x.y/a?b=1&c=2) and example.com or ada@example.com or "
              "https://x.y/raw"),
    "mentions": ("ask <@U2> or <@U3|bob> in <#C1|general> or <#C4>, <!here> <!channel> "
                 "<!subteam^S1|@devs> by <!date^1767225600^{date}|Jan 1>",
                 "ask @U2 or @bob in #general or #C4, @here @channel @devs by Jan 1"),
}


@pytest.mark.parametrize(("text", "received"), TYPED.values(), ids=TYPED.keys())
async def test_dm_reaches_the_model_as_typed(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM, text: str,
        received: str) -> None:
    body = event_body(im_event(text, "1767227100.000100"), "Ev0TYPED01")
    assert (await post_signed(slack, body)).status == 200
    await fake_slack.wait_for("chat.postMessage", 1)
    assert fake_llm.requests[-1].messages[-1]["content"] == received


async def test_channel_mention_reaches_the_model_as_typed(
        slack: Harness, fake_slack: FakeSlack, fake_llm: FakeLLM) -> None:
    event = mention_event("fix this:\n```\nx = a &lt; b\n```", "1767227200.000100")
    assert event["text"].startswith(f"{BOT} ")
    assert (await post_signed(slack, event_body(event, "Ev0TYPED02"))).status == 200
    [post] = await fake_slack.wait_for("chat.postMessage", 1)
    assert fake_llm.requests[-1].messages[-1]["content"] == "fix this:\n```\nx = a < b\n```"
    assert post.params["thread_ts"] == "1767227200.000100"
    # the fake model echoes: the user's "<" goes back escaped, inside the code block
    assert post.params["text"] == "echo: fix this:\n\n```\nx = a &lt; b\n```"


async def test_slash_command_text_is_decoded_and_its_answer_escaped(
        slack: Harness, fake_llm: FakeLLM) -> None:
    from gateway.testing.slack import slash_command_body

    answers = []
    for index, text in enumerate(["remember team R&amp;D &lt;!here&gt;", "memory"]):
        body = slash_command_body(text, f"trigger-format-{index}")
        headers = {**sign(SIGNING_SECRET, body),
                   "Content-Type": "application/x-www-form-urlencoded"}
        response = await slack.client.post("/slack/events", data=body, headers=headers)
        answers.append(await response.text())
    thread = await slack.gateway.store.get_thread(f"slack:{TEAM_ID}:{DM}")
    assert thread is not None
    assert await slack.gateway.store.get_pinned(thread.ref) == {"team": "R&D <!here>"}
    assert answers[1] == "Pinned facts:\n• team: R&amp;D &lt;!here&gt;"


@pytest.mark.parametrize("token", ["x", "xoxb-", "not-a-token", "xoxb short"])
async def test_a_malformed_bot_token_is_a_config_error_before_the_server_starts(
        token: str, make_settings: Callable[..., Settings]) -> None:
    gateway = Gateway(make_settings(slack_bot_token=token, slack_signing_secret="s" * 32))
    with pytest.raises(ConfigError, match="CLOUDYBOT_SLACK_BOT_TOKEN is not a Slack bot token"):
        await build_app(gateway)
