"""Retry-After: how many seconds a refused caller should wait before trying again.

Rules: Retry-After's range is http/exchange.py's (`retry_after`: whole seconds, 1..60). A 429 `busy` is
estimated from the queue: the calls in progress are served one at a time, so a
slot frees after about (in progress x recent mean scorer-call time); a 429 from the wait
budget is that budget's own estimate (service/wait_budget.py), held to the same range. A 503 says
"not here, not now" and gets the floor.
"""

from __future__ import annotations

from collections import deque

from ..http.exchange import MIN_RETRY_AFTER, retry_after

WINDOW = 64  # recent scorer calls the estimate averages over


class RetryAfter:
    """Keeps the durations of recent scorer calls and turns them into a wait."""

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[float] = deque(maxlen=window)

    def observe(self, scoring_seconds: float) -> None:
        self._recent.append(scoring_seconds)

    def mean(self) -> float:
        """Mean of the recent scorer-call durations; 0 before the first call."""
        return sum(self._recent) / len(self._recent) if self._recent else 0.0

    def busy(self, in_progress: int) -> int:
        """Seconds until a slot is likely free, with `in_progress` calls ahead."""
        return retry_after(self.mean() * max(in_progress, 1))

    @staticmethod
    def unavailable() -> int:
        """A 503 (draining, out of memory, connection cap): the floor."""
        return MIN_RETRY_AFTER
