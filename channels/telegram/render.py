"""The model's Markdown as Telegram messages: plain text plus ``MessageEntity`` formatting.

The entities are kept as the Bot API's JSON (``{"type": "bold", "offset": 0, "length": 4}``,
with ``url``, ``language`` or ``custom_emoji_id`` when set), which is what goes on the wire:
python-telegram-bot's ``MessageEntity`` objects cost ~10 µs each to build, and a 4,000-character
reply may carry a few hundred entities.

:func:`formatted` converts with ``telegramify-markdown`` (bold, italic, ``code``, code blocks
with their language, links, lists, quotes...): no escaping or parse mode is involved, so no text
can break the formatting. Raw HTML the model writes (``<script>``, ``<b>``) is shown as written,
not dropped. :func:`plain` is the fallback when Telegram refuses the entities: the Markdown
source itself. Both cut their text into messages of at most 4096 UTF-16 code units (Telegram's
limit; an emoji counts two), at a paragraph, line or word boundary when one is near, with the
entities cut and moved along.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyromark
import telegramify_markdown
from telegram.constants import MessageLimit

LIMIT = MessageLimit.MAX_TEXT_LENGTH  # UTF-16 code units per message
# What telegramify-markdown parses with (converter.STANDARD_OPTIONS): the same reading here.
OPTIONS = (pyromark.Options.ENABLE_TABLES | pyromark.Options.ENABLE_STRIKETHROUGH
           | pyromark.Options.ENABLE_TASKLISTS | pyromark.Options.ENABLE_MATH)
LINK_SCHEMES = ("http://", "https://", "tg://")  # what a text_link may open
_ASCII_PUNCTUATION = frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

Entity = dict[str, Any]  # the Bot API's MessageEntity, as JSON
_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")  # two UTF-16 code units each


@dataclass(frozen=True)
class Part:
    """One Telegram message: its text and the formatting entities over it."""

    text: str
    entities: tuple[Entity, ...] = ()


def formatted(markdown: str, limit: int = LIMIT) -> list[Part]:
    """``markdown`` as formatted messages; empty if it renders to no visible text."""
    text, found = telegramify_markdown.convert(literal_html(markdown))
    entities = [
        _entity(entity.type, entity.offset, entity.length, entity.url, entity.language,
                entity.custom_emoji_id)
        for entity in found
        if entity.type != "text_link" or (entity.url or "").lower().startswith(LINK_SCHEMES)
    ]
    return split(text, entities, limit)


def _entity(kind: str, offset: int, length: int, url: str | None = None,
            language: str | None = None, custom_emoji_id: str | None = None) -> Entity:
    """A MessageEntity as the Bot API's JSON (fields that are None left out)."""
    entity: Entity = {"type": kind, "offset": offset, "length": length}
    if url is not None:
        entity["url"] = url
    if language is not None:
        entity["language"] = language
    if custom_emoji_id is not None:
        entity["custom_emoji_id"] = custom_emoji_id
    return entity


def plain(text: str, limit: int = LIMIT) -> list[Part]:
    """``text`` as it is, without formatting, in messages Telegram accepts."""
    return split(text, [], limit)


def literal_html(markdown: str) -> str:
    """``markdown`` with its raw HTML backslash-escaped, so that it reads as text (the
    converter drops HTML; Telegram's entities cannot express it anyway)."""
    if "<" not in markdown:
        return markdown
    data = markdown.encode()
    ranges = [(span["start"], span["end"])
              for event, span in pyromark.events_with_range(markdown, options=OPTIONS)
              if isinstance(event, dict) and ("Html" in event or "InlineHtml" in event)]
    if not ranges:
        return markdown
    out = bytearray()
    cursor = 0
    for start, end in sorted(ranges):
        start = max(start, cursor)
        out += data[cursor:start]
        for byte in data[start:end]:
            if byte in _ASCII_PUNCTUATION:
                out.append(0x5C)  # a backslash: the next character is literal
            out.append(byte)
        cursor = max(cursor, end)
    out += data[cursor:]
    return out.decode()


def utf16_offsets(text: str) -> list[int]:
    """For each index of ``text`` (and its end), the offset in UTF-16 code units."""
    offsets: list[int] = []
    start = extra = 0  # extra: the characters beyond the BMP (two units each) seen so far
    for astral in _ASTRAL.finditer(text):
        end = astral.start() + 1  # up to and including the astral character: one unit each
        offsets.extend(range(start + extra, end + extra))
        start, extra = end, extra + 1
    offsets.extend(range(start + extra, len(text) + 1 + extra))
    return offsets


def split(text: str, entities: Sequence[Entity], limit: int = LIMIT) -> list[Part]:
    """Cut ``text`` into parts of at most ``limit`` UTF-16 code units: at the last paragraph
    break, else line break, else space in the second half of the window, else at the limit.
    Whitespace at the edges of a part is dropped unless an entity covers it (a code block's
    indentation); entities are clipped to each part and their offsets made relative to it."""
    units = utf16_offsets(text)
    covered = [(e["offset"], e["offset"] + e["length"]) for e in entities]

    def bare_space(index: int) -> bool:
        return text[index].isspace() and not any(a <= units[index] < b for a, b in covered)

    parts: list[Part] = []
    start, end_of_text = 0, len(text)
    while True:
        while start < end_of_text and bare_space(start):
            start += 1
        if start >= end_of_text:
            return parts
        cut = end_of_text
        if units[end_of_text] - units[start] > limit:
            # the last index whose offset is at most the limit past the start
            window_end = bisect_right(units, units[start] + limit, start, end_of_text + 1) - 1
            cut = window_end
            window = text[start:window_end]
            for separator in ("\n\n", "\n", " "):
                found = window.rfind(separator)
                if found >= len(window) // 2:
                    cut = start + found + len(separator)
                    break
        end = cut
        while end > start and bare_space(end - 1):
            end -= 1
        parts.append(Part(text[start:end], _clip(entities, units[start], units[end])))
        start = cut


def _clip(entities: Sequence[Entity], start: int, end: int) -> tuple[Entity, ...]:
    """The parts of ``entities`` within UTF-16 ``[start, end)``, offset from ``start``."""
    clipped = []
    for entity in entities:
        offset = entity["offset"]
        first, last = max(offset, start), min(offset + entity["length"], end)
        if last > first:
            unchanged = first - start == offset and last - first == entity["length"]
            clipped.append(entity if unchanged else  # entities are never changed in place
                           {**entity, "offset": first - start, "length": last - first})
    return tuple(clipped)
