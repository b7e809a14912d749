"""The scorer interface: what the engine thread drives, and the types it passes.

Rule 1: this module holds only the interface, its plain data types and the
failures a scorer raises (OutOfMemory, ScoringFailed); it imports nothing of the
project's, so every scorer (the stub, the torch scorer, a test's fake) and the
engine can depend on it without depending on each other, or on HTTP. What a
failure answers on the wire is decided in one place, `Pipeline.score` (service/body_pipeline.py).
Rule 2: which concrete scorer a process runs is decided where the process is
assembled (server.py), never here or in the engine.
"""

from __future__ import annotations

from typing import Any, Protocol

Row = dict[str, Any]
SharedResult = tuple[list[dict[str, Any]], dict[str, Any]]


class OutOfMemory(Exception):
    """The accelerator ran out of memory during a scorer call (503, retry later)."""


class ScoringFailed(Exception):
    """The scorer failed for a reason other than bad input or memory (500)."""


class Scorer(Protocol):
    """What the engine thread drives (the stub and the torch scorer implement it).

    `score` and `score_shared` raise ValueError for input the scorer refuses,
    OutOfMemory and ScoringFailed (the service answers 422, 503 and 500).
    """

    def load(self) -> None:
        """Load and prove the model; raise to refuse startup (fail closed)."""

    def score(self, row: Row) -> dict[str, Any]:
        """One decision: SemIf's `direct.score` result, unchanged."""

    def score_shared(self, rows: list[Row]) -> SharedResult:
        """Many decisions over one state: SemIf's `score_shared` (results, timing)."""

    def health(self) -> dict[str, Any]:
        """Facts for /health: at least scorer, semif_commit, model, revision, device, dtype (the System One id
        names the snapshot by model, revision and dtype: systemone/catalogue.py)."""
