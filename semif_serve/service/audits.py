"""Audits (extension): a sampled share of the decisions served with the prior, scored afterwards under
their other rotations on idle capacity, counted per (workload, n) (decisions/live_prior.py).

Rules:
1. An audit never touches its reply. It is offered once the reply is built (`offer`, which the body
   pipeline schedules to run after its step, so the reply goes out first), and offering is a draw and
   an append: no scoring, no await. A fault in it is logged by its type alone, never the request.
2. The engine is met in one place, `audit_call`: background work, one decision's n-1 rows a call, one
   call at a time, so a caller's call waits behind at most one audit call.
3. Bounded: at most SEMIF_AUDIT_MAX_PENDING audits and SEMIF_AUDIT_MAX_PENDING_BYTES of their rows wait,
   the oldest dropped beyond either; a decision over more than SEMIF_AUDIT_MAX_OPTIONS options, or one
   offered during a drain, is skipped. A drain drops what waits. Every outcome is counted.
4. Rows are held in memory only while they wait: never logged, never written. A failed audit call is
   logged by its workload, n and error type alone.
5. The draw is `self.draw` (random.random by default; a test sets a seeded one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..decisions import averaging, live_prior
from ..decisions.calibration_file import Table
from ..decisions.request_model import NONE_ESCALATED, DecideRequest, Decision, Escalated
from ..engine.scorer import Row, SharedResult
from ..engine.worker import AUDIT, CallTiming, Engine

log = logging.getLogger("semif_serve.audits")
OUTCOMES = ("done", "dropped", "skipped", "failed")
Submit = Callable[[list[Row]], Coroutine[Any, Any, SharedResult]]


async def audit_call(engine: Engine, rows: list[Row]) -> SharedResult:
    """The audit's one point of contact with the engine (Rule 2): its rows as one call of kind AUDIT,
    in the engine's background class (run only while no caller's call waits)."""
    return await engine.score_shared_background(rows, CallTiming(AUDIT, len(rows)))


def auditable(decision: Decision, results: Sequence[Mapping[str, Any]]) -> bool:
    """Served from its one row with the prior divided out: orderings "prior", or "adaptive" not
    escalated (an escalated decision was chosen by its margin, and is no uniform sample)."""
    return decision.method.needs_prior and len(results) == 1


def _bytes(value: Any) -> int:
    """What a value holds, as the bytes of its JSON."""
    return len(json.dumps(value, default=str).encode())


@dataclass(frozen=True)
class Pending:
    """One audit waiting for idle capacity: the decision's row, its caller's-order result (kept, never
    scored again) and the prior it was served with."""

    workload: str
    row: Row
    first: Mapping[str, Any]
    served: tuple[float, ...]
    size: int  # bytes of what it holds, as JSON

    @property
    def n(self) -> int:
        return len(self.served)

    def rows(self) -> list[Row]:
        """The other n-1 rotations, as averaging expands them (the caller's order is rotation 0)."""
        return averaging.expand(self.row, "rotations")[1:]


class Auditor:
    """The pending audits, the one task that runs them, and what they counted."""

    def __init__(
        self, settings: Settings, submit: Submit, clock: Callable[[], float] = time.time
    ) -> None:
        """`submit` is `audit_call` bound to the engine; `clock` stamps each workload's last audit."""
        self.rate = settings.audit_rate
        self.max_pending = settings.audit_max_pending
        self.max_bytes = settings.audit_max_pending_bytes
        self.max_options = settings.audit_max_options
        self.draw: Callable[[], float] = random.random
        self._submit = submit
        self._clock = clock
        self._pending: deque[Pending] = deque()
        self._bytes = 0
        self._task: asyncio.Task[None] | None = None
        self.running = 0  # audits taken from the queue whose call has not come back: 0 or 1
        self.draining = False
        self.outcomes: Counter[tuple[str, int, str]] = Counter()
        self.tallies: dict[tuple[str, int], live_prior.Tally] = {}
        self.last: dict[str, float] = {}

    @property
    def on(self) -> bool:
        return self.rate > 0

    # -- offered by the body pipeline, once the reply is built ------------------------------------

    def offer(
        self,
        request: DecideRequest,
        results: Sequence[Mapping[str, Any]],
        table: Table,
        escalated: Escalated = NONE_ESCALATED,
    ) -> None:
        """Draw each auditable decision of an answered request (`results` of all its calls, the
        decisions at `escalated` having escalated); queue those drawn (Rule 1). A bug in here is logged
        and the reply goes out as built."""
        if not self.on or request.workload is None:
            return
        try:
            drawn = [
                (decision, results[rows][0])
                for decision, rows in request.planned(len(results), escalated)
                if auditable(decision, results[rows]) and self.draw() < self.rate
            ]
            state = _bytes(drawn[0][0].row["state"]) if drawn else 0  # one state for them all
            for decision, first in drawn:
                self._queue(decision, first, request.workload, table, state)
        except Exception as error:  # noqa: BLE001 - an audit must never fail the reply it watches
            log.error("failed to queue an audit: %s", type(error).__name__)  # never the request

    def _queue(
        self,
        decision: Decision,
        first: Mapping[str, Any],
        workload: str,
        table: Table,
        state: int,
    ) -> None:
        """Queue one drawn decision (its state's JSON `state` bytes long), or count it skipped."""
        n = len(decision.row["options"])
        if self.draining or n > self.max_options:
            self.outcomes[(workload, n, "skipped")] += 1
            return
        served = table.priors[workload][n].prior
        rest = {key: value for key, value in decision.row.items() if key != "state"}
        size = state + _bytes(rest) + _bytes(first)  # the state counted whole for each: errs high
        self._pending.append(Pending(workload, decision.row, first, served, size))
        self._bytes += size
        while len(self._pending) > self.max_pending or self._bytes > self.max_bytes:
            self._drop(self._pending.popleft())
        if self._pending and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _drop(self, audit: Pending) -> None:
        self._bytes -= audit.size
        self.outcomes[(audit.workload, audit.n, "dropped")] += 1

    # -- the one task that runs them --------------------------------------------------------------

    async def _run(self) -> None:
        """Run the pending audits one at a time, oldest first, until none is left."""
        try:
            while self._pending:
                audit = self._pending.popleft()
                self._bytes -= audit.size
                self.running = 1
                await self._audit(audit)
        finally:
            self._task, self.running = None, 0

    async def _audit(self, audit: Pending) -> None:
        try:
            results, _ = await self._submit(audit.rows())
        except asyncio.CancelledError:
            self.outcomes[(audit.workload, audit.n, "dropped")] += 1
            raise
        except Exception as error:  # noqa: BLE001 - a failed audit is counted; its rows are not logged
            self.outcomes[(audit.workload, audit.n, "failed")] += 1
            log.warning(
                "an audit call failed (workload %r, %d options): %s",
                audit.workload,
                audit.n,
                type(error).__name__,
            )
            return
        counted = live_prior.audited(audit.row, [audit.first, *results], audit.served)
        key = (audit.workload, audit.n)
        tally = self.tallies.get(key)
        if tally is None or tally.served != audit.served:  # a reload changed the prior: start over
            tally = self.tallies[key] = live_prior.Tally(audit.served)
        tally.add(counted)
        self.outcomes[(audit.workload, audit.n, "done")] += 1
        self.last[audit.workload] = self._clock()

    def drain(self) -> None:
        """A drain began: what waits is dropped, the running audit's task cancelled (its call, once
        running, finishes on the engine thread), and nothing more is queued."""
        self.draining = True
        while self._pending:
            self._drop(self._pending.popleft())
        if self._task is not None:
            self._task.cancel()

    # -- what operators read -----------------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        """Waiting audits per workload (a workload ever offered one stays, at 0)."""
        waiting = Counter(audit.workload for audit in self._pending)
        return {workload: waiting[workload] for workload in self._workloads()}

    def _workloads(self) -> list[str]:
        return sorted(
            {workload for workload, _, _ in self.outcomes} | {a.workload for a in self._pending}
        )

    def _pairs(self) -> list[tuple[str, int]]:
        seen = {(w, n) for w, n, _ in self.outcomes} | {(a.workload, a.n) for a in self._pending}
        return sorted(seen | set(self.tallies))

    def samples(self) -> dict[str, Mapping[Any, float]]:
        """The metrics' families, each {labels: value}, read at scrape (ops/metrics.py)."""
        pairs = self._pairs()
        drifts = {key: tally.drift() for key, tally in self.tallies.items()}
        return {
            "outcomes": {
                (w, str(n), outcome): self.outcomes[(w, n, outcome)]
                for w, n in pairs
                for outcome in OUTCOMES
            },
            "agreements": {
                (w, str(n)): (self.tallies[(w, n)].agreements if (w, n) in self.tallies else 0)
                for w, n in pairs
            },
            "drift": {(w, str(n)): d for (w, n), d in drifts.items() if d is not None},
            "drift_threshold": {
                (w, str(n)): live_prior.drift_threshold(n)
                for (w, n), d in drifts.items()
                if d is not None
            },
            "pending": self.pending(),
            "last": dict(self.last),
        }

    def as_json(self) -> dict[str, Any]:
        """GET /v1/audit's per-(workload, n) part and the queue."""
        return {
            "rate": self.rate,
            "drift_window": live_prior.DRIFT_WINDOW,
            "pending": {
                "audits": len(self._pending),
                "running": self.running,
                "bytes": self._bytes,
                "max_audits": self.max_pending,
                "max_bytes": self.max_bytes,
            },
            "audits": [
                {
                    "workload": w,
                    "n": n,
                    "outcomes": {outcome: self.outcomes[(w, n, outcome)] for outcome in OUTCOMES},
                    "last_audit": self.last.get(w),
                    **(self.tallies[(w, n)].as_json() if (w, n) in self.tallies else {}),
                }
                for w, n in self._pairs()
            ],
        }
