"""Admission by a wait budget (SEMIF_MAX_WAIT_S, extension): can this request be answered in time?

Rule 1: the estimate is in rows, never in tokens. Tokens are known only once the
engine thread tokenises, after admission; rows are known once the body is parsed.
A request's wait is the rows that run before its call, given the engine's queues at
admission (engine/dispatcher.py, `Turns.ahead`: the running call, its caller's queued
calls, and of each other caller at most as many calls as it waits turns for), x the
recent scorer time per row; never its own rows: the budget bounds waiting, and a request's
own cost is the same whenever it is sent, so refusing on it would refuse an idle
server forever (contract.md says why). Each call kind (`direct`, `shared`) keeps its
own per-row time: one shared call over 21 rows costs far less than 21 direct calls. The
times are the one window of recent calls (engine/recent.py) that Retry-After reads too.
Rule 2: cold start admits. A kind with no measured call yet prices its rows at 0,
so its first requests are admitted (SEMIF_MAX_QUEUE alone bounds them) and the
first call measures it; borrowing the other kind's figure would price a shared row
as a direct one, refuse every shared request and never measure one.
Rule 3: a refused request never enters: the rows ahead are the engine's own queues, which
only an admitted request's call joins; its `Admitted` is left once (`leave`), whatever the outcome.
Rule 4: pure bookkeeping: no I/O, no asyncio, no metrics, no HTTP. Its refusal is a domain
value, OverBudget (the estimate, and a message naming the budget); the service answers it
429 busy with the estimate as its Retry-After (ops then adds none). The clock is injected
(tests pass a fake one); observers of the estimate's error are callables.

Theory of operation: the service asks `WaitBudget.admit(kind, rows, caller)` once the body is
parsed, before the engine call, which joins its caller's queue in the same step (no await
between). Its rows then count for every later request they run before, until its call ends;
its predicted wait and the clock at admission travel in its `Admitted`. When its call begins, `leave` hands each observer (predicted, actual):
the metrics' histogram of the error, so an operator can see whether to trust it. The
call in progress counts whole (its elapsed part is not subtracted): the estimate errs
high by at most one call, never low on that account. A kind whose recent mean call
time exceeds the budget makes any request behind one such call wait too long:
`WaitBudget.crossed` says when that starts (the service logs it) and `over` holds it
(a gauge), so a misconfigured budget shows as itself, not as a wall of 429s.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.recent import RecentCalls
from ..engine.worker import KINDS


@dataclass(frozen=True)
class Estimate:
    """A request's predicted wait: its kind and rows, the rows ahead of it, and the seconds those cost."""

    kind: str
    rows: int
    rows_ahead: int
    seconds: float


@dataclass
class Admitted:
    """An admitted request's rows, predicted wait and admission time, until it leaves."""

    estimate: Estimate
    since: float
    left: bool = False


class WaitEstimator:
    """The rows that run before a caller's new call, by kind (`ahead`: the engine's queues), priced by the
    recent scorer seconds per row of each kind (`recent`)."""

    def __init__(
        self,
        ahead: Callable[[str], Counter[str]],
        clock: Callable[[], float] = time.perf_counter,
        recent: RecentCalls | None = None,
    ) -> None:
        self.ahead = ahead
        self.clock = clock
        self.recent = recent if recent is not None else RecentCalls()
        self.observers: list[
            Callable[[float, float], None]
        ] = []  # (predicted, actual) after each scored request

    def estimate(self, kind: str, rows: int, caller: str) -> Estimate:
        """This request's wait if admitted now: the rows that run before it, its own not (Rule 1, 2)."""
        ahead = self.ahead(caller)
        return Estimate(kind, rows, ahead.total(), self.recent.seconds(ahead))

    def enter(self, estimate: Estimate) -> Admitted:
        return Admitted(estimate, self.clock())

    def leave(self, admitted: Admitted, started: float | None) -> None:
        """The request's call ended, having begun at `started` (the clock's time), or it left before one
        ran (None): its actual wait was until its call began."""
        if admitted.left:
            return
        admitted.left = True
        if started is not None:
            for observe in self.observers:
                observe(admitted.estimate.seconds, started - admitted.since)


class OverBudget(Exception):
    """A request the budget refused: its estimate, and a message naming the budget (the service
    answers 429 busy)."""

    def __init__(self, estimate: Estimate, budget: float) -> None:
        super().__init__(refusal_message(estimate, budget))
        self.estimate = estimate


class WaitBudget:
    """Refuses, before it joins the queue, a request whose estimated wait exceeds the budget."""

    def __init__(self, seconds: float, estimator: WaitEstimator) -> None:
        self.seconds = seconds
        self.estimator = estimator
        self.refused = 0  # read at scrape time: semif_busy_refusals_total{reason="wait"}
        # Per kind: does one call alone (its recent mean) exceed the budget? Read at scrape time (a gauge).
        self.over: dict[str, bool] = dict.fromkeys(KINDS, False)

    def crossed(self, kind: str) -> bool:
        """After a successful call of `kind`: True when the kind's recent mean call time now exceeds the
        budget (once per crossing: the next True comes only after it fell back within)."""
        if kind not in self.over:
            return False
        per_call = self.estimator.recent.per_call(kind)
        was, self.over[kind] = self.over[kind], per_call is not None and per_call > self.seconds
        return self.over[kind] and not was

    def admit(self, kind: str, rows: int, caller: str) -> Admitted:
        """Admit `caller`'s request or raise OverBudget, whose estimate is the time until the rows that
        run before it are scored. With nothing ahead the estimate is 0: always admitted."""
        estimate = self.estimator.estimate(kind, rows, caller)
        if estimate.seconds > self.seconds:
            self.refused += 1
            raise OverBudget(estimate, self.seconds)
        return self.estimator.enter(estimate)


def refusal_message(estimate: Estimate, budget: float) -> str:
    """Names the budget; the estimate rounded up to 0.01 s, so a refused one always reads as over it."""
    shown = (
        math.ceil(estimate.seconds * 100 - 1e-9) / 100
    )  # not 2.41 for a float 2.4000000000000004
    return (
        f"estimated wait {shown:.2f} s ({estimate.rows_ahead} rows ahead) exceeds the "
        f"SEMIF_MAX_WAIT_S budget of {budget:g} s; retry later"
    )
