"""Timestamps as the gateway writes them: ISO-8601 UTC with microseconds, ending in ``Z``."""

from __future__ import annotations

import math
from datetime import UTC, datetime

# A turn writes several timestamps within the same second: the formatted second (and the
# month) are kept and only the rest is formatted, ~0.5 µs instead of ~4-5 µs a call.
_second: tuple[int, str] = (-1, "")
_month: tuple[float, float, str] = (0.0, 0.0, "")


def iso(moment: datetime, timespec: str = "microseconds") -> str:
    """``moment`` (timezone-aware) as ISO-8601 UTC; such strings sort as the times do."""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def iso_utc(epoch: float) -> str:
    """A moment given in epoch seconds, as :func:`iso` writes it."""
    global _second
    fraction, whole = math.modf(epoch)  # rounded as datetime.fromtimestamp rounds
    second, micros = int(whole), round(fraction * 1_000_000)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    elif micros < 0:
        second, micros = second - 1, micros + 1_000_000
    if _second[0] != second:
        _second = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{micros:06d}Z"


def month_of(epoch: float) -> str:
    """The UTC calendar month (``YYYY-MM``) of a moment given in epoch seconds."""
    global _month
    start, end, month = _month
    # Within a microsecond of a month's edge datetime's rounding decides: ask it.
    if not start + 1e-6 <= epoch < end - 1e-6:
        moment = datetime.fromtimestamp(epoch, UTC)
        first = datetime(moment.year, moment.month, 1, tzinfo=UTC)
        after = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
        month = first.strftime("%Y-%m")
        _month = (first.timestamp(), after.timestamp(), month)
    return month


def epoch_of(stamp: str) -> float:
    """An ISO-8601 time (as :func:`iso` writes it) in epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
