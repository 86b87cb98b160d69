"""Splitting a reply (the model's Markdown) into messages a platform accepts.

Each chunk is at most ``limit`` characters and is valid Markdown on its own: the split prefers
a paragraph break, then a line break, then a space (never cutting in the first half of a
chunk), and a code block cut by a split is closed at the end of its chunk and reopened, with
its language, at the start of the next — so every chunk renders as the model meant it.
"""

from __future__ import annotations

from dataclasses import dataclass

FENCE_MARKS = ("```", "~~~")


@dataclass(frozen=True)
class _Cut:
    """Where a chunk ends (``end``) and the next begins (``resume``: the separator dropped)."""

    end: int
    resume: int


def _cut(text: str, budget: int) -> _Cut:
    """The best place to end a chunk of at most ``budget`` characters of ``text``."""
    window = text[:budget + 1]  # a separator right after the budget still ends the chunk there
    for separator in ("\n\n", "\n", " "):
        at = window.rfind(separator, 0, budget + 1)
        if at >= budget // 2 and at > 0:
            resume = at + len(separator)
            if separator == "\n\n":  # a paragraph break may be followed by more blank lines
                while resume < len(text) and text[resume] == "\n":
                    resume += 1
            return _Cut(at, resume)
    return _Cut(budget, budget)


def _fence_after(piece: str, fence: str | None) -> str | None:
    """The code fence still open at the end of ``piece`` (its opening line), given the one
    open at its start; None when no block is open."""
    for line in piece.split("\n"):
        stripped = line.strip()
        if fence is None:
            if stripped.startswith(FENCE_MARKS):
                fence = stripped
        elif stripped.startswith(fence[:3]) and not stripped.strip(fence[0]):
            fence = None  # a line of only the fence's marks closes it
    return fence


def split_text(text: str, limit: int) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters (see the module docstring).
    Text that fits is one chunk; an empty text is one empty chunk."""
    chunks: list[str] = []
    rest, fence = text, None
    while True:
        opening = f"{fence}\n" if fence else ""
        if len(opening) + len(rest) <= limit:
            chunks.append(opening + rest)
            return chunks
        budget = limit - len(opening)
        cut = _cut(rest, budget)
        still_open = _fence_after(rest[:cut.end], fence)
        if still_open is not None:
            closing = "\n" + still_open[:3]
            cut = _cut(rest, budget - len(closing))
            still_open = _fence_after(rest[:cut.end], fence)
        closing = "\n" + still_open[:3] if still_open else ""
        if cut.end <= 0:  # a limit too small for fences: plain cuts, so it always progresses
            opening, closing, still_open = "", "", None
            cut = _Cut(limit, limit)
        piece = rest[:cut.end]
        chunks.append(opening + (piece if still_open else piece.rstrip()) + closing)
        rest, fence = rest[cut.resume:], still_open
