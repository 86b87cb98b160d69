"""JSON written on a turn's path, fast: orjson where it can, the standard library otherwise."""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON: what ``json.dumps(value, ensure_ascii=False,
    separators=(",", ":"))`` writes, encoded, at a twentieth of its cost (~2 µs for a 2.5 KB
    chat request instead of ~35).

    What orjson refuses — text holding a lone surrogate (a JSON ``"\\ud800"`` read from an
    LLM's answer), an int beyond 64 bits — is written by the standard library instead, with
    ``\\uXXXX`` escapes, so that it still is valid UTF-8.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def loads(data: bytes | str) -> Any:
    """JSON read on a turn's path (a provider's stream events): orjson, ~5x the standard
    library; what orjson refuses but JSON allows (a lone surrogate escape such as
    ``"\\ud800"``) is read by the standard library. Invalid JSON raises ``ValueError``;
    nesting past the standard library's recursion limit, ``RecursionError``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
