"""The names the model sees: ``{server}__{tool}``, within OpenAI's rule
(``[a-zA-Z0-9_-]{1,64}``) and never two alike.

A character outside the rule becomes ``_``. A name that was changed that way, or that is
too long, ends in ``_`` and 8 hex digits of a hash of the server's and the tool's real names,
so it is stable across restarts and two tools never share one (``get.item`` and ``get_item``
both keep a name).
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 64
SEPARATOR = "__"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_HASH_CHARS = 8


def tool_name(server: str, tool: str) -> str:
    """The model's name for ``tool`` of ``server``."""
    plain = f"{server}{SEPARATOR}{tool}"
    safe = _UNSAFE.sub("_", plain)
    if safe == plain and len(plain) <= MAX_NAME:
        return plain
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{safe[:MAX_NAME - _HASH_CHARS - 1]}_{digest}"
