"""Searching threads' text: the words of a query, and a snippet of a message around them.

Both stores index text the same way: a word is a run of letters and digits (punctuation, ``_``
and spaces separate words), compared in lower case, accents kept. A query's words each match
the start of a word, and a message (or title) matches when it holds them all.
"""

from __future__ import annotations

import re

from gateway.base.errors import BadRequest

MAX_QUERY_CHARS = 200
MAX_TERMS = 8
SNIPPET_CHARS = 160
_BEFORE = 40  # characters of context kept before the first match
_WORD = re.compile(r"[^\W_]+")
_SPACES = re.compile(r"\s+")


def search_terms(query: object) -> tuple[str, ...]:
    """The distinct words of a query, lower-cased, in order, the first ``MAX_TERMS`` of them
    (none when it holds no letter or digit: then nothing matches); 400 ``invalid_q`` for a
    query that is blank, holds NUL or is longer than ``MAX_QUERY_CHARS``."""
    if not isinstance(query, str) or not query.strip() or "\x00" in query:
        raise BadRequest("q must be text that is not blank", code="invalid_q")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"q must be at most {MAX_QUERY_CHARS} characters", code="invalid_q")
    return tuple(dict.fromkeys(_WORD.findall(query.lower())))[:MAX_TERMS]


def snippet(text: str, terms: tuple[str, ...]) -> str:
    """About ``SNIPPET_CHARS`` characters of ``text`` on one line, around the first word that
    starts with one of ``terms``, cut at spaces, "…" where text was left out."""
    line = _SPACES.sub(" ", text).strip()
    if len(line) <= SNIPPET_CHARS:
        return line
    starts = "|".join(re.escape(term) for term in terms)
    found = re.search(rf"(?<![^\W_])(?:{starts})", line, re.IGNORECASE)
    at = found.start() if found else 0
    start = max(0, at - _BEFORE)
    if start:
        space = line.find(" ", start, at)
        start = space + 1 if space >= 0 else start
    end = min(len(line), start + SNIPPET_CHARS)
    if end < len(line):
        space = line.rfind(" ", max(at, start + SNIPPET_CHARS // 2), end)
        end = space if space >= 0 else end
    return ("…" if start else "") + line[start:end].strip() + ("…" if end < len(line) else "")
