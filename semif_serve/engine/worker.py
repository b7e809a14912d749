"""The engine: one worker thread that owns the scorer and serialises every call.

The event loop never runs a scorer call itself, so /health answers while one is
in progress (INV-2); a single-thread executor plus a process-wide lock means two
calls can never overlap inside the scorer, whoever submits them. The calls reach
that thread one at a time, a turn per caller, through the dispatcher (engine/dispatcher.py:
the order, a request's follow-up call, background work, a caller that leaves). Each call
fills a CallTiming (queued, scoring, outcome) that the caller keeps for its access
log line and that every observer (metrics, the Retry-After estimate, the wait budget's
per-row time) receives on the loop once the call has ended; the engine does not know who observes.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from .dispatcher import Call, Dispatcher
from .scorer import OutOfMemory, Row, Scorer, SharedResult

# Process-wide: any scorer call anywhere in the process takes it (INV-2).
SCORER_LOCK = threading.Lock()
# The kinds of scorer call a request makes (CallTiming.kind; the engine's own load is not one).
KINDS = ("direct", "shared")
BACKGROUND = "background"  # the kind and queue of background work, which is no caller's
# Extension: an audit's call (service/audits.py), no request's: timed, windowed and counted apart.
AUDIT = "audit"
T = TypeVar("T")


@dataclass
class CallTiming:
    """One scorer call: its kind, rows, when it was submitted, began and ended (perf_counter)."""

    kind: str  # one of KINDS, AUDIT, or "load"
    rows: int
    submitted: float = 0.0
    started: float | None = None
    ended: float | None = None
    outcome: str = "ok"  # ok, refused (ValueError), out_of_memory, failed

    @property
    def queued(self) -> float | None:
        return None if self.started is None else self.started - self.submitted

    @property
    def scoring(self) -> float | None:
        return None if self.started is None or self.ended is None else self.ended - self.started


def _outcome(error: BaseException) -> str:
    if isinstance(error, ValueError):
        return "refused"
    return "out_of_memory" if isinstance(error, OutOfMemory) else "failed"


class Engine:
    """Runs a scorer on its one worker thread; every method is awaited from the loop."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semif-engine")
        self.dispatcher = Dispatcher(self._executor)  # hands it one call at a time, a turn each
        self.observers: list[
            Callable[[CallTiming], None]
        ] = []  # called on the loop after each call

    @staticmethod
    def _serialised(timing: CallTiming, fn: Callable[..., T], *args: Any) -> T:
        with SCORER_LOCK:
            timing.started = time.perf_counter()
            try:
                return fn(*args)
            except BaseException as error:
                timing.outcome = _outcome(error)
                raise
            finally:
                timing.ended = time.perf_counter()

    async def _submit(self, timing: CallTiming, turn: Call, fn: Callable[..., T], *args: Any) -> T:
        """Run fn on the engine thread in `turn` (its caller's, engine/dispatcher.py), filling `timing`.
        Observers see every call that began."""
        timing.submitted = time.perf_counter()
        turn.work = functools.partial(self._serialised, timing, fn, *args)
        try:
            result: T = await self.dispatcher.run(turn)
            return result
        finally:
            if timing.ended is not None:
                for observe in self.observers:
                    observe(timing)

    async def start(self) -> None:
        """Load the model on the engine thread, so it is the thread that owns it."""
        await self._submit(CallTiming("load", 0), Call("-", "load", 0), self.scorer.load)

    async def score(
        self, row: Row, timing: CallTiming | None = None, *, caller: str = "-"
    ) -> dict[str, Any]:
        """One row, in `caller`'s turn."""
        return await self._submit(
            timing or CallTiming("direct", 1), Call(caller, "direct", 1), self.scorer.score, row
        )

    async def score_shared(
        self,
        rows: list[Row],
        timing: CallTiming | None = None,
        *,
        caller: str = "-",
        follow_up: bool = False,
        reserve: int = 0,
    ) -> SharedResult:
        """Rows over one state, in `caller`'s turn; a follow-up (a request's next call) goes ahead of
        `caller`'s later calls. `reserve`: the rows a follow-up of this call may add, which the
        estimates count with this call until it ends (a worst case)."""
        turn = Call(caller, "shared", len(rows) + reserve, follow_up=follow_up)
        return await self._submit(
            timing or CallTiming("shared", len(rows)), turn, self.scorer.score_shared, rows
        )

    async def score_shared_background(
        self, rows: list[Row], timing: CallTiming | None = None
    ) -> SharedResult:
        """Rows over one state as background work: run only when no caller's call waits; dropped
        (CancelledError) once a drain begins. Priced as a shared call while it runs."""
        return await self._submit(
            timing or CallTiming(BACKGROUND, len(rows)),
            Call(BACKGROUND, "shared", len(rows), background=True),
            self.scorer.score_shared,
            rows,
        )

    def ahead(self, caller: str) -> Counter[str]:
        """Rows by kind that run before a new call of `caller` now (the estimates' count)."""
        return self.dispatcher.ahead(caller)

    def health(self) -> dict[str, Any]:
        """Read the scorer's facts without queueing behind a running call."""
        return self.scorer.health()

    def drain(self) -> None:
        """A drain began: background work stops; callers' queued calls still run."""
        self.dispatcher.drain()

    def close(self) -> None:
        """Drop queued calls; a running one finishes on its thread."""
        self.dispatcher.close()
        self._executor.shutdown(wait=False)
