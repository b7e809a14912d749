"""The engine: one worker thread that owns the scorer and serialises every call.

The event loop never runs a scorer call itself, so /health answers while one is
in progress (INV-2); a single-thread executor plus a process-wide lock means two
calls can never overlap inside the scorer, whoever submits them. Each call
fills a CallTiming (queued, scoring, outcome) that the caller keeps for its access
log line and that every observer (metrics, the Retry-After estimate, the wait budget's
per-row time) receives on the loop once the call has ended; the engine does not know who observes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from .scorer import OutOfMemory, Row, Scorer, SharedResult

# Process-wide: any scorer call anywhere in the process takes it (INV-2).
SCORER_LOCK = threading.Lock()
# The kinds of scorer call a request makes (CallTiming.kind; the engine's own load is not one).
KINDS = ("direct", "shared")
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

    async def _submit(self, timing: CallTiming, fn: Callable[..., T], *args: Any) -> T:
        """Run fn on the engine thread, filling `timing`; observers see every call that began."""
        timing.submitted = time.perf_counter()
        try:
            return await self._await(self._executor.submit(self._serialised, timing, fn, *args))
        finally:
            if timing.ended is not None:
                for observe in self.observers:
                    observe(timing)

    @staticmethod
    async def _await(future: Future[T]) -> T:
        """The call's result; a caller cancelled while it runs waits it out, so the slot stays held."""
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # Queued: cancel() means it never starts. Running: it still holds the
            # scorer, so the caller keeps its admission slot until the call returns.
            if not future.cancel():
                abandoned = asyncio.wrap_future(future)
                await asyncio.wait([abandoned])
                if not abandoned.cancelled():
                    abandoned.exception()  # read it: the caller left, so its failure is no one's error
            raise

    async def start(self) -> None:
        """Load the model on the engine thread, so it is the thread that owns it."""
        await self._submit(CallTiming("load", 0), self.scorer.load)

    async def score(self, row: Row, timing: CallTiming | None = None) -> dict[str, Any]:
        return await self._submit(timing or CallTiming("direct", 1), self.scorer.score, row)

    async def score_shared(self, rows: list[Row], timing: CallTiming | None = None) -> SharedResult:
        return await self._submit(
            timing or CallTiming("shared", len(rows)), self.scorer.score_shared, rows
        )

    def health(self) -> dict[str, Any]:
        """Read the scorer's facts without queueing behind a running call."""
        return self.scorer.health()

    def close(self) -> None:
        """Drop queued calls; a running one finishes on its thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)
