"""The engine: one worker thread that owns the scorer and serialises every call.

The event loop never runs a scorer call itself, so /health answers while one is
in progress (INV-2); a single-thread executor plus a process-wide lock means two
calls can never overlap inside the scorer, whoever submits them.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .scorer import Row, Scorer, SharedResult

# Process-wide: any scorer call anywhere in the process takes it (INV-2).
SCORER_LOCK = threading.Lock()


class Engine:
    """Runs a scorer on its one worker thread; every method is awaited from the loop."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semif-engine")

    def _serialised(self, fn: Any, *args: Any) -> Any:
        with SCORER_LOCK:
            return fn(*args)

    async def _submit(self, fn: Any, *args: Any) -> Any:
        future = self._executor.submit(self._serialised, fn, *args)
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
        await self._submit(self.scorer.load)

    async def score(self, row: Row) -> dict[str, Any]:
        return await self._submit(self.scorer.score, row)

    async def score_shared(self, rows: list[Row]) -> SharedResult:
        return await self._submit(self.scorer.score_shared, rows)

    def health(self) -> dict[str, Any]:
        """Read the scorer's facts without queueing behind a running call."""
        return self.scorer.health()

    def close(self) -> None:
        """Drop queued calls; a running one finishes on its thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)

