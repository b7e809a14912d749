"""Retry-After: how many seconds a refused caller should wait before trying again.

Rules: Retry-After's range is http/exchange.py's (`retry_after`: whole seconds, 1..60). A 429 `busy` is
estimated from the queue: the calls in progress are served one at a time, so a
slot frees after about (in progress x the recent mean scorer-call time, read from the one
window of recent calls the wait budget reads too, engine/recent.py); a 429 from the wait
budget is that budget's own estimate (service/wait_budget.py), held to the same range. A 503 says
"not here, not now" and gets the floor.
"""

from __future__ import annotations

from ..engine.recent import RecentCalls
from ..http.exchange import MIN_RETRY_AFTER, retry_after


class RetryAfter:
    """Turns the recent scorer calls into a wait."""

    def __init__(self, recent: RecentCalls) -> None:
        self._recent = recent

    def busy(self, in_progress: int) -> int:
        """Seconds until a slot is likely free, with `in_progress` calls ahead."""
        return retry_after(self._recent.mean() * max(in_progress, 1))

    @staticmethod
    def unavailable() -> int:
        """A 503 (draining, out of memory, connection cap): the floor."""
        return MIN_RETRY_AFTER
