"""When a job runs: read from what a user, the model or the API wrote, and its next runs.

Three kinds: ``at`` (once, at an ISO time; without an offset it is read in the job's time
zone), ``every`` (a fixed interval from its first run: ``30m``, ``2h``, ``1d``; elapsed time,
so it does not follow DST) and ``cron`` (five fields, matched against the local time of the
job's zone: a daily ``0 9 * * *`` runs at 09:00 local on both sides of a DST change; a time
that a spring-forward skips runs at the first minute after the gap, as Debian's cron does).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from gateway.base.errors import BadRequest
from gateway.store import JobRequest

KINDS = ("at", "every", "cron")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
INTERVAL = re.compile(r"(\d{1,8})\s*([smhdw]?)")  # no unit: seconds
MAX_MISSES = 1000  # misses recorded for one late run (the count beyond is kept too)
CRON_SAMPLE = 100  # runs looked at for a cron's shortest gap


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; 400 ``unknown_time_zone`` if there is none such."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadRequest(f"unknown time zone {name[:64]!r} (an IANA name such as "
                         "Europe/Paris)", code="unknown_time_zone") from None


@dataclass(frozen=True)
class When:
    """A job's timing as stored: its kind, its spec (an ISO UTC time, whole seconds, or a
    cron expression) and the time zone it is read and shown in."""

    kind: str
    spec: str
    time_zone: str

    def first(self, now: float) -> float | None:
        """The first run after ``now`` (an ``at`` in the past: None)."""
        if self.kind == "at":
            at = datetime.fromisoformat(self.spec).timestamp()
            return at if at > now else None
        if self.kind == "every":
            return now + int(self.spec)
        return self.after(now)

    def after(self, moment: float) -> float | None:
        """The first run strictly after ``moment`` (None: an ``at`` has no more)."""
        if self.kind == "at":
            return None
        if self.kind == "every":
            raise ValueError("an interval runs from its own due times: use following()")
        start = datetime.fromtimestamp(math.floor(moment), zone(self.time_zone))
        return next(iter(CronSim(self.spec, start))).timestamp()

    def following(self, due: float, moment: float) -> float | None:
        """The first run after ``moment`` of a job last due at ``due`` (an interval keeps its
        rhythm from ``due``)."""
        if self.kind != "every":
            return self.after(moment)
        step = int(self.spec)
        return due + (math.floor((moment - due) / step) + 1) * step

    def between(self, due: float, moment: float) -> Iterator[float]:
        """The runs after ``due`` and up to ``moment`` (those a late run missed), at most
        MAX_MISSES of them."""
        run = self.following(due, due)
        for _ in range(MAX_MISSES):
            if run is None or run > moment:
                return
            yield run
            run = self.following(run, run)

    def shortest_gap(self) -> float:
        """The shortest time between two runs (infinite for ``at``)."""
        if self.kind == "at":
            return math.inf
        if self.kind == "every":
            return float(self.spec)
        runs = CronSim(self.spec, datetime(2000, 1, 1, tzinfo=zone(self.time_zone)))
        times = [next(runs).timestamp() for _ in range(CRON_SAMPLE)]
        return min(b - a for a, b in itertools.pairwise(times))

    def to(self, action: str, text: str, misfire: str = "run_once") -> JobRequest:
        """A new job running at these times."""
        return JobRequest(self.kind, self.spec, self.time_zone, action, text, misfire)

    def describe(self) -> str:
        """How a person reads it: ``once``, ``every 2h``, ``cron 0 9 * * * (Europe/Paris)``."""
        if self.kind == "at":
            return "once"
        if self.kind == "every":
            return f"every {interval_text(int(self.spec))}"
        return f"cron {self.spec} ({self.time_zone})"


def interval_text(seconds: int) -> str:
    """``90`` -> ``90s``, ``7200`` -> ``2h``: the largest unit that divides it."""
    for unit, size in sorted(UNITS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def interval(text: str) -> int:
    """Seconds of ``30m``, ``2h``, ``1d`` (s, m, h, d, w; a bare number is seconds); 400
    ``invalid_schedule``."""
    found = INTERVAL.fullmatch(text.strip().lower())
    if found is None or int(found.group(1)) == 0:
        raise BadRequest(f"{text[:40]!r} is not an interval such as 30m, 2h or 1d",
                         code="invalid_schedule")
    return int(found.group(1)) * UNITS[found.group(2) or "s"]


def cron(expression: str, time_zone: str) -> When:
    """A checked 5-field cron timing; 400 ``invalid_schedule``."""
    expression = " ".join(expression.split())
    if len(expression.split()) != 5:
        raise BadRequest("a cron expression has five fields: minute hour day month weekday",
                         code="invalid_schedule")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=zone(time_zone)))
    except CronSimError as exc:
        raise BadRequest(f"bad cron expression {expression!r}: {exc}",
                         code="invalid_schedule") from None
    return When("cron", expression, time_zone)


def at(text: str, time_zone: str) -> When:
    """A one-time timing from an ISO 8601 time (read in ``time_zone`` without an offset)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(f"{text[:40]!r} is not an ISO 8601 time such as 2030-01-31T09:00",
                         code="invalid_schedule") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(time_zone))
    return When("at", moment.astimezone(UTC).isoformat(), time_zone)


def every(text: str, time_zone: str) -> When:
    """An interval timing (``30m``)."""
    return When("every", str(interval(text)), time_zone)


def of(kind: str, spec: str, time_zone: str) -> When:
    """A timing of ``kind`` from what a client sent (``at``: ISO time, ``every``: ``30m``,
    ``cron``: five fields); 400 when it cannot be read."""
    zone(time_zone)
    readers = {"at": at, "every": every, "cron": cron}
    if kind not in readers:
        raise BadRequest(f"kind must be one of {', '.join(KINDS)}", code="invalid_schedule")
    return readers[kind](spec, time_zone)


def local(epoch: float, time_zone: str) -> str:
    """``2030-01-31 09:00 CET``: a time as its zone shows it."""
    moment = datetime.fromtimestamp(epoch, zone(time_zone))
    return moment.strftime("%Y-%m-%d %H:%M %Z")


def after_words(text: str, now: float, time_zone: str) -> tuple[When, str]:
    """Read a timing at the start of ``text`` as a person types it after ``/remind``; the
    timing and the rest (the reminder's words). ``in 10m``, ``every 2h``, ``cron M H D M W``,
    ``at 09:00`` or ``09:00`` (the next one, local), ``tomorrow 09:00``, or an ISO time."""
    words = text.split()
    if not words:
        raise BadRequest("say when, then what", code="invalid_schedule")
    first = words[0].lower()
    if first == "in" and len(words) > 1:
        seconds = interval(words[1])
        moment = datetime.fromtimestamp(math.floor(now + seconds), UTC)  # whole seconds
        return When("at", moment.isoformat(), time_zone), " ".join(words[2:])
    if first == "every" and len(words) > 1:
        return every(words[1], time_zone), " ".join(words[2:])
    if first == "cron":
        return cron(" ".join(words[1:6]), time_zone), " ".join(words[6:])
    if first in ("at", "tomorrow", "today") and len(words) > 1:
        clock = words[1]
        rest = words[2:]
    else:
        clock, rest = words[0], words[1:]
    found = re.fullmatch(r"(\d{1,2})[:h](\d{2})", clock)
    if found is None:
        return at(words[0], time_zone), " ".join(words[1:])
    today = datetime.fromtimestamp(now, zone(time_zone))
    moment = today.replace(hour=int(found.group(1)) % 24, minute=int(found.group(2)),
                           second=0, microsecond=0)
    if first == "tomorrow" or moment.timestamp() <= now:
        moment = (moment.replace(tzinfo=None) + timedelta(days=1)).replace(
            tzinfo=zone(time_zone))
    return When("at", moment.astimezone(UTC).isoformat(), time_zone), " ".join(rest)
