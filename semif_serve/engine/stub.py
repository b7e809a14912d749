"""A torch-free scorer for load tests and HTTP-layer benchmarks.

It returns SemIf's result and timing shapes with logits derived from a hash of
each option in its position, so results are deterministic and carry a position
effect for averaging to cancel. /health names it: it can never pass for a model.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ..config import Settings
from ..decisions.numerics import softmax
from .scorer import Row, SharedResult

PROMPT_VERSION = "stub-v1"
READOUT = "stub: hash-derived option logits, no model"
STATUS = "stub score; not a model output"


def _logits(row: Row) -> list[float]:
    """One hash per option of (state, question, description, position), in [-4, 4).

    The state is serialised once per row: the stub must cost next to nothing,
    so the HTTP benchmarks measure the HTTP layer rather than the stand-in.
    """
    context = json.dumps([row["state"], row["question"]], sort_keys=True).encode()
    logits = []
    for position, option in enumerate(row["options"]):
        key = context + b"\0" + option["description"].encode() + b"\0" + str(position).encode()
        word = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
        logits.append(round(8.0 * word / 2**64 - 4.0, 6))
    return logits


class StubScorer:
    """Deterministic stand-in with SemIf's shapes and an optional per-call delay."""

    def __init__(self, settings: Settings) -> None:
        self.max_tokens = settings.max_tokens
        self.delay = settings.stub_delay_ms / 1000.0
        self.metadata = {"source": "stub", "revision": None, "dtype": None, "device": "none"}

    def load(self) -> None:
        """Nothing to load."""

    def _encode(self, row: Row) -> tuple[str, int]:
        prompt = json.dumps(row, sort_keys=True, ensure_ascii=False)
        tokens = len(prompt.encode()) // 4 + 1
        if tokens > self.max_tokens:
            raise ValueError(
                f"Row {row['id']}: {tokens} input tokens exceed limit {self.max_tokens}; no truncation allowed"
            )
        return hashlib.sha256(prompt.encode()).hexdigest(), tokens

    def _result(self, row: Row) -> dict[str, Any]:
        digest, tokens = self._encode(row)
        logits = _logits(row)
        return {
            "id": row["id"],
            "option_ids": [option["id"] for option in row["options"]],
            "probabilities": softmax(logits),
            "option_logits": logits,
            "input_tokens": tokens,
            "prompt_sha256": digest,
            "prompt_version": PROMPT_VERSION,
            "model": self.metadata,
            "readout": READOUT,
            "probability_status": STATUS,
        }

    def score(self, row: Row) -> dict[str, Any]:
        started = time.perf_counter()
        time.sleep(self.delay)
        result = self._result(row)
        elapsed = time.perf_counter() - started
        return {**result, "forward_seconds": elapsed, "total_seconds": elapsed}

    def score_shared(self, rows: list[Row]) -> SharedResult:
        started = time.perf_counter()
        if not rows or any(row["state"] != rows[0]["state"] for row in rows[1:]):
            raise ValueError("Shared scoring requires one nonempty exact state")
        if len({row["id"] for row in rows}) != len(rows):
            raise ValueError("Decision IDs must be unique")
        time.sleep(self.delay)
        results = [self._result(row) for row in rows]
        elapsed = time.perf_counter() - started
        timing = {
            "total_seconds": elapsed,
            "encode_seconds": 0.0,
            "prefix_tokens": 0,
            "prefill_seconds": 0.0,
            "replicate_seconds": 0.0,
            "suffix_forward_seconds": elapsed,
            "batch_size": len(rows),
            "true_suffix_tokens": sum(r["input_tokens"] for r in results),
            "padded_suffix_tokens": sum(r["input_tokens"] for r in results),
        }
        return results, timing

    def health(self) -> dict[str, Any]:
        return {
            "scorer": "stub",
            "semif_commit": "stub (no model)",
            "model": "stub",
            "revision": None,
            "device": "none",
            "dtype": None,
            "prompt_version": PROMPT_VERSION,
        }
