"""The processes a gateway runs under it (a browser, say), read from ``/proc`` (Linux): for
tests that check nothing is left behind and benchmarks that weigh what they use."""

from __future__ import annotations

import os
from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(root: int) -> set[int]:
    """The live processes under ``root``, at any depth (zombies left out)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = {pid for pid, ppid in parents.items() if ppid == parent}
        found |= children
        frontier += children
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie is not)."""
    return {pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] != "Z"}


def named(pids: set[int], word: str) -> set[int]:
    """Those of ``pids`` whose command line contains ``word``."""
    found = set()
    for pid in pids:
        try:
            if word in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.add(pid)
        except OSError:
            continue
    return found


def pss_mb(pids: set[int]) -> float:
    """The proportional memory of ``pids`` in MB (shared pages counted once in all)."""
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
                total_kb += next((int(line.split()[1]) for line in rollup
                                  if line.startswith("Pss:")), 0)
        except OSError:
            continue
    return total_kb / 1024
