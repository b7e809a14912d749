"""Assembly: the confidence formula against the hosted API's published figures, and the answer shapes.

The published examples (published_examples.json here: the hosted API reference's
examples, verbatim) print values rounded to two decimals. The normalised
peak (n * max - 1) / (n - 1) reproduces them when a true peak exists that rounds
both to the printed probability and, through the formula, to the printed
confidence (SemIf's JEV_API_COMPAT.md 6.3 makes the same argument).
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from semif_serve.request_model import Decision
from semif_serve.systemone import assemble, translate

EXAMPLES = json.loads((Path(__file__).parent / "published_examples.json").read_text())


def two_decimals(value: float) -> Decimal:
    return Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)


@pytest.mark.parametrize("kind", ["choice", "score"])
def test_the_formula_reproduces_each_published_confidence(kind: str) -> None:
    answer = next(iter(EXAMPLES["examples"][kind]["response"]["answers"].values()))
    printed = list(answer["probabilities"].values())
    peak, n = max(printed), len(printed)
    # Every true peak that displays as the printed one, on a fine grid over its rounding band.
    candidates = [peak - 0.005 + i * 0.00001 for i in range(1, 1000)]
    matching = [p for p in candidates if two_decimals(p) == Decimal(str(peak))
                and two_decimals(assemble.confidence([p, *[(1 - p) / (n - 1)] * (n - 1)])) == Decimal(str(answer["confidence"]))]
    assert matching, f"no peak that rounds to {peak} gives confidence {answer['confidence']}"


def test_the_formula_is_zero_for_an_even_split_and_one_for_a_sure_answer() -> None:
    assert assemble.confidence([0.25] * 4) == 0.0
    assert assemble.confidence([1.0, 0.0, 0.0]) == 1.0
    assert assemble.confidence([0.5, 0.5]) == 0.0 and assemble.confidence([0.75, 0.25]) == 0.5
    assert isinstance(assemble.confidence([1.0, 0.0]), float)


def test_the_published_score_is_the_probability_weighted_level() -> None:
    """{0: 0.0, 1: 0.95, 2: 0.05} -> 1.05, as the reference prints it."""
    example = EXAMPLES["examples"]["score"]
    answer = example["response"]["answers"]["frustration"]
    question = translate.Question("frustration", "score", {str(i): v for i, v in enumerate(example["request"]["questions"]["frustration"]["criteria"])})
    row = {"id": "frustration", "state": "s", "question": "q",
           "options": [{"id": str(i), "description": level} for i, level in enumerate(answer["legend"].values())]}
    view = {"option_ids": ["0", "1", "2"], "probabilities": list(answer["probabilities"].values())}
    built = assemble.answer(question, Decision(row, "none"), view, calibrated=False)
    assert built["score"] == pytest.approx(answer["score"])
    assert built["legend"] == answer["legend"] and built["probabilities"] == answer["probabilities"]
    assert built["semif"] is view


def test_an_answer_refuses_a_view_whose_options_are_out_of_order() -> None:
    row = {"id": "c", "state": "s", "question": "q", "options": [{"id": "a", "description": "a"}, {"id": "b", "description": "b"}]}
    with pytest.raises(ValueError, match="does not score the options"):
        assemble.answer(translate.Question("c", "choice"), Decision(row, "none"),
                        {"option_ids": ["b", "a"], "probabilities": [0.9, 0.1]}, calibrated=False)


def test_a_shared_call_counts_its_state_once() -> None:
    results = [{"input_tokens": 100}, {"input_tokens": 110}, {"input_tokens": 105}]
    assert assemble.input_tokens(results, {"prefix_tokens": 90}) == 90 + 10 + 20 + 15
    assert assemble.input_tokens(results, None) == 315
    assert assemble.input_tokens(results, {"prefix_tokens": 0}) == 315
