"""Scoring rules for probabilistic choices: the only definitions of NLL, Brier, ECE and reliability bins.

Evaluate, calibrate, the temperature fit and the plots all read these, so a
number in a table, in a JSON file and under a diagram is computed one way.
Pure arithmetic on lists: no I/O, no numpy needed, no server.

Definitions (rows may have different option counts):
- NLL: mean of -log p[label]. From scores it is computed through log-softmax,
  so a probability that underflows to 0 still has a finite, exact NLL.
- Brier: mean over rows of sum_k (p_k - [k == label])^2 (the multi-class form, in [0, 2]).
- ECE: 10 equal-width bins of confidence = max_k p_k; sum over bins of
  (rows in bin / rows) * |accuracy in bin - mean confidence in bin|.
- top: argmax with an exact tie going to the earliest option, as the server does.
- KL(p ‖ q): sum_k p_k log(p_k / q_k) over one row's options, a term with p_k = 0
  counting 0 and a q_k of 0 counting as the smallest positive float (as in NLL).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from semif_serve.decisions.numerics import log_softmax

BINS = 10
Vector = Sequence[float]


def top(probabilities: Vector) -> int:
    """Index of the largest probability; an exact tie goes to the earliest."""
    return max(range(len(probabilities)), key=probabilities.__getitem__)


def accuracy(probabilities: Sequence[Vector], labels: Sequence[int]) -> float:
    return _mean([float(top(p) == y) for p, y in zip(probabilities, labels)])


def nll(probabilities: Sequence[Vector], labels: Sequence[int]) -> float:
    """Mean -log p[label]; a zero probability counts as the smallest positive float."""
    return _mean([-math.log(max(p[y], math.ulp(0.0))) for p, y in zip(probabilities, labels)])


def nll_of_scores(
    scores: Sequence[Vector], labels: Sequence[int], temperature: float = 1.0
) -> float:
    """Mean -log softmax(scores / T)[label], exact for scores of any finite size."""
    return _mean([-log_softmax([v / temperature for v in s])[y] for s, y in zip(scores, labels)])


def brier(probabilities: Sequence[Vector], labels: Sequence[int]) -> float:
    return _mean(
        [
            math.fsum((pk - (k == y)) ** 2 for k, pk in enumerate(p))
            for p, y in zip(probabilities, labels)
        ]
    )


def reliability(
    probabilities: Sequence[Vector], labels: Sequence[int], bins: int = BINS
) -> list[dict[str, Any]]:
    """Per equal-width confidence bin: its bounds, row count, mean confidence and accuracy (None when empty)."""
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for p, y in zip(probabilities, labels):
        best = top(p)
        members[min(int(p[best] * bins), bins - 1)].append((p[best], best == y))
    table = []
    for index, rows in enumerate(members):
        table.append(
            {
                "lo": index / bins,
                "hi": (index + 1) / bins,
                "count": len(rows),
                "confidence": _mean([c for c, _ in rows]) if rows else None,
                "accuracy": _mean([float(ok) for _, ok in rows]) if rows else None,
            }
        )
    return table


def ece(probabilities: Sequence[Vector], labels: Sequence[int], bins: int = BINS) -> float:
    table = reliability(probabilities, labels, bins)
    total = sum(b["count"] for b in table)
    return math.fsum(
        b["count"] / total * abs(b["accuracy"] - b["confidence"]) for b in table if b["count"]
    )


def kl(p: Vector, q: Vector) -> float:
    """KL(p ‖ q) for one row, in nats."""
    if len(p) != len(q):
        raise ValueError(
            f"KL needs two distributions over the same options, got {len(p)} and {len(q)}"
        )
    return math.fsum(
        pk * (math.log(pk) - math.log(max(qk, math.ulp(0.0)))) for pk, qk in zip(p, q) if pk > 0
    )


def mean_kl(ps: Sequence[Vector], qs: Sequence[Vector]) -> float:
    return _mean([kl(p, q) for p, q in zip(ps, qs)])


def summary(probabilities: Sequence[Vector], labels: Sequence[int]) -> dict[str, Any]:
    """Every figure for one set of rows: rows, accuracy, NLL, Brier, ECE and the reliability bins."""
    return {
        "rows": len(labels),
        "accuracy": accuracy(probabilities, labels),
        "nll": nll(probabilities, labels),
        "brier": brier(probabilities, labels),
        "ece": ece(probabilities, labels),
        "bins": reliability(probabilities, labels),
    }


def _mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("no rows to score")
    return math.fsum(values) / len(values)
