"""Thread titles: the one a first message gives, and checking the one a user sets.

A title is one line of plain text: no control characters, no line or paragraph separators,
no bidirectional overrides (which would let a title reorder the text shown after it).
"""

from __future__ import annotations

import re

from gateway.base.errors import BadRequest

MAX_TITLE_CHARS = 120  # what a user may set
DERIVED_TITLE_CHARS = 80  # what a first message gives, "…" included
FIRST_MESSAGE_CHARS = 400  # of the first message the stores read to make one
# What a one-line title must not hold, as a regular expression's character class (the API's
# description states it with the same text): control characters (Unicode's Cc), surrogates
# (Cs), line and paragraph separators (Zl, Zp) and bidirectional controls.
UNPRINTABLE_CLASS = (r"\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029"
                     r"\u200e\u200f\u202a-\u202e\u2066-\u2069")
_UNPRINTABLE = re.compile(f"[{UNPRINTABLE_CLASS}]")
_SPACES = re.compile(r"\s+")


def _unprintable(char: str) -> bool:
    """A character a one-line title must not hold."""
    return _UNPRINTABLE.match(char) is not None


def derived_title(first_message: str) -> str:
    """A title from a thread's first message: one line, whitespace runs made one space,
    unprintable characters dropped, and cut at a word boundary to at most
    ``DERIVED_TITLE_CHARS`` characters, ending in "…" when cut ("" for an empty message)."""
    line = _SPACES.sub(" ", "".join(" " if c.isspace() else c for c in first_message
                                    if c.isspace() or not _unprintable(c))).strip()
    if len(line) <= DERIVED_TITLE_CHARS:
        return line
    room = DERIVED_TITLE_CHARS - 1  # for the "…"
    space = line.rfind(" ", 0, room + 1)
    cut = line[:space] if space >= room // 2 else line[:room]
    return cut.rstrip(" ,;:.-") + "…"


def checked_title(value: object) -> str:
    """A title a user sets: a string of 1 to ``MAX_TITLE_CHARS`` characters once trimmed,
    on one line, with no control characters; 400 ``invalid_title`` otherwise."""
    if not isinstance(value, str):
        raise BadRequest("title must be a string, or null for the first message's",
                         code="invalid_title")
    title = value.strip()
    if not title:
        raise BadRequest("title must not be empty", code="invalid_title")
    if len(title) > MAX_TITLE_CHARS:
        raise BadRequest(f"title must be at most {MAX_TITLE_CHARS} characters",
                         code="invalid_title")
    if any(_unprintable(c) for c in title):
        raise BadRequest("title must be one line without control characters",
                         code="invalid_title")
    return title
