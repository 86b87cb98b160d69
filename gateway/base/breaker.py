"""A circuit breaker: stop calling what keeps failing, and try it again now and then.

Closed, calls go through and consecutive failures are counted; ``failures`` in a row open it.
Open, :meth:`CircuitBreaker.allows` says no until ``cooldown`` seconds have passed; then it is
half-open and lets one call through (the probe): the probe's success closes it, its failure
opens it again for another cool-down. Calls while the probe is in flight are not let through.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class State(enum.IntEnum):
    """A breaker's state; its value is what ``/metrics`` shows."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class CircuitBreaker:
    """One breaker (one provider's, say); ``clock`` is monotonic seconds."""

    def __init__(self, failures: int, cooldown: float, clock: Callable[[], float]) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self.clock = clock
        self.state = State.CLOSED
        self.failures = 0  # in a row
        self._opened_at = 0.0
        self._probing = False

    def allows(self) -> bool:
        """Whether a call may go through now; True once after the cool-down (the probe,
        which the caller must end with :meth:`succeeded`, :meth:`failed` or :meth:`abandoned`)."""
        if self.state is State.CLOSED:
            return True
        if self.state is State.OPEN and self.clock() - self._opened_at >= self.cooldown:
            self.state = State.HALF_OPEN
        if self.state is State.HALF_OPEN and not self._probing:
            self._probing = True
            return True
        return False

    def succeeded(self) -> None:
        """A call went through: the breaker closes and the count starts again."""
        self.state = State.CLOSED
        self.failures = 0
        self._probing = False

    def failed(self) -> None:
        """A call failed: counted; the breaker opens at the threshold, or again when the probe
        failed."""
        self.failures += 1
        self._probing = False
        if self.state is State.HALF_OPEN or self.failures >= self.threshold:
            self.state = State.OPEN
            self._opened_at = self.clock()

    def abandoned(self) -> None:
        """A call let through ended with neither answer nor failure (it was cancelled): a
        probe may go again."""
        self._probing = False
