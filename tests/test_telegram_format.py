"""Telegram text fidelity (SPEC §12): user text reaches the model as written, the model's
Markdown goes out as Telegram formatting, sends are paced to the Bot API's limits, and a
malformed bot token stops start-up. Real python-telegram-bot against the fake Bot API."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from channels.telegram import adapter
from gateway import Gateway
from gateway.base.errors import ConfigError
from gateway.base.logs import MASK, mask_secrets
from gateway.config.settings import Settings
from gateway.plugins.manager import PluginManager
from gateway.testing.fake_llm import FakeLLM, Scripted, completion
from gateway.testing.telegram import (
    BOT_USERNAME,
    SECRET,
    FakeTelegramChats,
    sent_entities,
    utf16_len,
)
from tests.conftest import Harness
from tests.helpers import assert_one_line_error, until
from tests.test_cli import acloudybot, free_port
from tests.test_telegram import payload, post_update

MENTION = f"@{BOT_USERNAME}"
GROUP = -4012345678
FORUM = -1001971186208


async def reply_to(tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM,
                   markdown: str, count: int = 1) -> list[Any]:
    """Have the model answer ``markdown`` to a private message; the sendMessage calls."""
    fake_llm.script = [Scripted(body=completion(markdown))]
    await post_update(tg, payload("tg_private_text.json"))
    sent = await fake_telegram.wait_for_messages(count)
    await tg.gateway.drain()
    return sent


def bold(offset: int, length: int) -> dict[str, Any]:
    return {"type": "bold", "offset": offset, "length": length}


NOTE = bold(0, 5)  # "**Note:** " in front of an adversarial string: "Note: " in bold

# --- the model's Markdown as Telegram entities ----------------------------------------------
FORMATTING = [
    pytest.param("**bold** text", "bold text", [bold(0, 4)], id="bold"),
    pytest.param("*italic* and _also this_", "italic and also this",
                 [{"type": "italic", "offset": 0, "length": 6},
                  {"type": "italic", "offset": 11, "length": 9}], id="italic"),
    pytest.param("run `pip install -e .` first", "run pip install -e . first",
                 [{"type": "code", "offset": 4, "length": 16}], id="inline-code"),
    pytest.param("```python\ndef f():\n    return 1\n```", "def f():\n    return 1",
                 [{"type": "pre", "offset": 0, "length": 21, "language": "python"}],
                 id="code-block-with-language"),
    pytest.param("see [the docs](https://example.com/docs?a=1&b=2)", "see the docs",
                 [{"type": "text_link", "offset": 4, "length": 8,
                   "url": "https://example.com/docs?a=1&b=2"}], id="link"),
    pytest.param("**List:**\n- one\n- two\n  - nested", "List:\n⦁ one\n⦁ two\n  ⦁ nested",
                 [bold(0, 5)], id="bullet-list"),
    pytest.param("**Steps:**\n1. first\n2. second", "Steps:\n1. first\n2. second",
                 [bold(0, 6)], id="numbered-list"),
    pytest.param("> quoted\n> more", "quoted\nmore",
                 [{"type": "blockquote", "offset": 0, "length": 11}], id="quote"),
    pytest.param("😀 **bold** 👍 _it_", "😀 bold 👍 it",  # offsets in UTF-16: an emoji is 2
                 [bold(3, 4), {"type": "italic", "offset": 11, "length": 2}],
                 id="utf16-offsets-after-emoji"),
    # adversarial: shown as written, never parsed as HTML, never a refused message
    pytest.param("**Note:** a < b & c > d", "Note: a < b & c > d", [NOTE], id="lt-amp-gt"),
    pytest.param("**Note:** <script>alert(1)</script>", "Note: <script>alert(1)</script>",
                 [NOTE], id="script-tag-kept-as-text"),
    pytest.param("**Note:** <b>not html</b>", "Note: <b>not html</b>", [NOTE],
                 id="html-tags-kept-as-text"),
    pytest.param("**Note:** 2 * 3 = 6 and *unbalanced", "Note: 2 * 3 = 6 and *unbalanced",
                 [NOTE], id="unbalanced-star"),
    pytest.param("**Note:** **", "Note: **", [NOTE], id="double-star-alone"),
    pytest.param("**Note:**\n```\nunclosed fence", "Note:\nunclosed fence",
                 [NOTE, {"type": "pre", "offset": 6, "length": 14}], id="unclosed-fence"),
    pytest.param("**Note:** _under_score_ and snake_case_name",
                 "Note: under_score and snake_case_name",
                 [NOTE, {"type": "italic", "offset": 6, "length": 11}], id="underscores"),
    pytest.param("**Note:** https://en.wikipedia.org/wiki/Foo_(bar)",
                 "Note: https://en.wikipedia.org/wiki/Foo_(bar)", [NOTE],
                 id="bare-url-with-parentheses"),
    pytest.param("**Note:** [Foo](https://en.wikipedia.org/wiki/Foo_(bar))", "Note: Foo",
                 [NOTE, {"type": "text_link", "offset": 6, "length": 3,
                         "url": "https://en.wikipedia.org/wiki/Foo_(bar)"}],
                 id="link-with-parentheses"),
    pytest.param("**Note:** [click](javascript:alert(1))", "Note: click", [NOTE],
                 id="script-link-not-linked"),
]


@pytest.mark.parametrize(("markdown", "text", "entities"), FORMATTING)
async def test_markdown_reply_is_sent_as_text_and_entities(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM,
        markdown: str, text: str, entities: list[dict[str, Any]]) -> None:
    [sent] = await reply_to(tg, fake_telegram, fake_llm, markdown)
    assert sent.params["text"] == text
    assert sent_entities(sent) == entities
    assert "parse_mode" not in sent.params  # entities, never a parse mode


async def test_refused_formatting_is_sent_again_as_plain_markdown(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    fake_telegram.refuse_entities = True  # 400 "Bad Request: can't parse entities: ..."
    markdown = "**bold** and `code`, see [docs](https://example.com)"
    refused, sent = await reply_to(tg, fake_telegram, fake_llm, markdown, count=2)
    assert sent_entities(refused) == [bold(0, 4), {"type": "code", "offset": 9, "length": 4},
                                      {"type": "text_link", "offset": 19, "length": 4,
                                       "url": "https://example.com"}]
    assert sent.params["text"] == markdown
    assert "entities" not in sent.params
    assert "parse_mode" not in sent.params
    assert len(fake_telegram.calls_to("sendMessage")) == 2
    assert await tg.gateway.store.pending_deliveries() == []


async def test_emoji_heavy_reply_stays_within_4096_utf16_units_a_message(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    words = [f"item{i} 🎉" for i in range(700)]  # ~6,300 characters, ~7,000 UTF-16 units
    fake_llm.script = [Scripted(body=completion(" ".join(words)))]
    await post_update(tg, payload("tg_private_text.json"))
    await until(lambda: " ".join(fake_telegram.texts()).split() == " ".join(words).split(),
                timeout=10)
    texts = fake_telegram.texts()
    assert all(utf16_len(text) <= 4096 for text in texts), [utf16_len(t) for t in texts]
    assert len(texts) == len(fake_telegram.calls_to("sendMessage"))  # none was refused
    assert all(text.endswith("🎉") for text in texts)  # cut between words


async def test_formatting_continues_across_a_cut_made_for_the_utf16_limit(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    # 2,504 characters of Markdown (one chunk), 5,000 UTF-16 units once rendered
    first, second = await reply_to(tg, fake_telegram, fake_llm, f"**{'😀' * 2500}**", count=2)
    assert first.params["text"] == "😀" * 2048
    assert sent_entities(first) == [bold(0, 4096)]
    assert second.params["text"] == "😀" * 452
    assert sent_entities(second) == [bold(0, 904)]


# --- user text reaches the model as written ---------------------------------------------------
MENTIONS = [
    pytest.param(f"{MENTION} fix this:\n```\ndef f():\n    return 1\n```", 0,
                 "fix this:\n```\ndef f():\n    return 1\n```", id="code-after-mention"),
    pytest.param(f"{MENTION}\n    indented()\n    more()", 0, "    indented()\n    more()",
                 id="indentation-of-the-first-line"),
    pytest.param(f"ask {MENTION} now:\n  - a\n  - b", 4, "ask now:\n  - a\n  - b",
                 id="mention-inside-a-line"),
    pytest.param(f"thanks {MENTION}!\n\nsee you", 7, "thanks!\n\nsee you",
                 id="mention-before-punctuation"),
    pytest.param(f"😀 {MENTION} hi\nthere", 3, "😀 hi\nthere", id="utf16-offset-after-emoji"),
    pytest.param(f"line one\n{MENTION}\nline three", 9, "line one\n\nline three",
                 id="mention-on-its-own-line"),
]


@pytest.mark.parametrize(("text", "offset", "expected"), MENTIONS)
async def test_group_mention_is_removed_and_nothing_else(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM,
        text: str, offset: int, expected: str) -> None:
    update = payload("tg_group_text.json", text=text)
    update["message"]["entities"] = [{"offset": offset, "length": len(MENTION),
                                      "type": "mention"}]
    await post_update(tg, update)
    await fake_telegram.wait_for_messages(1)
    assert fake_llm.requests[-1].messages[-1]["content"] == expected


async def test_command_for_the_bot_keeps_the_lines_after_it(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    text = f"/ask{MENTION}\nwhy does this fail?\n    x = f(\n    )"
    update = payload("tg_group_text.json", text=text)
    update["message"]["entities"] = [{"offset": 0, "length": 4 + len(MENTION),
                                      "type": "bot_command"}]
    await post_update(tg, update)
    await fake_telegram.wait_for_messages(1)
    assert fake_llm.requests[-1].messages[-1]["content"] == "why does this fail?\n    x = f(\n    )"


async def test_caption_mention_is_removed_and_its_lines_kept(
        tg: Harness, fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    update = payload("tg_photo.json")
    update["message"]["caption"] = f"{MENTION} what is this?\n  - leaves\n  - bark"
    update["message"]["caption_entities"] = [{"offset": 0, "length": len(MENTION),
                                              "type": "mention"}]
    await post_update(tg, update)
    await fake_telegram.wait_for_messages(1)
    content = fake_llm.requests[-1].messages[-1]["content"]
    assert content.endswith("what is this?\n  - leaves\n  - bark")
    assert MENTION not in content


# --- pacing: Telegram's limits are kept before sending -----------------------------------------
async def test_a_busy_group_is_paced_before_telegram_would_refuse(
        monkeypatch: pytest.MonkeyPatch, start_telegram: Callable[..., Awaitable[Harness]],
        fake_telegram: FakeTelegramChats, fake_llm: FakeLLM) -> None:
    """Twelve forum topics of one supergroup answered at once. Telegram (the fake) refuses a
    group more than 9 messages in half a second; the bot paces itself at 3 per half second
    (a burst of 3, then one every 1/6 s: at most 6 in any half second)."""
    monkeypatch.setattr(adapter, "GROUP_RATE", (3.0, 0.5))
    fake_telegram.group_flood = (9, 0.5)
    tg = await start_telegram()
    for topic in range(12):
        update = payload("tg_forum_topic_text.json", update_id=902349000 + topic,
                         text=f"/ask{MENTION} question {topic}")
        update["message"]["message_thread_id"] = 3000 + topic
        update["message"]["reply_to_message"]["message_thread_id"] = 3000 + topic
        update["message"]["reply_to_message"]["message_id"] = 3000 + topic
        assert (await post_update(tg, update)).status == 200
    sent = await fake_telegram.wait_for_messages(12, timeout=15)
    await tg.gateway.drain()
    assert fake_telegram.floods == 0
    assert len(sent) == 12
    assert {c.params["message_thread_id"] for c in sent} == {str(3000 + t) for t in range(12)}


# --- the bot token --------------------------------------------------------------------------
@pytest.mark.parametrize("token", ["x", "123456", "bot123456:abc", "123456:has space",
                                   "123456:abc\n"])
async def test_malformed_token_fails_start_up_before_any_request(
        make_settings: Callable[..., Settings], pm: PluginManager,
        fake_telegram: FakeTelegramChats, caplog: pytest.LogCaptureFixture,
        token: str) -> None:
    caplog.set_level(logging.INFO)
    gateway = Gateway(make_settings(telegram_token=token,
                                    telegram_api_base=fake_telegram.base_url,
                                    telegram_webhook_secret=SECRET), pm)
    with pytest.raises(ConfigError) as failure:
        await gateway.start()
    assert failure.value.message == (
        "CLOUDYBOT_TELEGRAM_TOKEN is not a bot token: expected digits, a colon and letters, "
        "digits, _ or - (123456:ABC-def, from @BotFather)")
    assert fake_telegram.calls == []
    # not registered for masking: "x" would rewrite every log line with an x in it
    line = f"httpx.ConnectError: cannot reach the Bot API (token {token})"
    assert mask_secrets(line) == line
    assert not [r for r in caplog.records if MASK in r.getMessage()]


async def test_serve_with_a_malformed_token_exits_with_one_config_error_line(
        data_dir: Path, fake_telegram: FakeTelegramChats) -> None:
    result = await acloudybot(data_dir, "serve", CLOUDYBOT_TELEGRAM_TOKEN="x",
                              CLOUDYBOT_TELEGRAM_API_BASE=fake_telegram.base_url,
                              CLOUDYBOT_PORT=str(free_port()))
    line = assert_one_line_error(result, 2)
    assert line.startswith("cloudybot: config error: CLOUDYBOT_TELEGRAM_TOKEN")
    assert MASK not in result.stdout + result.stderr
    assert fake_telegram.calls == []
