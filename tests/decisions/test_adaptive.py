"""Orderings "adaptive", in process: which decisions escalate, what the second call carries, the
views it yields, the threshold in the calibration file, and the refusals before any scoring."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from semif_serve.decisions import adaptive, averaging, calibration_file, request_model, viewing
from semif_serve.decisions.calibration_file import FittedPrior, Table
from semif_serve.decisions.methods import Method
from semif_serve.decisions.views import as_json
from semif_serve.errors import ApiError
from tests.calibration_files import MATCHING
from tests.fake_scorer import semif_like

PRIOR3 = (0.5, 0.3, 0.2)
THRESHOLD = 0.2
TABLE = Table(
    {"triage": {"prior": 2.0, "rotations": 1.5}, "bare": {"none": 1.0}},
    None,
    None,
    {
        "triage": {3: FittedPrior(PRIOR3, 8, THRESHOLD), 2: FittedPrior((0.5, 0.5), 8)},
        "bare": {3: FittedPrior(PRIOR3, 8, THRESHOLD)},
    },
)
LIMITS = request_model.Limits(
    16, frozenset(TABLE), TABLE.methods(), TABLE.prior_counts(), TABLE.threshold_counts()
)


def logits(row: dict[str, Any]) -> list[float]:
    """Each option's description is its logit, plus log prior by position: the prior then divides
    the position out exactly, so the caller's-order margin is the descriptions' own."""
    return [float(o["description"]) + math.log(PRIOR3[i]) for i, o in enumerate(row["options"])]


def decision(name: str, values: tuple[float, float, float]) -> dict[str, Any]:
    options = [{"id": f"{name}{i}", "description": str(v)} for i, v in enumerate(values)]
    return {"id": name, "question": f"{name}?", "options": options, "orderings": "adaptive"}


SURE = decision("sure", (0.0, 0.0, 4.0))  # debiased margin about 0.96
UNSURE = decision("unsure", (1.0, 1.2, 0.0))  # debiased margin about 0.08


def shared(*items: dict[str, Any], workload: str | None = "triage") -> request_model.DecideRequest:
    body: dict[str, Any] = {"state": "s", "decisions": list(items)}
    if workload is not None:
        body["workload"] = workload
    return request_model.parse_shared(json.dumps(body).encode(), LIMITS)


def scored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [semif_like(row, logits(row)) for row in rows]


def test_the_margin_is_top_minus_runner_up() -> None:
    assert adaptive.margin([0.2, 0.5, 0.3]) == pytest.approx(0.2)
    assert adaptive.margin([0.5, 0.5]) == 0.0


def test_an_adaptive_decision_counts_its_worst_case_and_sends_one_row_first() -> None:
    request = shared(SURE, UNSURE, {**SURE, "id": "plain", "orderings": "rotations"})
    assert request.row_count == 3 + 3 + 3  # the cap and the wait budget: n rows each
    assert [row["id"] for row in request.rows()] == [
        "sure#o0",
        "unsure#o0",
        "plain#o0",
        "plain#o1",
        "plain#o2",
    ]
    assert request.rows()[0]["options"] == SURE["options"]  # the caller's order


def test_only_the_unsure_escalate_and_the_second_call_holds_their_other_rotations() -> None:
    request = shared(UNSURE, SURE, {**UNSURE, "id": "again"})
    first = scored(request.rows())
    escalated = adaptive.escalated(request, first, TABLE)
    assert escalated == frozenset({0, 2})
    rows = adaptive.second_rows(request, escalated)
    assert [row["id"] for row in rows] == ["unsure#o1", "unsure#o2", "again#o1", "again#o2"]
    assert rows == [*averaging.expand(request.decisions[0].row, "rotations")[1:]] + [
        *averaging.expand(request.decisions[2].row, "rotations")[1:]
    ]


def test_a_threshold_of_zero_never_escalates_and_of_one_always() -> None:
    request = shared(UNSURE, SURE)
    first = scored(request.rows())
    for threshold, expected in ((0.0, frozenset()), (1.0, frozenset({0, 1}))):
        table = Table({}, None, None, {"triage": {3: FittedPrior(PRIOR3, 8, threshold)}})
        assert adaptive.escalated(request, first, table) == expected


def test_the_views_are_the_priors_where_sure_and_the_rotations_where_not() -> None:
    request = shared(SURE, UNSURE)
    first = scored(request.rows())
    escalated = adaptive.escalated(request, first, TABLE)
    second = scored(adaptive.second_rows(request, escalated))
    results = adaptive.merged(request, first, second, escalated)
    sure, unsure = (as_json(v) for v in viewing.views(request, results, TABLE, escalated))

    as_prior = request_model.Decision(request.decisions[0].row, Method.PRIOR)
    expected = as_json(viewing.view(as_prior, results[:1], "triage", TABLE))
    assert sure["combined"] == {
        **expected["combined"],
        "method": "adaptive",
        "rows": 1,
        "escalated": False,
        "threshold": THRESHOLD,
    }
    assert sure["combined"]["calibrated"]["method"] == "prior"  # the prior's temperature
    assert sure["orderings"] == results[:1] and sure["orderings"][0] is first[0]  # INV-1

    as_rotations = request_model.Decision(request.decisions[1].row, Method.ROTATIONS)
    expected = as_json(viewing.view(as_rotations, results[1:], "triage", TABLE))
    assert unsure["combined"] == {
        **expected["combined"],
        "method": "adaptive",
        "rows": 3,
        "escalated": True,
        "threshold": THRESHOLD,
    }
    assert unsure["combined"]["calibrated"] == {
        "workload": "triage",
        "method": "rotations",
        "temperature": 1.5,
        "probabilities": unsure["combined"]["calibrated"]["probabilities"],
    }
    assert [r["id"] for r in unsure["orderings"]] == ["unsure#o0", "unsure#o1", "unsure#o2"]
    assert unsure["orderings"][0] is first[1]


def test_merged_refuses_more_second_results_than_rows() -> None:
    request = shared(UNSURE)
    first = scored(request.rows())
    second = scored(adaptive.second_rows(request, frozenset({0})))
    with pytest.raises(RuntimeError, match="more results than its rows"):
        adaptive.merged(request, first, [*second, second[0]], frozenset({0}))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"state": "s", "decisions": [SURE]},
            "decision 'sure' has orderings \"adaptive\" over 3 options, which needs a workload naming "
            "the prior; the request names no workload",
        ),
        (
            {
                "state": "s",
                "workload": "triage",
                "decisions": [{**SURE, "options": SURE["options"][:2]}],
            },
            "workload 'triage' has no threshold for 2 options (decision 'sure'), which orderings "
            '"adaptive" needs beside the prior; it has thresholds for: 3',
        ),
        (
            {
                "state": "s",
                "workload": "triage",
                "decisions": [
                    {**SURE, "options": [*SURE["options"], {"id": "x", "description": "1"}]}
                ],
            },
            "workload 'triage' has no prior for 4 options (decision 'sure'); it has priors for: 2, 3",
        ),
        (
            {"state": "s", "workload": "triage", "decisions": [SURE] * 5 + [{**SURE, "id": "six"}]},
            "the request expands to 18 rows; at most 16 are allowed",
        ),
    ],
    ids=["no-workload", "prior-without-threshold", "no-prior", "worst-case-over-the-cap"],
)
def test_an_adaptive_decision_is_refused_before_scoring(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as refused:
        request_model.parse_shared(json.dumps(body).encode(), LIMITS)
    assert refused.value.message == message


# -- the threshold in the calibration file -------------------------------------------------------


def write(tmp_path: Path, entry: dict[str, Any] | str) -> str:
    text = entry if isinstance(entry, str) else json.dumps(entry)
    path = tmp_path / "calibration.json"
    path.write_text(
        json.dumps({**MATCHING, "priors": {"w": {"3": "ENTRY"}}}).replace('"ENTRY"', text),
        encoding="utf-8",
    )
    return str(path)


ENTRY = {"prior": list(PRIOR3), "decisions": 8}


@pytest.mark.parametrize("threshold", [0, 0.19, 1, 1.0])
def test_a_threshold_in_range_is_read_beside_its_prior(tmp_path: Path, threshold: float) -> None:
    table = calibration_file.load(write(tmp_path, {**ENTRY, "threshold": threshold}))
    assert table.priors["w"][3].threshold == threshold
    assert table.threshold_counts() == {"w": frozenset({3})}
    assert table.describe()["thresholds"] == {"w": {"3": threshold}}


def test_a_prior_without_a_threshold_serves_prior_not_adaptive(tmp_path: Path) -> None:
    table = calibration_file.load(write(tmp_path, ENTRY))
    assert table.priors["w"][3].threshold is None and "thresholds" not in table.describe()
    fit = table.fit("w")
    assert Method.PRIOR.lacks(fit, 3) is None
    assert Method.ADAPTIVE.lacks(fit, 3) is not None


@pytest.mark.parametrize(
    "threshold",
    ["-0.01", "1.01", "true", "false", '"0.2"', "null", "NaN", "Infinity", "1e400", "[0.2]"],
)
def test_a_threshold_out_of_range_or_not_a_number_is_refused(
    tmp_path: Path, threshold: str
) -> None:
    entry = json.dumps(ENTRY)[:-1] + f', "threshold": {threshold}}}'
    with pytest.raises(ValueError) as refused:
        calibration_file.load(write(tmp_path, entry))
    assert str(refused.value).startswith(
        "SEMIF_CALIBRATION: priors 'w' entry '3': threshold must be a number in [0, 1], got "
    )


def test_adaptive_takes_no_temperature_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(
        json.dumps(
            {**MATCHING, "workloads": {"w": {"adaptive": 1.0}}, "priors": {"w": {"3": ENTRY}}}
        ),
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"names unknown method\(s\) \['adaptive'\]"):
        calibration_file.load(str(path))
