"""The model's Markdown as Telegram messages: plain text plus ``MessageEntity`` formatting.

:func:`formatted` converts with ``telegramify-markdown`` (bold, italic, ``code``, code blocks
with their language, links, lists, quotes...): no escaping or parse mode is involved, so no text
can break the formatting. Raw HTML the model writes (``<script>``, ``<b>``) is shown as written,
not dropped. :func:`plain` is the fallback when Telegram refuses the entities: the Markdown
source itself. Both cut their text into messages of at most 4096 UTF-16 code units (Telegram's
limit; an emoji counts two), at a paragraph, line or word boundary when one is near, with the
entities cut and moved along.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyromark
import telegramify_markdown
from telegram import MessageEntity
from telegram.constants import MessageLimit

LIMIT = MessageLimit.MAX_TEXT_LENGTH  # UTF-16 code units per message
# What telegramify-markdown parses with (converter.STANDARD_OPTIONS): the same reading here.
OPTIONS = (pyromark.Options.ENABLE_TABLES | pyromark.Options.ENABLE_STRIKETHROUGH
           | pyromark.Options.ENABLE_TASKLISTS | pyromark.Options.ENABLE_MATH)
LINK_SCHEMES = ("http://", "https://", "tg://")  # what a text_link may open
_ASCII_PUNCTUATION = frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


@dataclass(frozen=True)
class Part:
    """One Telegram message: its text and the formatting entities over it."""

    text: str
    entities: tuple[MessageEntity, ...] = ()


def formatted(markdown: str, limit: int = LIMIT) -> list[Part]:
    """``markdown`` as formatted messages; empty if it renders to no visible text."""
    text, found = telegramify_markdown.convert(literal_html(markdown))
    entities = [
        MessageEntity(entity.type, entity.offset, entity.length, url=entity.url,
                      language=entity.language, custom_emoji_id=entity.custom_emoji_id)
        for entity in found
        if entity.type != "text_link" or (entity.url or "").lower().startswith(LINK_SCHEMES)
    ]
    return split(text, entities, limit)


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
    offsets = [0] * (len(text) + 1)
    units = 0
    for index, char in enumerate(text):
        offsets[index] = units
        units += 2 if ord(char) > 0xFFFF else 1
    offsets[len(text)] = units
    return offsets


def split(text: str, entities: Sequence[MessageEntity], limit: int = LIMIT) -> list[Part]:
    """Cut ``text`` into parts of at most ``limit`` UTF-16 code units: at the last paragraph
    break, else line break, else space in the second half of the window, else at the limit.
    Whitespace at the edges of a part is dropped unless an entity covers it (a code block's
    indentation); entities are clipped to each part and their offsets made relative to it."""
    units = utf16_offsets(text)
    covered = [(e.offset, e.offset + e.length) for e in entities]

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
            window_end = start
            while window_end < end_of_text and units[window_end + 1] - units[start] <= limit:
                window_end += 1
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


def _clip(entities: Sequence[MessageEntity], start: int, end: int) -> tuple[MessageEntity, ...]:
    """The parts of ``entities`` within UTF-16 ``[start, end)``, offset from ``start``."""
    clipped = []
    for entity in entities:
        first, last = max(entity.offset, start), min(entity.offset + entity.length, end)
        if last > first:
            clipped.append(MessageEntity(entity.type, first - start, last - first,
                                         url=entity.url, language=entity.language,
                                         custom_emoji_id=entity.custom_emoji_id))
    return tuple(clipped)
