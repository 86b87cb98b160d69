"""Timestamps as the gateway writes them: ISO-8601 UTC with microseconds, ending in ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime, timespec: str = "microseconds") -> str:
    """``moment`` (timezone-aware) as ISO-8601 UTC; such strings sort as the times do."""
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def iso_utc(epoch: float) -> str:
    """A moment given in epoch seconds, as :func:`iso` writes it."""
    return iso(datetime.fromtimestamp(epoch, UTC))
