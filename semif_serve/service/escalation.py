"""A request's engine calls: the first over its rows, and (extension) orderings "adaptive"'s later ones.

Rules:
1. A later call scores exactly the next stage of the decisions that go on (decisions/adaptive.py
   says which: the half turn, then the rest), all of them in one call, and only once the previous
   call's results are read; a request with no escalated decision makes one call, as every request
   did before. At most three calls: a stage is never scored twice.
2. Each is made through the same `score` as the first (the body pipeline's `Pipeline.score`), so a
   failure of it fails the request as any scorer failure does: no silent fallback to the one-row
   answers. It is its caller's follow-up: it goes ahead of that caller's later calls, and still waits
   its turn among other callers' (engine/dispatcher.py). The first call is counted by the estimates
   at the request's worst case (its rows plus every row the later calls may add) until it ends.
3. A client that left is not scored for: its request's task is cancelled (the wire does that), and
   the cancellation reaches here at a call's await, before the next call is submitted.
4. Results that cannot be read (a scorer's broken answer) make no later call: the reply's build
   reads them again and refuses them, the logged 500 every such answer gets.
5. What was scored is counted as scored: the access log's rows are every call's (`timing`), and the
   engine's observers see each call as it ends.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..decisions import adaptive
from ..decisions.calibration_file import Table
from ..decisions.request_model import NONE_ESCALATED, DecideRequest, Escalated
from ..engine.worker import CallTiming

# One engine call's SemIf results and SemIf's own timing dict (None for a direct call): the body
# pipeline's `Scored` is one.
Call = tuple[list[dict[str, Any]], dict[str, Any] | None]


class Score(Protocol):
    """How the body pipeline makes one engine call over rows (`Pipeline.score`) in the request's caller's
    turn, timed in the CallTiming, its failures its envelopes; a follow-up goes ahead of that caller's
    later calls (engine/dispatcher.py), and `reserve` rows are counted ahead with a call until it ends."""

    def __call__(
        self,
        rows: list[dict[str, Any]],
        call: CallTiming,
        *,
        follow_up: bool = False,
        reserve: int = 0,
    ) -> Awaitable[Call]: ...


@dataclass(frozen=True)
class FollowUp:
    """One later call of an adaptive request: its results, SemIf's timing, and its CallTiming."""

    results: list[dict[str, Any]]
    timing: dict[str, Any] | None
    call: CallTiming = field(compare=False)


@dataclass(frozen=True)
class Calls:
    """What a request's engine calls gave back: the first call's results and SemIf timing, and where
    decisions escalated, every call's results merged (`progress`) and each later call."""

    first: list[dict[str, Any]]
    timing: dict[str, Any] | None
    progress: adaptive.Progress | None = None  # None: one call
    follow_ups: tuple[FollowUp, ...] = ()

    @property
    def escalated(self) -> Escalated:
        """The decisions that scored more than their first row, each with the rows it scored."""
        return NONE_ESCALATED if self.progress is None else self.progress.escalated

    def results(self) -> list[Mapping[str, Any]]:
        """Every result, as the request's views read them with `escalated`."""
        return list(self.first if self.progress is None else self.progress.results)


async def calls(
    request: DecideRequest, table: Table, rows: list[dict[str, Any]], call: CallTiming, score: Score
) -> Calls:
    """The request's first call over `rows` (timed in `call`), then each later stage while decisions go on."""
    first, timing = await score(rows, call, reserve=request.row_count - len(rows))
    progress = adaptive.Progress(first)
    follow_ups: list[FollowUp] = []
    while True:
        try:
            going = progress.going_on(request, table)
        except Exception:  # noqa: BLE001 - results the views cannot read either
            going = frozenset()  # building the reply refuses them: the logged 500 of any such
        if not going:
            break
        more = progress.next_rows(request, going)
        later = CallTiming("shared", len(more))
        results, semif_timing = await score(
            more, later, follow_up=True, reserve=progress.reserve(request, going)
        )
        follow_ups.append(FollowUp(results, semif_timing, later))
        progress = progress.then(request, going, results)
    if not follow_ups:
        return Calls(first, timing)
    return Calls(first, timing, progress, tuple(follow_ups))


def timing(first: CallTiming, calls: Calls) -> CallTiming:
    """The request's scorer time for the access log: the first call's, or every call's summed (rows,
    time queued, time scoring), as one record no engine observer sees."""
    if not calls.follow_ups or first.started is None or first.ended is None:
        return first
    every = (first, *(follow_up.call for follow_up in calls.follow_ups))
    queued = math.fsum(call.queued or 0.0 for call in every)
    scoring = math.fsum(call.scoring or 0.0 for call in every)
    started = first.submitted + queued
    return CallTiming(
        first.kind,
        sum(call.rows for call in every),
        first.submitted,
        started,
        started + scoring,
        every[-1].outcome,
    )
