"""A request's engine calls: the first over its rows, and (extension) orderings "adaptive"'s second.

Rules:
1. The second call scores exactly the escalated decisions' other rotations, all of them in one
   call (decisions/adaptive.py says which), and only once the first call's results are read; a
   request with no escalated decision makes one call, as every request did before.
2. It is made through the same `score` as the first (the body pipeline's `Pipeline.score`), so a
   failure of it fails the request as any scorer failure does: no silent fallback to the one-row
   answers. It is its caller's follow-up: it goes ahead of that caller's later calls, and still waits
   its turn among other callers' (engine/dispatcher.py). The first call is counted by the estimates
   at the request's worst case (its rows plus every row the second may add) until it ends.
3. A client that left is not scored for: its request's task is cancelled (the wire does that), and
   the cancellation reaches here at the first call's await, before a second call is submitted.
4. First results that cannot be read (a scorer's broken answer) make no second call: the reply's
   build reads them again and refuses them, the logged 500 every such answer gets.
5. What was scored is counted as scored: the access log's rows are both calls' (`timing`), and the
   engine's observers see each call as it ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..decisions import adaptive
from ..decisions.calibration_file import Table
from ..decisions.request_model import DecideRequest
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
class Calls:
    """What a request's engine calls gave back: the first call's results and SemIf timing, and where
    decisions escalated, the second call's."""

    first: list[dict[str, Any]]
    timing: dict[str, Any] | None
    escalated: frozenset[int] = frozenset()  # indices of the request's escalated decisions
    # No second call: an empty, immutable default, so a request that does not escalate allocates none.
    second: tuple[Sequence[Mapping[str, Any]], Mapping[str, Any] | None] = ((), None)
    second_call: CallTiming | None = field(default=None, compare=False)

    def results(self, request: DecideRequest) -> list[Mapping[str, Any]]:
        """Every result, as the request's views read them: each decision's rows of both calls in turn."""
        return adaptive.merged(request, self.first, self.second[0], self.escalated)


async def calls(
    request: DecideRequest, table: Table, rows: list[dict[str, Any]], call: CallTiming, score: Score
) -> Calls:
    """The request's first call over `rows` (timed in `call`), then the second where decisions escalate."""
    first, timing = await score(rows, call, reserve=request.row_count - len(rows))
    try:
        escalated = adaptive.escalated(request, first, table)
    except Exception:  # noqa: BLE001 - results the views cannot read either
        return Calls(first, timing)  # building the reply refuses them: the logged 500 of any such
    if not escalated:
        return Calls(first, timing)
    more = adaptive.second_rows(request, escalated)
    second_call = CallTiming("shared", len(more))
    second = await score(more, second_call, follow_up=True)
    return Calls(first, timing, escalated, second, second_call)


def timing(first: CallTiming, calls: Calls) -> CallTiming:
    """The request's scorer time for the access log: the first call's, or both calls' summed (rows,
    time queued, time scoring), as one record no engine observer sees."""
    second = calls.second_call
    if second is None or first.started is None or first.ended is None:
        return first
    queued = (first.queued or 0.0) + (second.queued or 0.0)
    scoring = (first.scoring or 0.0) + (second.scoring or 0.0)
    started = first.submitted + queued
    return CallTiming(
        first.kind,
        first.rows + second.rows,
        first.submitted,
        started,
        started + scoring,
        second.outcome,
    )
