"""Orderings "adaptive", in process: which decisions go on to the half turn and to the rest, what each
later call carries, the views it yields, the threshold in the calibration file, and the refusals
before any scoring."""

from __future__ import annotations

import dataclasses
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


PRIOR4 = (0.4, 0.3, 0.2, 0.1)
TABLE4 = Table(
    {},
    None,
    None,
    {"triage": {3: FittedPrior(PRIOR3, 8, THRESHOLD), 4: FittedPrior(PRIOR4, 8, THRESHOLD)}},
)
TWISTS = {"split#o1", "split4#o2"}  # rows whose position 0 gains 3: a half turn that disagrees


def logits(row: dict[str, Any]) -> list[float]:
    """Each option's description is its logit, plus log prior by position: the prior then divides
    the position out exactly, so the caller's-order margin is the descriptions' own, and a half
    turn agrees with it, except in a twisted row."""
    prior = PRIOR3 if len(row["options"]) == 3 else PRIOR4
    values = [float(o["description"]) + math.log(prior[i]) for i, o in enumerate(row["options"])]
    values[0] += 3.0 if row["id"] in TWISTS else 0.0
    return values


def decision(name: str, values: tuple[float, ...]) -> dict[str, Any]:
    options = [{"id": f"{name}{i}", "description": str(v)} for i, v in enumerate(values)]
    return {"id": name, "question": f"{name}?", "options": options, "orderings": "adaptive"}


SURE = decision("sure", (0.0, 0.0, 4.0))  # debiased margin about 0.96
UNSURE = decision("unsure", (1.0, 1.2, 0.0))  # debiased margin about 0.08; its half turn agrees
SPLIT = decision("split", (1.2, 1.0, 0.0))  # margin about 0.09; its half turn is twisted


def shared(
    *items: dict[str, Any], workload: str | None = "triage", table: Table = TABLE
) -> request_model.DecideRequest:
    body: dict[str, Any] = {"state": "s", "decisions": list(items)}
    if workload is not None:
        body["workload"] = workload
    limits = request_model.Limits(
        16, frozenset(table), table.methods(), table.prior_counts(), table.threshold_counts()
    )
    return request_model.parse_shared(json.dumps(body).encode(), limits)


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


def test_the_stages_are_the_callers_order_the_half_turn_and_the_rest() -> None:
    assert adaptive.stages(2) == ((0,), (1,))
    assert adaptive.stages(3) == ((0,), (1,), (2,))
    assert adaptive.stages(4) == ((0,), (2,), (1, 3))
    assert adaptive.stages(5) == ((0,), (2,), (1, 3, 4))


def calls(request: request_model.DecideRequest, table: Table = TABLE) -> list[Any]:
    """Every stage's call as the service makes them: (going decisions, their rows), and the end."""
    progress = adaptive.Progress(scored(request.rows()))
    made = []
    while going := progress.going_on(request, table):
        rows = progress.next_rows(request, going)
        made.append((going, [row["id"] for row in rows]))
        progress = progress.then(request, going, scored(rows))
    return [made, progress]


def test_only_the_unsure_go_on_and_only_those_the_half_turn_does_not_confirm_score_the_rest() -> (
    None
):
    request = shared(UNSURE, SURE, SPLIT, {**UNSURE, "id": "again"})
    made, progress = calls(request)
    assert made == [
        (frozenset({0, 2, 3}), ["unsure#o1", "split#o1", "again#o1"]),  # the half turn
        (frozenset({2}), ["split#o2"]),  # the rest, where the half turn disagreed
    ]
    assert progress.escalated == {0: 2, 2: 3, 3: 2}
    assert [r["id"] for r in progress.results] == [
        "unsure#o0",
        "unsure#o1",
        "sure#o0",
        "split#o0",
        "split#o1",
        "split#o2",
        "again#o0",
        "again#o1",
    ]


def test_four_options_score_the_half_turn_then_both_quarter_turns() -> None:
    split4 = decision("split4", (1.2, 1.0, 0.0, -1.0))
    made, progress = calls(shared(split4, table=TABLE4), TABLE4)
    assert made == [
        (frozenset({0}), ["split4#o2"]),
        (frozenset({0}), ["split4#o1", "split4#o3"]),
    ]
    request = shared(split4, table=TABLE4)
    view = as_json(viewing.views(request, progress.results, TABLE4, progress.escalated)[0])
    assert [r["id"] for r in view["orderings"]] == [
        f"split4#o{k}" for k in range(4)
    ]  # rotation order
    assert view["combined"]["rows"] == 4


def test_a_threshold_of_zero_never_escalates_and_of_one_always() -> None:
    request = shared(UNSURE, SURE)
    for threshold, expected in ((0.0, frozenset()), (1.0, frozenset({0, 1}))):
        table = Table({}, None, None, {"triage": {3: FittedPrior(PRIOR3, 8, threshold)}})
        assert adaptive.Progress(scored(request.rows())).going_on(request, table) == expected


def test_the_views_are_the_priors_where_sure_or_confirmed_and_the_rotations_where_not() -> None:
    request = shared(SURE, UNSURE, SPLIT)
    made, progress = calls(request)
    results = progress.results
    sure, unsure, split = (
        as_json(v) for v in viewing.views(request, results, TABLE, progress.escalated)
    )

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
    assert sure["orderings"] == results[:1]  # INV-1

    as_prior = request_model.Decision(request.decisions[1].row, Method.PRIOR)
    expected = as_json(viewing.view(as_prior, results[1:2], "triage", TABLE))
    assert unsure["combined"] == {
        **expected["combined"],
        "method": "adaptive",
        "rows": 2,
        "escalated": True,
        "threshold": THRESHOLD,
    }
    assert unsure["combined"]["calibrated"]["method"] == "prior"  # confirmed: the one-row answer
    assert [r["id"] for r in unsure["orderings"]] == ["unsure#o0", "unsure#o1"]
    assert all(a is b for a, b in zip(unsure["orderings"], results[1:3]))  # INV-1: the same objects

    as_rotations = request_model.Decision(request.decisions[2].row, Method.ROTATIONS)
    expected = as_json(viewing.view(as_rotations, results[3:], "triage", TABLE))
    assert split["combined"] == {
        **expected["combined"],
        "method": "adaptive",
        "rows": 3,
        "escalated": True,
        "threshold": THRESHOLD,
    }
    assert split["combined"]["calibrated"] == {
        "workload": "triage",
        "method": "rotations",
        "temperature": 1.5,
        "probabilities": split["combined"]["calibrated"]["probabilities"],
    }
    assert [r["id"] for r in split["orderings"]] == ["split#o0", "split#o1", "split#o2"]


def test_the_half_turns_top_is_read_in_the_callers_order_with_the_prior_divided_out() -> None:
    first, half, _ = scored(averaging.expand(SPLIT, "rotations"))
    order = [option["id"] for option in SPLIT["options"]]
    assert adaptive.debiased_top(first, PRIOR3, order) == "split0"
    assert adaptive.debiased_top(half, PRIOR3, order) == "split1"  # the twist at its position 0
    assert not adaptive.confirms(first, half, PRIOR3)
    # The prior is divided out: undivided, position 0's weight would win this one.
    unsure, unsure_half, _ = scored(averaging.expand(UNSURE, "rotations"))
    order = [option["id"] for option in UNSURE["options"]]
    assert adaptive.debiased_top(unsure, PRIOR3, order) == "unsure1"
    assert adaptive.debiased_top(unsure, (1 / 3,) * 3, order) == "unsure0"
    assert adaptive.confirms(unsure, unsure_half, PRIOR3)
    tie = semif_like(SPLIT, [math.log(p) for p in PRIOR3])  # every option debiased to 0
    assert adaptive.debiased_top(tie, PRIOR3, ["split0", "split1", "split2"]) == "split0"
    assert adaptive.debiased_top(tie, PRIOR3, ["split2", "split1", "split0"]) == "split2"


def test_past_the_first_stage_only_the_escalated_go_on() -> None:
    """An unsure decision not escalated at the first call (as with another threshold then) is never
    given a later stage's rows: the half turn comes only after its first row was judged."""
    request = shared(UNSURE, SPLIT)
    first = scored(request.rows())
    half = scored(averaging.expand(SPLIT, "rotations")[1:2])
    progress = adaptive.Progress(first).then(request, frozenset({1}), half)
    assert progress.escalated == {1: 2} and progress.going_on(request, TABLE) == frozenset({1})


def test_a_margin_at_the_threshold_stands_one_below_it_escalates() -> None:
    request = shared(UNSURE)
    first = scored(request.rows())
    debiased = averaging.combine(UNSURE, "prior", first, prior=PRIOR3).combined.probabilities
    at = adaptive.margin(debiased)
    for threshold, expected in ((at, frozenset()), (math.nextafter(at, 1.0), frozenset({0}))):
        table = Table({}, None, None, {"triage": {3: FittedPrior(PRIOR3, 8, threshold)}})
        assert adaptive.Progress(first).going_on(request, table) == expected


def test_an_adaptive_decision_the_request_model_should_have_refused_is_named() -> None:
    request = shared(UNSURE)
    first = scored(request.rows())
    bare = Table({}, None, None, {"triage": {3: FittedPrior(PRIOR3, 8)}})
    with pytest.raises(ValueError, match="^decision 'unsure' has a prior without a threshold$"):
        adaptive.Progress(first).going_on(request, bare)
    nameless = dataclasses.replace(request, workload=None)
    with pytest.raises(ValueError, match="^decision 'unsure' is adaptive without a workload$"):
        adaptive.Progress(first).going_on(nameless, TABLE)


def test_then_refuses_more_results_than_rows() -> None:
    request = shared(UNSURE)
    progress = adaptive.Progress(scored(request.rows()))
    going = progress.going_on(request, TABLE)
    more = scored(progress.next_rows(request, going))
    with pytest.raises(RuntimeError, match="^the next call returned more results than its rows$"):
        progress.then(request, going, [*more, more[0]])


def test_the_next_call_reserves_the_rows_the_stage_after_it_may_add() -> None:
    request = shared(UNSURE, SPLIT, decision("four", (1.2, 1.0, 0.0, -1.0)), table=TABLE4)
    progress = adaptive.Progress(scored(request.rows()))
    going = progress.going_on(request, TABLE4)
    assert progress.reserve(request, going) == 1 + 1 + 2  # the rest: n - 2 each
    later = progress.then(request, going, scored(progress.next_rows(request, going)))
    assert later.reserve(request, later.going_on(request, TABLE4)) == 0


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
