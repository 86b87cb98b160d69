"""The names the model sees: ``{server}__{tool}``, within OpenAI's rule
(``[a-zA-Z0-9_-]{1,64}``) and never two alike.

A character outside the rule becomes ``_``. A name that was changed that way, that is too
long, or whose server part could be read two ways (a server named with ``__`` in it or ``_``
at its end: ``a__b`` + ``c`` and ``a`` + ``b__c`` would both read ``a__b__c``) ends in ``_``
and 8 hex digits of a hash of the server's and the tool's real names, so it is stable across
restarts and two tools never share one (``get.item`` and ``get_item`` both keep a name).
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
    if safe == plain and len(plain) <= MAX_NAME and _ends_at_first_separator(server):
        return plain
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_HASH_CHARS]
    return f"{safe[:MAX_NAME - _HASH_CHARS - 1]}_{digest}"


def _ends_at_first_separator(server: str) -> bool:
    """Whether the first ``__`` of ``{server}__{tool}`` is the one after ``server`` (so the
    plain name says which server it is, whatever the tool's name)."""
    return SEPARATOR not in server and not server.endswith("_")
