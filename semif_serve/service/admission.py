"""Admission by count (SEMIF_MAX_QUEUE): the one counter of POSTs in progress, shared by the service
(which takes and frees slots) and ops (which reports it)."""

from __future__ import annotations

from ..errors import ApiError


class Admission:
    """Counts POSTs in progress (queued or scoring); the next one past the limit is refused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_progress = 0
        self.refused = 0  # read at scrape time: semif_busy_refusals_total{reason="queue"}

    def enter(self) -> None:
        if self.in_progress >= self.limit:
            self.refused += 1
            raise ApiError("busy", f"{self.limit} requests already in progress; retry later")
        self.in_progress += 1

    def leave(self) -> None:
        self.in_progress -= 1
