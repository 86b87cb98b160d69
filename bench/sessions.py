"""Session append + rotation check cost with a small and a large session file."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from gateway.memory.sessions import RotationRule, SessionStore

EVENTS = [{"type": "user", "content": "x" * 200, "messageId": 1},
          {"type": "assistant", "content": "y" * 400, "messageId": 2}]


def _grow(store: SessionStore, key: str, size: int) -> None:
    filler = [{"type": "note", "content": "z" * 1000}]
    while not store.path_for(key).exists() or store.path_for(key).stat().st_size < size:
        store.append(key, "bench", key, filler)


def append_and_check_us(file_bytes: int, turns: int = 2000) -> float:
    """Mean microseconds of one rotation check + one turn's append, at ``file_bytes``."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp), rule=RotationRule(30, 10**9),
                             count_message=lambda message: 0)
        key = "bench--t1"
        _grow(store, key, file_bytes)
        start = time.perf_counter()
        for _ in range(turns):
            store.rotation_due(key)
            store.exchanges(key, since_id=1)  # held after the first call, as in a turn
            store.append(key, "bench", "t1", EVENTS)
        return (time.perf_counter() - start) / turns * 1e6


def run() -> dict[str, float]:
    """The figures: µs per turn at 10 KB and 190 KB (best of seven interleaved rounds each,
    so that a noisy moment hits both alike), and their ratio."""
    small: list[float] = []
    large: list[float] = []
    for _ in range(7):
        small.append(append_and_check_us(10 * 1024))
        large.append(append_and_check_us(190 * 1024))
    return {"session_us_10kb": min(small), "session_us_190kb": min(large),
            "session_ratio": min(large) / min(small)}


if __name__ == "__main__":
    figures = run()
    print(f"append + rotation check: 10 KB file {figures['session_us_10kb']:.1f} µs, "
          f"190 KB file {figures['session_us_190kb']:.1f} µs, "
          f"ratio {figures['session_ratio']:.2f}")
