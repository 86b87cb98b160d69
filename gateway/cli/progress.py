"""Progress of long CLI work (purge, migrate): a bar on a terminal (tqdm), nothing otherwise,
where the command's one summary line says what was done."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Never

from tqdm import tqdm

Tick = Callable[[str, int, int], None]  # (what, done so far, in all)


@contextmanager
def progress_bar(unit: str, stream: IO[str] | None = None) -> Iterator[Tick]:
    """A callback that moves a bar (one per ``what``) when ``stream`` (stderr) is a
    terminal, and does nothing when it is not (a log file, a pipe)."""
    out = stream if stream is not None else sys.stderr
    bars: dict[str, tqdm[Never]] = {}

    def tick(what: str, done: int, total: int) -> None:
        if not out.isatty():
            return
        bar = bars.get(what)
        if bar is None:
            bar = bars[what] = tqdm(total=total, desc=what, unit=unit, file=out,
                                    dynamic_ncols=True, leave=True)
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield tick
    finally:
        for bar in bars.values():
            bar.close()
