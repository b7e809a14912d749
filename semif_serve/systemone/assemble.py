"""The service's views of scored rows in, a System One response out.

What the API promises (TypeSafe's reference; SemIf's docs/JEV_API_COMPAT.md 6 and 11):
`{model, answers: {key: answer}, usage: {input_tokens, output_tokens}}` with
- noul: `{type, noul: p(true)}` (no confidence: the SDK's NoulAnswer has none);
- choice: `{type, choice: argmax, probabilities: {key: p}, confidence}`;
- score: `{type, score: sum(i * p_i), legend: {"i": level}, probabilities: {"i": p}, confidence}`;
- confidence: the normalised peak (n * max - 1) / (n - 1), clamped to [0, 1], as SemIf's
  server computes it; it is consistent with the hosted API's published figures.
Every number leaves as a float: the SDK's response models are strict.

Where we differ, and why:
- `output_tokens` is 0: SemIf reads option logits and generates nothing.
- The probabilities are those of the view the service built (INV-1; decisions/views.py
  `distribution`): native or `combined` (under orderings "prior", extension, the debiased
  view; under "adaptive", the prior's, or where it scored every rotation the rotations'), or its calibrated
  view wherever the service built one.
- Extension: each answer's `semif` holds that view unchanged (the native result, or
  every ordering's native result with `combined`); the top-level `semif` holds the
  engine call's kind and, for a shared call, `score_shared`'s timing.
An exact argmax tie goes to the option earliest in the caller's order (as averaging's).
Knows nothing of HTTP or the engine; `usage.input_tokens` counts a shared state once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..decisions.request_model import Decision
from ..decisions.views import View, as_json, distribution
from .translate import Plan, Question


def confidence(probabilities: Sequence[float]) -> float:
    """The normalised peak: 0.0 for an even split over n options, 1.0 for all mass on one."""
    n = len(probabilities)
    return min(1.0, max(0.0, (n * max(probabilities) - 1.0) / (n - 1.0)))


def probabilities(decision: Decision, view: View) -> list[float]:
    """The distribution an answer is read from (views.distribution), checked to be in the caller's order."""
    ids = [option["id"] for option in decision.row["options"]]
    if list(view.option_ids) != ids:
        raise ValueError(
            f"result for {decision.row['id']!r} does not score the options {ids} in order"
        )
    return [float(p) for p in distribution(view)]


def answer(question: Question, decision: Decision, view: View) -> dict[str, Any]:
    """One question's answer, with its view under `semif`."""
    p = probabilities(decision, view)
    shown = as_json(view)
    ids = [option["id"] for option in decision.row["options"]]
    if question.kind == "noul":
        return {"type": "noul", "noul": p[ids.index("true")], "semif": shown}
    by_id = dict(zip(ids, p))
    if question.kind == "choice":
        best = max(range(len(p)), key=p.__getitem__)  # max keeps the first of equal values
        return {
            "type": "choice",
            "choice": ids[best],
            "probabilities": by_id,
            "confidence": confidence(p),
            "semif": shown,
        }
    return {
        "type": "score",
        "score": math.fsum(i * value for i, value in enumerate(p)),
        "legend": dict(question.legend or {}),
        "probabilities": by_id,
        "confidence": confidence(p),
        "semif": shown,
    }


def input_tokens(results: Sequence[Mapping[str, Any]], timing: Mapping[str, Any] | None) -> int:
    """Tokens evaluated: a shared call prefills its state once (`prefix_tokens`), then each suffix."""
    total = sum(int(result["input_tokens"]) for result in results)
    prefix = int(timing.get("prefix_tokens") or 0) if timing else 0
    return total - prefix * (len(results) - 1) if prefix else total


def response(
    plan: Plan,
    model: str,
    views: Sequence[View],
    results: Sequence[Mapping[str, Any]],
    kind: str,
    timing: Mapping[str, Any] | None,
    later: Sequence[tuple[Sequence[Mapping[str, Any]], Mapping[str, Any] | None]] = (),
) -> dict[str, Any]:
    """The response body: answers keyed by question, in the request's order. `results` and `timing`
    are the engine call's; *extension:* `later` the results and timing of each later call of orderings
    "adaptive", where decisions escalated (each prefills its state again, so its tokens count apart)."""
    answers = {
        question.key: answer(question, decision, view)
        for question, decision, view in zip(
            plan.questions, plan.request.decisions, views, strict=True
        )
    }
    return {
        "model": model,
        "answers": answers,
        "usage": {
            "input_tokens": input_tokens(results, timing)
            + sum(input_tokens(*call) for call in later),
            "output_tokens": 0,
        },
        "semif": {"mode": kind, "timing": timing},
    }
