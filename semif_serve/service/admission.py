"""Admission by count (SEMIF_MAX_QUEUE, and per caller SEMIF_MAX_QUEUE_PER_CALLER): the one counter of
POSTs in progress, shared by the service (which takes and frees slots) and ops (which reports it)."""

from __future__ import annotations

from ..errors import ApiError


class Admission:
    """Counts POSTs in progress (queued or scoring), in all and per caller; the queue's limit is checked
    first, then the caller's share, so a full queue reads as full whoever asks."""

    def __init__(self, limit: int, share: int | None = None) -> None:
        self.limit = limit
        self.share = limit if share is None else share
        self.in_progress = 0
        # A plain dict, not a Counter: Counter's missing-key and delete hooks are Python calls on every POST.
        self.by_caller: dict[str, int] = {}
        self.refused = 0  # read at scrape time: semif_busy_refusals_total{reason="queue"}
        self.refused_share = 0  # semif_busy_refusals_total{reason="caller"}

    def enter(self, caller: str) -> None:
        if self.in_progress >= self.limit:
            self.refused += 1
            raise ApiError("busy", f"{self.limit} requests already in progress; retry later")
        held = self.by_caller.get(caller, 0)
        if held >= self.share:
            self.refused_share += 1
            raise ApiError(
                "busy",
                f"caller {caller!r} already has {self.share} requests in progress, its share "
                "(SEMIF_MAX_QUEUE_PER_CALLER); retry later",
            )
        self.in_progress += 1
        self.by_caller[caller] = held + 1

    def leave(self, caller: str) -> None:
        self.in_progress -= 1
        held = self.by_caller[caller] - 1
        if held:
            self.by_caller[caller] = held
        else:
            del self.by_caller[caller]  # a caller removed by a reload leaves no entry behind
