"""Text between the model and Slack, both ways.

Out: :func:`to_mrkdwn` turns one chunk of the model's Markdown into Slack mrkdwn. It reads the
Markdown with ``pyromark`` (pulldown-cmark, CommonMark plus ``~~strike~~``; the Telegram channel
parses with it too) and writes mrkdwn from the parser's events in one pass: about 0.4 ms for a
full 3,900-character chunk, where a markdown-it renderer took 4 to 20 ms. Everything it writes that
the model wrote is escaped, because Slack acts on markup in text:

- every ``&``, ``<`` and ``>`` of text, inline code and code blocks is escaped, so
  ``<!channel>``, ``<!here>``, ``<@U…>``, ``<#C…>`` and ``<!subteam^…>`` show as written and
  notify nobody, whichever way the model spelled them (``&#60;!here&#62;``, ``\\<!here>``, raw
  HTML);
- only ``http(s)://`` and plain ``mailto:`` destinations become Slack links (``<url|label>``),
  with the URL percent-encoded (no space, ``|``, ``<`` or ``>`` left) and ``&`` escaped; any
  other link (``[x](@U1)``, ``[x](<!channel>)``, ``[x](javascript:…)``) shows its label only, an
  autolink that is not a web or e-mail address its text in escaped brackets; a link's label
  stays on one line, an image inside it shows its alt text;
- every line of a quote is quoted (nested quotes are flattened: Slack has one level).

The rest is Slack's own look, as ``slackify-markdown`` wrote it before: ``*bold*``,
``_italic_``, ``~strike~``, headings in bold, lists with ``•``/``◦``/``▪`` or their numbers,
indented four spaces per level, code fences without their language (Slack has no highlighting),
one blank line between blocks. Slack has no escape for ``*``, ``_``, ``~`` or a backtick, so a
literal ``\\*`` the model wrote may still format; that changes looks, never who is notified.

In: :func:`from_slack` turns a user's message back into what they typed: the bot's own mention
removed, Slack's markup made readable, ``&amp;`` ``&lt;`` ``&gt;`` decoded; line breaks and
indentation kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import pyromark

log = logging.getLogger(__name__)

OPTIONS = pyromark.Options.ENABLE_STRIKETHROUGH  # tables stay text: Slack cannot show them
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+")
BULLETS = ("•", "◦", "▪")  # by list depth
INDENT = "    "
# What a link's URL keeps as it is (RFC 3986's reserved and unreserved characters, and "%" of
# an escape already there); anything else, "|", "<", ">" and spaces included, is encoded.
URL_SAFE = ";/?:@&=+$,-_.!~*'()#%[]"
# Control characters nobody means in a chat message (the old renderer's markers among them).
_CONTROLS = {code: None for code in (0x02, 0x03, 0x04)}
_INLINE_MARKS = {"Emphasis": "_", "Strong": "*", "Strikethrough": "~"}


def escape(text: str) -> str:
    """Escape Slack's three control characters, ``&`` first."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_url(url: str) -> str:
    return escape(quote(url, safe=URL_SAFE))


def _linkable(url: str) -> bool:
    """Whether ``url`` may become a Slack link: an absolute web address or an e-mail one."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    scheme = parts.scheme.lower()
    if scheme == "mailto":
        return EMAIL.fullmatch(parts.path) is not None
    return scheme in LINK_SCHEMES and bool(parts.netloc)


class _Writer:
    """The mrkdwn being written: text, the blank lines between blocks (at most one in a row,
    none at the ends) and the ``> `` that begins each line of a quote."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.breaks = 0  # line breaks owed between blocks, written before the next text
        self.quoted = 0  # quote depth
        self.line_start = True
        self.inline = False  # the current block has text that no line break has ended yet

    def write(self, text: str) -> None:
        """Append ``text`` (already mrkdwn), after the line breaks owed."""
        if not text:
            return
        if self.breaks:
            if self.parts:
                self.parts.append("\n" * self.breaks)
                self.line_start = True
            self.breaks = 0
        if not self.quoted:
            self.parts.append(text)
            self.line_start = text.endswith("\n")
        else:
            for index, line in enumerate(text.split("\n")):
                if index:
                    self.parts.append("\n")
                    self.line_start = True
                if line:
                    self.parts.append("> " + line if self.line_start else line)
                    self.line_start = False
        self.inline = True

    def end_block(self, breaks: int) -> None:
        """Owe ``breaks`` line breaks (a block ended); together at most two, a blank line."""
        self.breaks = min(self.breaks + breaks, 2)
        self.inline = False

    def end_line(self) -> None:
        """End the line of text the current block left open, if it did (a tight list item)."""
        if self.inline:
            self.end_block(1)

    def text(self) -> str:
        return "".join(self.parts).strip("\n")


class _Renderer:
    """Slack mrkdwn from pulldown-cmark's events (see the module's docstring for the rules)."""

    def __init__(self, events: Sequence[Any]) -> None:
        self.events = events
        self.out = _Writer()
        self.lists: list[int | None] = []  # per open list: the next number, or None (bullets)
        self.links: list[str] = []  # per open link: what closes it
        self.heading = False
        self.code: list[str] | None = None  # a code block's text while inside it
        self.alt: list[str] | None = None  # an image's alt text while inside it
        self.images = 0  # images open (an image's alt text may hold another)
        self.image_source = ""

    def render(self) -> str:
        for index, event in enumerate(self.events):
            if isinstance(event, str):
                self._marker(event)
            elif "Text" in event:
                self._text(event["Text"])
            elif "Start" in event:
                self._start(event["Start"], index)
            elif "End" in event:
                self._end(event["End"])
            elif "Code" in event:
                self._inline(f"`{escape(event['Code'])}`", event["Code"])
            else:  # Html, InlineHtml and anything else with text: shown as written
                value = next(iter(event.values()))
                if isinstance(value, str):
                    self._text(value.rstrip("\n") if "Html" in event else value)
        return self.out.text()

    def _inline(self, mrkdwn: str, plain: str) -> None:
        if self.alt is not None:
            self.alt.append(plain)
        else:
            self.out.write(mrkdwn)

    def _text(self, text: str) -> None:
        if self.code is not None:
            self.code.append(text)
        elif self.alt is not None:
            self.alt.append(text)
        else:
            self.out.write(escape(text))

    def _marker(self, event: str) -> None:
        if event in ("SoftBreak", "HardBreak"):
            self._inline(" " if self.links else "\n", " ")  # a link's label stays on one line
        # a rule ("Rule") is left out: Slack has none

    def _start(self, tag: Any, index: int) -> None:
        if isinstance(tag, str):
            if tag in _INLINE_MARKS:
                if not (tag == "Strong" and self.heading):
                    self._inline(_INLINE_MARKS[tag], "")
            elif tag == "Item":
                self._item()
            else:  # Paragraph, HtmlBlock: a block
                self.out.end_line()
            return
        (name, value), = tag.items()
        if name == "Link":
            self._link(value, index)
        elif name == "Image":
            self.images += 1
            if self.alt is None:
                self.alt, self.image_source = [], value.get("dest_url", "")
        elif name == "List":
            self.out.end_line()
            self.lists.append(value)
        elif name == "CodeBlock":
            self.out.end_line()
            self.code = []
        elif name == "Heading":
            self.out.end_line()
            self.heading = True
            self.out.write("*")
        else:  # BlockQuote
            self.out.end_line()
            self.out.quoted += 1

    def _item(self) -> None:
        self.out.end_line()
        depth = len(self.lists)
        number = self.lists[-1] if self.lists else None
        indent = INDENT * max(depth - 1, 0)
        if number is None:
            self.out.write(f"{indent}{BULLETS[min(max(depth - 1, 0), len(BULLETS) - 1)]}   ")
        else:
            self.out.write(f"{indent}{number}.  ")
            self.lists[-1] = number + 1

    def _link(self, link: dict[str, Any], index: int) -> None:
        url = link.get("dest_url", "")
        if link.get("link_type") == "Email":
            url = f"mailto:{url}"
        if _linkable(url) and not self.links and self.alt is None:
            labelled = self.events[index + 1] != {"End": "Link"}
            self.links.append(">")
            self.out.write(f"<{_escape_url(url)}" + ("|" if labelled else ""))
        elif link.get("link_type") in ("Autolink", "Email"):
            self.links.append("&gt;")
            self._inline("&lt;", "")
        else:
            self.links.append("")  # any other link: its label only

    def _end(self, tag: Any) -> None:
        name = tag if isinstance(tag, str) else next(iter(tag))
        if name in _INLINE_MARKS:
            if not (name == "Strong" and self.heading):
                self._inline(_INLINE_MARKS[name], "")
        elif name == "Link":
            self._inline(self.links.pop(), "")
        elif name == "Image":
            self._image()
        elif name == "Item":
            self.out.end_line()
        elif name == "List":
            self.lists.pop()
            self.out.end_line()
            if not self.lists:
                self.out.end_block(1)  # a blank line after a list, none after a nested one
        elif name == "CodeBlock":
            self._code_block()
        elif name == "Heading":
            self.heading = False
            self.out.write("*")
            self.out.end_block(2)
        elif name == "BlockQuote":
            self.out.end_line()
            self.out.quoted -= 1
            self.out.end_block(1)
        else:  # Paragraph, HtmlBlock
            self.out.end_block(2)

    def _code_block(self) -> None:
        content = "".join(self.code or ())
        self.code = None
        if content and not content.endswith("\n"):  # a fence left open at the end
            content += "\n"
        self.out.write(f"```\n{escape(content)}```\n")
        self.out.inline = False

    def _image(self) -> None:
        self.images -= 1
        if self.images:
            return  # an image in an image's alt text: its text is the outer one's
        alt, self.alt = escape("".join(self.alt or ())), None
        src = self.image_source
        if self.links or not _linkable(src):
            self.out.write(alt)  # inside a link's label a second "<" would break it
        else:
            self.out.write(f"<{_escape_url(src)}" + (f"|{alt}>" if alt else ">"))


def to_mrkdwn(markdown: str) -> str:
    """Slack mrkdwn for ``markdown``: formatted, with no mention, ping or link the model did not
    write as a Markdown link. Falls back to the escaped text if the conversion fails."""
    text = markdown.translate(_CONTROLS)
    try:
        rendered = _Renderer(list(pyromark.events(text, options=OPTIONS))).render()
    except Exception as exc:  # never lose the reply over its formatting
        log.warning("slack: Markdown conversion failed (%s); sending the text escaped",
                    type(exc).__name__)
        rendered = ""
    # Nothing visible (str.strip also takes "\x1f" and "\u2028"): Slack would refuse it.
    return rendered if rendered.strip() else escape(text.strip())


# --- from Slack: what the user typed ---------------------------------------------------------
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">"}
_ENTITY = re.compile(r"&(?:amp|lt|gt);")
# Slack's markup ("<…>") and its entities, matched in one pass so that "&amp;lt;" (a user who
# typed "&lt;") is decoded once.
_SLACK_TEXT = re.compile(r"<([^<>]*)>|&(?:amp|lt|gt);")
BROADCASTS = frozenset({"here", "channel", "everyone"})


def _unescape(text: str) -> str:
    return _ENTITY.sub(lambda m: _ENTITIES[m.group(0)], text)


def _readable(markup: str) -> str:
    """``<@U1|ada>`` → ``@ada``, ``<#C1|general>`` → ``#general``, ``<!here>`` → ``@here``,
    ``<https://x.y|docs>`` → ``docs (https://x.y)``, a link shown as typed → as typed."""
    target, _, label = (_unescape(part) for part in markup.partition("|"))
    if target.startswith("@"):
        return "@" + (label.removeprefix("@") or target[1:])
    if target.startswith("#"):
        return "#" + (label or target[1:])
    if target.startswith("!"):  # <!here>, <!subteam^S1|@team>, <!date^…|fallback>
        name = target[1:].split("^")
        if name[0] in BROADCASTS:
            return "@" + name[0]
        return label or "@" + name[-1]
    if not label:
        return target
    if target in (label, f"http://{label}", f"https://{label}", f"mailto:{label}"):
        return label  # Slack linked what the user typed (example.com, a@b.c)
    return f"{label} ({target})"


def from_slack(text: str, bot_user_id: str | None = None) -> str:
    """What the user typed, for the model: the bot's own mention removed (with one space next to
    it), Slack's markup made readable, entities decoded; line breaks and indentation kept, only
    the ends trimmed."""
    if bot_user_id:
        mention = rf"<@{re.escape(bot_user_id)}(?:\|[^<>]*)?>"
        text = re.sub(mention + " ", "", text)
        text = re.sub(" ?" + mention, "", text)

    def convert(match: re.Match[str]) -> str:
        markup = match.group(1)
        return _ENTITIES[match.group(0)] if markup is None else _readable(markup)

    return _SLACK_TEXT.sub(convert, text).strip()
