"""Retry-After: how many seconds a refused caller should wait before trying again.

Rules: Retry-After's range is http/exchange.py's (`retry_after`: whole seconds, 1..60). A 429 `busy`
by count is estimated as the wait budget estimates an admitted call: the rows that would run
before a new call of the refused caller, given the engine's queues now (a turn each:
engine/dispatcher.py), priced at the recent per-row time of each kind (the one window of recent
calls, engine/recent.py); a caller refused its share hears when its own backlog is served, another
when its turn would come. A 429 from the wait budget is that budget's own estimate
(service/wait_budget.py), held to the same range. A 503 says
"not here, not now" and gets the floor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..engine.recent import RecentCalls
from ..http.exchange import MIN_RETRY_AFTER, retry_after


class RetryAfter:
    """Turns the engine's queues and the recent scorer calls into a wait."""

    def __init__(self, recent: RecentCalls, ahead: Callable[[str], Counter[str]]) -> None:
        self._recent = recent
        self._ahead = ahead

    def busy(self, caller: str) -> int:
        """Seconds until a call of `caller` sent now would begin (at least the floor)."""
        return retry_after(self._recent.seconds(self._ahead(caller)))

    @staticmethod
    def unavailable() -> int:
        """A 503 (draining, out of memory, connection cap): the floor."""
        return MIN_RETRY_AFTER
