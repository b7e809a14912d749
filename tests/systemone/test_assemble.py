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

from semif_serve.decisions.request_model import Decision
from semif_serve.decisions.views import Averaged, CalibratedView, Combined, Native, View, as_json
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
    matching = [
        p
        for p in candidates
        if two_decimals(p) == Decimal(str(peak))
        and two_decimals(assemble.confidence([p, *[(1 - p) / (n - 1)] * (n - 1)]))
        == Decimal(str(answer["confidence"]))
    ]
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
    question = translate.Question(
        "frustration",
        "score",
        {
            str(i): v
            for i, v in enumerate(example["request"]["questions"]["frustration"]["criteria"])
        },
    )
    row = {
        "id": "frustration",
        "state": "s",
        "question": "q",
        "options": [
            {"id": str(i), "description": level}
            for i, level in enumerate(answer["legend"].values())
        ],
    }
    result = {
        "option_ids": ["0", "1", "2"],
        "probabilities": list(answer["probabilities"].values()),
    }
    built = assemble.answer(question, Decision(row, "none"), Native(result))
    assert built["score"] == pytest.approx(answer["score"])
    assert built["legend"] == answer["legend"] and built["probabilities"] == answer["probabilities"]
    assert built["semif"] is result


def test_an_answer_refuses_a_view_whose_options_are_out_of_order() -> None:
    row = {
        "id": "c",
        "state": "s",
        "question": "q",
        "options": [{"id": "a", "description": "a"}, {"id": "b", "description": "b"}],
    }
    with pytest.raises(ValueError, match="does not score the options"):
        assemble.answer(
            translate.Question("c", "choice"),
            Decision(row, "none"),
            Native({"option_ids": ["b", "a"], "probabilities": [0.9, 0.1]}),
        )


def test_a_shared_call_counts_its_state_once() -> None:
    results = [{"input_tokens": 100}, {"input_tokens": 110}, {"input_tokens": 105}]
    assert assemble.input_tokens(results, {"prefix_tokens": 90}) == 90 + 10 + 20 + 15
    assert assemble.input_tokens(results, None) == 315
    assert assemble.input_tokens(results, {"prefix_tokens": 0}) == 315


def plan(workload: str | None, orderings: str) -> translate.Plan:
    """Three questions (noul, choice over 3, score over 4) as translation builds them."""
    limits = translate.request_model.Limits(
        max_decisions=64,
        workloads=frozenset({"triage"}),
        methods={"triage": frozenset({"none", "rotations"})},
    )
    body = {
        "model": "served",
        "state": "s",
        "semif": {"orderings": orderings, **({} if workload is None else {"workload": workload})},
        "questions": {
            "u": {"type": "noul"},
            "d": {"type": "choice", "criteria": {"a": None, "b": None, "c": None}},
            "f": {"type": "score", "criteria": ["Calm", "Tense", "Angry", "Furious"]},
        },
    }
    return translate.translate(
        json.dumps(body).encode(), translate.Policy(limits, frozenset({"served"}), "none", None)
    )


NATIVE = {"u": [0.7, 0.3], "d": [0.1, 0.6, 0.3], "f": [0.1, 0.2, 0.3, 0.4]}
TEMPERED = {"u": [0.6, 0.4], "d": [0.2, 0.5, 0.3], "f": [0.4, 0.3, 0.2, 0.1]}
COMBINED = {"u": [0.8, 0.2], "d": [0.05, 0.15, 0.8], "f": [0.0, 0.0, 0.5, 0.5]}
COMBINED_TEMPERED = {"u": [0.55, 0.45], "d": [0.7, 0.2, 0.1], "f": [0.25, 0.25, 0.25, 0.25]}
IDS = {"u": ["true", "false"], "d": ["a", "b", "c"], "f": ["0", "1", "2", "3"]}


def tempered(table: dict[str, list[float]], key: str, method: str | None = None) -> CalibratedView:
    return CalibratedView("triage", 2.0, table[key], method)


def combined(
    key: str, table: dict[str, list[float]], calibrated: CalibratedView | None
) -> Combined:
    return Combined("rotations", 1, table[key], IDS[key][0], 1.0, {}, None, calibrated)


def view(key: str, averaged: bool, calibrated: bool) -> View:
    """A service view: each table a different distribution, so the answer shows which one it read."""
    native = {"option_ids": IDS[key], "probabilities": NATIVE[key]}
    if averaged:
        combined_calibrated = tempered(COMBINED_TEMPERED, key, "rotations") if calibrated else None
        return Averaged(key, IDS[key], combined(key, COMBINED, combined_calibrated), [native])
    return Native(native, tempered(TEMPERED, key) if calibrated else None)


# (workload, orderings, the table every answer must be read from)
READS = [
    (None, "none", NATIVE),
    ("triage", "none", TEMPERED),
    (None, "rotations", COMBINED),
    ("triage", "rotations", COMBINED_TEMPERED),
]


@pytest.mark.parametrize(
    ("workload", "orderings", "table"),
    READS,
    ids=["native", "calibrated", "combined", "combined-calibrated"],
)
def test_each_answer_is_read_from_the_view_the_request_chose_with_its_exact_figures(
    workload, orderings, table
) -> None:
    built = plan(workload, orderings)
    views = [view(key, orderings != "none", workload is not None) for key in ("u", "d", "f")]
    results = [{"input_tokens": 50}, {"input_tokens": 60}, {"input_tokens": 70}]
    body = assemble.response(built, "served", views, results, "shared", {"prefix_tokens": 40})
    assert list(body["answers"]) == ["u", "d", "f"]
    assert body["usage"] == {"input_tokens": 40 + 10 + 20 + 30, "output_tokens": 0}
    assert body["semif"] == {"mode": "shared", "timing": {"prefix_tokens": 40}}
    # The figures below are worked out by hand from the tables (confidence = (n * max - 1) / (n - 1)).
    expected = {
        id(NATIVE): (0.7, "b", 0.4, 2.0, 0.2),  # d: (3*0.6-1)/2; f: 0.2+0.6+1.2, (4*0.4-1)/3
        id(TEMPERED): (0.6, "b", 0.25, 1.0, 0.2),  # d: (3*0.5-1)/2; f: 0.3+0.4+0.3, (4*0.4-1)/3
        id(COMBINED): (0.8, "c", 0.7, 2.5, 1 / 3),  # d: (3*0.8-1)/2; f: 1.0+1.5, (4*0.5-1)/3
        id(COMBINED_TEMPERED): (0.55, "a", 0.55, 1.5, 0.0),  # d: (3*0.7-1)/2; f: an even split
    }[id(table)]
    noul, choice, choice_confidence, score, score_confidence = expected
    u, d, f = body["answers"]["u"], body["answers"]["d"], body["answers"]["f"]
    assert u == {"type": "noul", "noul": noul, "semif": as_json(views[0])}
    assert set(d) == {"type", "choice", "probabilities", "confidence", "semif"} and d[
        "semif"
    ] == as_json(views[1])
    assert (d["type"], d["choice"]) == ("choice", choice)
    assert d["probabilities"] == dict(zip(["a", "b", "c"], table["d"]))
    assert d["confidence"] == pytest.approx(choice_confidence)
    assert set(f) == {"type", "score", "legend", "probabilities", "confidence", "semif"} and f[
        "semif"
    ] == as_json(views[2])
    assert f["type"] == "score" and f["score"] == pytest.approx(score)
    assert f["legend"] == {"0": "Calm", "1": "Tense", "2": "Angry", "3": "Furious"}
    assert f["probabilities"] == dict(zip(["0", "1", "2", "3"], table["f"]))
    assert f["confidence"] == pytest.approx(score_confidence)


def test_a_response_refuses_fewer_views_than_questions() -> None:
    """Assembly pairs each question with its view: a missing view is the service's bug, never a shorter answer."""
    with pytest.raises(ValueError):
        assemble.response(
            plan(None, "none"),
            "served",
            [view("u", False, False), view("d", False, False)],
            [],
            "shared",
            None,
        )


def test_confidence_never_exceeds_one_even_when_a_distribution_overshoots() -> None:
    """The clamp: float sums can put a peak a hair over 1.0; the published range is [0, 1]."""
    assert assemble.confidence([1.0 + 1e-9, 0.0]) == 1.0


# -- orderings "prior" (extension): the debiased view, or its calibrated view where a temperature exists ------

DEBIASED = {"u": [0.35, 0.65], "d": [0.5, 0.2, 0.3], "f": [0.7, 0.1, 0.1, 0.1]}
DEBIASED_TEMPERED = {"u": [0.45, 0.55], "d": [0.2, 0.2, 0.6], "f": [0.1, 0.1, 0.1, 0.7]}


def prior_view(key: str, calibrated: bool) -> View:
    combined_calibrated = tempered(DEBIASED_TEMPERED, key, "prior") if calibrated else None
    return Averaged(
        key,
        IDS[key],
        Combined("prior", 1, DEBIASED[key], IDS[key][0], 1.0, {}, None, combined_calibrated),
        [{"probabilities": NATIVE[key]}],
    )


def prior_plan() -> translate.Plan:
    limits = translate.request_model.Limits(
        max_decisions=64,
        workloads=frozenset({"sorting"}),
        methods={"sorting": frozenset()},
        priors={"sorting": frozenset({2, 3, 4})},
    )
    body = {
        "model": "served",
        "state": "s",
        "semif": {"orderings": "prior", "workload": "sorting"},
        "questions": {
            "u": {"type": "noul"},
            "d": {"type": "choice", "criteria": {"a": None, "b": None, "c": None}},
            "f": {"type": "score", "criteria": ["Calm", "Tense", "Angry", "Furious"]},
        },
    }
    return translate.translate(
        json.dumps(body).encode(), translate.Policy(limits, frozenset({"served"}), "none", None)
    )


@pytest.mark.parametrize(
    ("calibrated", "table"),
    [(False, DEBIASED), (True, DEBIASED_TEMPERED)],
    ids=["debiased", "calibrated"],
)
def test_a_prior_answer_reads_the_debiased_view_or_its_calibrated_view(
    calibrated: bool, table: dict[str, list[float]]
) -> None:
    """Worked by hand: debiased d argmax a, confidence (3*0.5-1)/2; f 0.1+0.2+0.3, (4*0.7-1)/3.
    Calibrated: d argmax c, (3*0.6-1)/2; f 0.1+0.2+2.1, (4*0.7-1)/3."""
    views = [prior_view(key, calibrated) for key in ("u", "d", "f")]
    body = assemble.response(
        prior_plan(), "served", views, [{"input_tokens": 5}] * 3, "shared", None
    )
    u, d, f = body["answers"]["u"], body["answers"]["d"], body["answers"]["f"]
    assert u == {"type": "noul", "noul": table["u"][0], "semif": as_json(views[0])}
    assert (d["choice"], d["probabilities"], d["semif"]) == (
        "c" if calibrated else "a",
        dict(zip("abc", table["d"])),
        as_json(views[1]),
    )
    assert d["confidence"] == pytest.approx(0.4 if calibrated else 0.25)
    assert f["score"] == pytest.approx(2.4 if calibrated else 0.6) and f[
        "confidence"
    ] == pytest.approx(0.6)
