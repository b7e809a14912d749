"""A scripted scorer for server tests: records rows, can block or raise on demand."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.reference import softmax

Row = dict[str, Any]
BIAS = [3.0, 1.0, -0.5, 0.25]  # an additive position bias `biased` adds to every ordering


def biased(row: Row) -> list[float]:
    """Logits for `FakeScorer.logits`: the true score is the description length, plus a bias by position."""
    return [len(o["description"]) + BIAS[i] for i, o in enumerate(row["options"])]


def semif_like(row: Row, logits: list[float] | None = None) -> dict[str, Any]:
    """A result with SemIf's keys and values a test can recognise."""
    logits = (
        logits if logits is not None else [float(len(o["description"])) for o in row["options"]]
    )
    return {
        "id": row["id"],
        "option_ids": [o["id"] for o in row["options"]],
        "probabilities": softmax(logits),
        "option_logits": logits,
        "input_tokens": 17,
        "prompt_sha256": "f" * 64,
        "prompt_version": "direct-options-v1",
        "model": {"source": "fake", "revision": "r" * 40},
        "readout": "fake readout",
        "probability_status": "conditional option score; uncalibrated as decision confidence",
    }


class FakeScorer:
    """Implements engine.Scorer; behaviour set per test."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.raise_: BaseException | None = None
        self.gate: threading.Event | None = None  # when set, calls wait for it
        self.entered = threading.Event()
        self.active = 0
        self.max_active = 0
        self.delay = 0.0
        self.logits: Callable[[Row], list[float]] | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        pass

    async def wait_entered(self, timeout: float = 5.0) -> None:
        """Until a call is inside the scorer: `entered` is set on the engine thread, so wait off the loop."""
        assert await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, timeout)

    def _enter(self, kind: str, payload: Any) -> None:
        with self._lock:
            self.calls.append((kind, payload))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.entered.set()
        try:
            if self.gate is not None:
                self.gate.wait(10)
            time.sleep(self.delay)
            if self.raise_ is not None:
                raise self.raise_
        finally:
            with self._lock:
                self.active -= 1

    def _result(self, row: Row) -> dict[str, Any]:
        return semif_like(row, self.logits(row) if self.logits else None)

    def score(self, row: Row) -> dict[str, Any]:
        self._enter("direct", row)
        return {**self._result(row), "forward_seconds": 0.001, "total_seconds": 0.002}

    def score_shared(self, rows: list[Row]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        self._enter("shared", rows)
        return [self._result(r) for r in rows], {"total_seconds": 0.003, "batch_size": len(rows)}

    def health(self) -> dict[str, Any]:
        return {
            "scorer": "fake",
            "semif_commit": "fake-commit",
            "model": "fake-model",
            "revision": "r" * 40,
            "device": "none",
            "dtype": "float32",
        }
