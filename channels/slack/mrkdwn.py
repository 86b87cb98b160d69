"""Text between the model and Slack, both ways.

Out: :func:`to_mrkdwn` turns one chunk of the model's Markdown into Slack mrkdwn with
``slackify-markdown``, whose renderer is subclassed where it is unsafe or lossy (each measured on
slackify-markdown 0.2.4; ``tests/test_slack_format.py`` pins the exact results):

- it keeps ``<!channel>``, ``<!here>``, ``<@U…>``, ``<#C…>`` in text on purpose, and decodes
  ``&lt;!here&gt;``, ``&#60;!here&#62;`` and ``\\<!here>`` into them: a live ping. Here every
  ``&``, ``<`` and ``>`` of text is escaped;
- inline code and code blocks are not escaped at all (``<!channel>`` inside code still pings);
- a link's destination is not checked (``[x](@U1)`` became ``<@U1|x>``, a mention;
  ``[x](<!channel>)`` became ``<!channel|x>``) and its label and an image's alt text were not
  escaped (``[<!here>](https://x.y)``); ``<!subteam^S1|@devs>`` parses as an e-mail autolink.
  Here only ``http(s)://`` and plain ``mailto:`` destinations become Slack links, with ``&<>``
  escaped and ``|`` percent-encoded in the URL; any other link shows its label only (an
  autolink, its text in escaped brackets);
- only the first line of a multi-line quote was quoted; here every line is (nested quotes are
  flattened: Slack has one level);
- a nested list was followed by a blank line inside its parent list;
- the first line of a code block was dropped when it began with ``#!`` (a shebang).

The rest is the library's: ``*bold*``, ``_italic_``, ``~strike~``, headings in bold, lists
with ``•``/``1.``, code fences without their language (Slack has no highlighting). Slack has no
escape for ``*``, ``_``, ``~`` or a backtick, so a literal ``\\*`` the model wrote may still
format; that changes looks, never who is notified.

In: :func:`from_slack` turns a user's message back into what they typed: the bot's own mention
removed, Slack's markup made readable, ``&amp;`` ``&lt;`` ``&gt;`` decoded; line breaks and
indentation kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from slackify_markdown.slackify import SlackifyMarkdown  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

# Markers the renderer puts around a quote, turned into "> " line prefixes afterwards. Like the
# library's own "\x02", they are removed from the model's text first, so they cannot collide.
QUOTE_OPEN, QUOTE_CLOSE = "\x03", "\x04"
NEW_LINE: str = SlackifyMarkdown.NEW_LINE  # the library's "structural newline"
_MARKERS = {ord(NEW_LINE): None, ord(QUOTE_OPEN): None, ord(QUOTE_CLOSE): None}
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+")


def escape(text: str) -> str:
    """Escape Slack's three control characters, ``&`` first."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_url(url: str) -> str:
    # markdown-it already percent-encodes "<", ">", "|" and spaces in a destination; this
    # does not rely on it.
    return escape(url).replace("|", "%7C")


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


def _quote_lines(rendered: str) -> str:
    """Prefix every non-empty line between quote markers with ``> `` and drop the markers."""
    out: list[str] = []
    depth, line_start = 0, True
    for char in rendered:
        if char == QUOTE_OPEN:
            depth += 1
        elif char == QUOTE_CLOSE:
            depth -= 1
        else:
            is_break = char in ("\n", NEW_LINE)
            if line_start and depth and not is_break:
                out.append("> ")
            out.append(char)
            line_start = is_break
    return "".join(out)


class _SlackRenderer(SlackifyMarkdown):  # type: ignore[misc]
    """slackify-markdown's renderer, escaping everything it emits that the model wrote."""

    def __init__(self, markdown_text: Any) -> None:
        super().__init__(markdown_text)
        self._links: list[str] = []  # per open link: what closes it

    def render(self, tokens: Sequence[Token], options: OptionsDict, env: EnvType) -> str:
        kept = [token for token in tokens if token.type in self.SUPPORTED_TOKENS]
        rendered = _quote_lines(RendererHTML.render(self, kept, options, env))
        rendered = self._NEW_LINE_CAP_RE.sub(NEW_LINE * 2, rendered)
        return str(rendered.replace(NEW_LINE, "\n").strip("\n"))

    def renderToken(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                    env: EnvType) -> str:
        # An inline token nobody renders (RendererHTML would write an HTML tag): its text only.
        return escape(tokens[idx].content)

    def text(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
             env: EnvType) -> str:
        return escape(tokens[idx].content)

    def softbreak(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                  env: EnvType) -> str:
        return " " if self._links else "\n"  # a link's label stays on one line

    hardbreak = softbreak

    def code_inline(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                    env: EnvType) -> str:
        return f"`{escape(tokens[idx].content)}`"

    def fence(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
              env: EnvType) -> str:
        content = tokens[idx].content
        if content and not content.endswith("\n"):  # a fence left open at the end
            content += "\n"
        return f"```\n{escape(content)}```\n"

    code_block = fence

    def link_open(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                  env: EnvType) -> str:
        token = tokens[idx]
        href = token.attrs.get("href", "")
        if isinstance(href, str) and _linkable(href) and not self._links:
            label = tokens[idx + 1].type != "link_close"
            self._links.append(">")
            return f"<{_escape_url(href)}" + ("|" if label else "")
        if token.markup == "autolink":  # "<!subteam^S1|@devs>" parses as an e-mail autolink
            self._links.append("&gt;")
            return "&lt;"
        self._links.append("")  # any other link: its label only
        return ""

    def link_close(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                   env: EnvType) -> str:
        return self._links.pop()

    def image(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
              env: EnvType) -> str:
        src, alt = tokens[idx].attrs.get("src", ""), escape(tokens[idx].content)
        if self._links or not (isinstance(src, str) and _linkable(src)):
            return alt  # inside a link's label a second "<" would break it
        return f"<{_escape_url(src)}" + (f"|{alt}>" if alt else ">")

    def bullet_list_close(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                          env: EnvType) -> str:
        closing = str(super().bullet_list_close(tokens, idx, options, env))
        return "" if self._list_depth else closing  # no blank line after a nested list

    def ordered_list_close(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                           env: EnvType) -> str:
        closing = str(super().ordered_list_close(tokens, idx, options, env))
        return "" if self._list_depth else closing

    def blockquote_open(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                        env: EnvType) -> str:
        return QUOTE_OPEN

    def blockquote_close(self, tokens: Sequence[Token], idx: int, options: OptionsDict,
                         env: EnvType) -> str:
        return QUOTE_CLOSE + NEW_LINE


def to_mrkdwn(markdown: str) -> str:
    """Slack mrkdwn for ``markdown``: formatted, with no mention, ping or link the model did not
    write as a Markdown link. Falls back to the escaped text if the conversion fails."""
    text = markdown.translate(_MARKERS)
    try:
        rendered = str(_SlackRenderer(text).slackify())
    except Exception as exc:  # e.g. RecursionError on absurd nesting: never lose the reply
        log.warning("slack: Markdown conversion failed (%s); sending the text escaped",
                    type(exc).__name__)
        rendered = ""
    return rendered or escape(text.strip())


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
