"""The recent scorer time of requests' calls: one window, read by both the Retry-After estimate (ops)
and the wait budget's estimate (service/wait_budget.py), fed once per call by the server's wiring.
*Extension:* audits' calls have a window of their own (kind AUDIT), apart from requests' kinds."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from .worker import AUDIT, KINDS, CallTiming

WINDOW = 64  # recent scorer calls of each kind the figures average over


class RecentCalls:
    """The last WINDOW successful calls of each kind: their rows and seconds."""

    def __init__(self, window: int = WINDOW) -> None:
        self._calls: dict[str, deque[tuple[int, float]]] = {
            kind: deque(maxlen=window) for kind in (*KINDS, AUDIT)
        }

    def scorer_call(self, call: CallTiming) -> None:
        """An engine observer: a request's call that succeeded is measured; a refused or failed one ends
        early or late for reasons of its own, and the engine's load is no request's."""
        if call.outcome == "ok" and call.scoring is not None:
            self.observe(call.kind, call.rows, call.scoring)

    def observe(self, kind: str, rows: int, seconds: float) -> None:
        """One scorer call of `kind` over `rows` rows took `seconds` (no rows, or not a kind: ignored)."""
        if kind in self._calls and rows > 0:
            self._calls[kind].append((rows, seconds))

    def per_row(self, kind: str) -> float | None:
        """Recent seconds per row of `kind` (total time over total rows); None before its first call."""
        calls = self._calls[kind]
        if not calls:
            return None
        return sum(seconds for _, seconds in calls) / sum(rows for rows, _ in calls)

    def per_call(self, kind: str) -> float | None:
        """Recent mean seconds of one call of `kind`; None before its first call."""
        calls = self._calls[kind]
        return sum(seconds for _, seconds in calls) / len(calls) if calls else None

    def seconds(self, rows: Mapping[str, int]) -> float:
        """What `rows` (by kind) cost at the recent per-row time of each kind; a kind not measured yet,
        or not a request's (the engine's load), at 0."""
        return sum(
            count * (self.per_row(kind) or 0.0)
            for kind, count in rows.items()
            if kind in self._calls
        )
