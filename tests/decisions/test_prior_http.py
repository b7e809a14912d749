"""Orderings "prior" on a real socket (extension): one row per decision, the rotations' answer.

The scripted scorer's logits are each option's description length plus a known additive
bias per position (tests/fake_scorer.py `biased`): exactly the bias PriDe models. The prior
is fitted here through the server itself (each decision under its rotations, then
semif_serve.decisions.prior), then served; a second server with that prior answers each decision from
one row with the rotations' top, and the scorer's own record counts the rows it was given.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semif_serve.decisions import calibration_file, prior
from tests.calibration_files import MATCHING, prior_path
from tests.fake_scorer import BIAS, biased
from tests.reference import softmax
from tests.request_bodies import FOUR, ROW
from tests.timing import timeless
from tests.wire_client import TOKEN, request

BINDING = calibration_file.Binding("semif-serve/fake", "f" * 40, "direct-options-v1")
WORDS = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "ggggggg", "hhhhhhhh"]


def decisions(n: int, count: int) -> list[dict[str, Any]]:
    """`count` decisions over n options whose content (description lengths) puts the best option
    at every position in turn, so a position bias cannot pass for the answer."""
    out = []
    for k in range(count):
        words = [WORDS[(k + i) % len(WORDS)] for i in range(n)]
        out.append(
            {
                "id": f"d{n}-{k}",
                "question": f"Which one ({k})?",
                "options": [{"id": f"o{i}", "description": word} for i, word in enumerate(words)],
            }
        )
    return out


def rows_given(fake: Any) -> list[int]:
    """How many rows each scorer call was given, as the scorer recorded them."""
    return [1 if kind == "direct" else len(payload) for kind, payload in fake.calls]


async def fitted_table(
    start_server: Any,
    fake: Any,
    counts: tuple[int, ...] = (2, 3, 4),
    temperatures: dict[str, dict[str, float]] | None = None,
) -> calibration_file.Table:
    """Fit a prior per option count through a server, as the bench does: rotations, then prior.entry."""
    fitting = await start_server(fake)
    fake.logits = biased
    priors: dict[int, calibration_file.FittedPrior] = {}
    for n in counts:
        body = {
            "state": "s",
            "decisions": [
                {**d, "orderings": "rotations"} for d in decisions(n, prior.MIN_DECISIONS)
            ],
        }
        answered = await request(fitting.port, "POST", "/decide/shared", body)
        assert answered.status == 200
        entry = prior.entry(
            [prior.decision_prior(result["orderings"]) for result in answered.json["results"]]
        )
        priors[n] = calibration_file.FittedPrior(tuple(entry["prior"]), entry["decisions"])
    fake.calls.clear()
    return calibration_file.Table(temperatures or {}, BINDING, None, {"triage": priors})


async def test_the_fitted_prior_is_the_scorers_position_bias(start_server, fake) -> None:
    table = await fitted_table(start_server, fake)
    for n in (2, 3, 4):
        assert table.priors["triage"][n].prior == pytest.approx(softmax(BIAS[:n]), abs=1e-12)
        assert table.priors["triage"][n].decisions == prior.MIN_DECISIONS


@pytest.mark.parametrize("n", [2, 3, 4])
async def test_prior_gives_the_rotations_top_from_one_row_per_decision(
    start_server, fake, n: int
) -> None:
    server = await start_server(fake, calibration=await fitted_table(start_server, fake))
    asked = decisions(n, 12)  # more than were fitted: the prior serves decisions it never saw
    debiased = await request(
        server.port,
        "POST",
        "/decide/shared",
        {
            "state": "s",
            "workload": "triage",
            "decisions": [{**d, "orderings": "prior"} for d in asked],
        },
    )
    assert debiased.status == 200
    assert rows_given(fake) == [len(asked)]  # one score_shared call, exactly one row per decision
    assert [row["id"] for row in fake.calls[0][1]] == [f"{d['id']}#o0" for d in asked]
    rotated = await request(
        server.port,
        "POST",
        "/decide/shared",
        {"state": "s", "decisions": [{**d, "orderings": "rotations"} for d in asked]},
    )
    assert rows_given(fake)[1] == n * len(asked)
    for one, averaged, decision in zip(
        debiased.json["results"], rotated.json["results"], asked, strict=True
    ):
        assert one["combined"]["top"] == averaged["combined"]["top"]
        assert one["combined"]["probabilities"] == pytest.approx(
            averaged["combined"]["probabilities"], abs=1e-9
        )
        lengths = [len(option["description"]) for option in decision["options"]]
        assert (
            one["combined"]["top"] == f"o{lengths.index(max(lengths))}"
        )  # the content's answer, not the position's
    natives = [
        one["orderings"][0]["option_ids"][
            max(range(n), key=one["orderings"][0]["probabilities"].__getitem__)
        ]
        for one in debiased.json["results"]
    ]
    moved = [
        native
        for native, one in zip(natives, debiased.json["results"])
        if native != one["combined"]["top"]
    ]
    assert moved and set(moved) == {
        "o0"
    }  # the bias the prior removed: natively, position 0 won where it should not


async def test_the_result_keeps_the_averaged_shape_and_every_native_number(
    start_server, fake
) -> None:
    table = await fitted_table(start_server, fake, counts=(4,))
    server = await start_server(fake, calibration=table)
    body = {**ROW, "options": FOUR}
    native = (await request(server.port, "POST", "/decide", body)).json
    answered = await request(
        server.port, "POST", "/decide", {**body, "orderings": "prior", "workload": "triage"}
    )
    assert answered.status == 200
    assert (
        rows_given(fake) == [1, 1] and fake.calls[1][0] == "shared"
    )  # /decide too: one shared call, one row
    result = answered.json
    assert set(result) == {"id", "option_ids", "combined", "orderings"} and result[
        "option_ids"
    ] == list("abcd")
    (only,) = result["orderings"]
    assert only == timeless(
        {**native, "id": "r1#o0"}
    )  # SemIf's result untouched, but for the expanded id (INV-1)
    combined = result["combined"]
    expected_prior = list(table.priors["triage"][4].prior)
    debiased = softmax(
        [math.log(p) - math.log(q) for p, q in zip(native["probabilities"], expected_prior)]
    )
    assert combined == {
        "method": "prior",
        "orderings": 1,
        "probabilities": pytest.approx(debiased, abs=1e-12),
        "top": "d",
        "agreement": 1.0,
        "prior": expected_prior,
        "spread": {oid: [p, p] for oid, p in zip("abcd", native["probabilities"])},
    }


async def test_a_temperature_for_the_prior_adds_the_calibrated_view(start_server, fake) -> None:
    table = await fitted_table(
        start_server, fake, counts=(4,), temperatures={"triage": {"prior": 2.0}}
    )
    server = await start_server(fake, calibration=table)
    answered = (
        await request(
            server.port,
            "POST",
            "/decide",
            {**ROW, "options": FOUR, "orderings": "prior", "workload": "triage"},
        )
    ).json
    native, expected_prior = answered["orderings"][0], table.priors["triage"][4].prior
    scores = [math.log(p) - math.log(q) for p, q in zip(native["probabilities"], expected_prior)]
    assert answered["combined"]["calibrated"] == {
        "workload": "triage",
        "method": "prior",
        "temperature": 2.0,
        "probabilities": pytest.approx(softmax(scores, 2.0), abs=1e-12),
    }
    assert answered["combined"]["probabilities"] == pytest.approx(softmax(scores), abs=1e-12)


async def test_prior_mixes_with_other_methods_in_one_call(start_server, fake) -> None:
    table = await fitted_table(
        start_server, fake, counts=(2, 4), temperatures={"triage": {"rotations": 1.5}}
    )
    server = await start_server(fake, calibration=table)
    two, four = decisions(2, 1)[0], decisions(4, 2)[1]
    body = {
        "state": "s",
        "workload": "triage",
        "decisions": [
            {**two, "orderings": "prior"},
            {**four, "id": "rot", "orderings": "rotations"},
            {**four, "orderings": "prior"},
        ],
    }
    answered = await request(server.port, "POST", "/decide/shared", body)
    assert answered.status == 200
    assert rows_given(fake) == [
        1 + 4 + 1
    ]  # one call: a row per prior decision, four for the rotations
    first, rotations, last = answered.json["results"]
    assert (
        first["combined"]["method"],
        rotations["combined"]["method"],
        last["combined"]["method"],
    ) == ("prior", "rotations", "prior")
    assert (
        "calibrated" not in first["combined"]
        and rotations["combined"]["calibrated"]["temperature"] == 1.5
    )
    assert last["combined"]["top"] == rotations["combined"]["top"]


TABLE = calibration_file.Table(
    {"triage": {"none": 2.0}, "plain": {"none": 1.0}},
    BINDING,
    None,
    {
        "triage": {2: calibration_file.FittedPrior((0.6, 0.4), 8)},
        "sorting": {4: calibration_file.FittedPrior((0.25,) * 4, 8)},
    },
)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/decide",
            {**ROW, "orderings": "prior"},
            "decision 'r1' has orderings \"prior\" over 2 options, which needs a workload naming the prior; the request names no workload",
        ),
        (
            "/decide",
            {**ROW, "options": FOUR, "orderings": "prior", "workload": "triage"},
            "workload 'triage' has no prior for 4 options (decision 'r1'); it has priors for: 2",
        ),
        (
            "/decide",
            {**ROW, "orderings": "prior", "workload": "plain"},
            "workload 'plain' has no prior for 2 options (decision 'r1'); it has priors for: no option count",
        ),
        (
            "/decide/shared",
            {
                "state": "s",
                "workload": "triage",
                "decisions": [
                    {"id": "ok", "question": "q", "options": ROW["options"], "orderings": "prior"},
                    {"id": "three", "question": "q", "options": FOUR[:3], "orderings": "prior"},
                ],
            },
            "workload 'triage' has no prior for 3 options (decision 'three'); it has priors for: 2",
        ),
        (
            "/decide/shared",
            {
                "state": "s",
                "workload": "sorting",
                "decisions": [
                    {"id": "p", "question": "q", "options": FOUR, "orderings": "prior"},
                    {"id": "plain", "question": "q", "options": FOUR},
                ],
            },
            "workload 'sorting' has no temperature for method 'none' (decision 'plain'); it has: none at all",
        ),
        (
            "/decide",
            {**ROW, "id": "x#o0", "orderings": "prior", "workload": "triage"},
            "decision id 'x#o0' contains '#o<digits>', reserved for orderings",
        ),
        (
            "/decide",
            {**ROW, "orderings": "pride", "workload": "triage"},
            "body.orderings must be one of none, rotations, all, prior, adaptive",
        ),
    ],
    ids=[
        "no-workload",
        "no-prior-for-n",
        "workload-without-priors",
        "shared-one-n-missing",
        "other-method-keeps-its-rule",
        "reserved-id",
        "unknown-orderings",
    ],
)
async def test_each_refusal_is_a_422_naming_what_is_missing_before_any_scoring(
    start_server, fake, path: str, body: dict[str, Any], message: str
) -> None:
    server = await start_server(fake, calibration=TABLE)
    refused = await request(server.port, "POST", path, body)
    assert refused.status == 422
    assert (
        refused.json["error"]["code"] == "invalid_request"
        and refused.json["error"]["message"] == message
    )
    assert fake.calls == []  # never scored: no silent fallback to the native answer
    assert (
        await request(server.port, "POST", "/decide", ROW)
    ).status == 200  # and the server keeps serving


async def test_health_lists_the_option_counts_with_a_prior(start_server, fake) -> None:
    server = await start_server(fake, calibration=TABLE)
    health = (await request(server.port, "GET", "/health", headers=[])).json
    assert health["calibration"]["priors"] == {"sorting": [4], "triage": [2]}
    assert health["workloads"] == [
        "plain",
        "sorting",
        "triage",
    ]  # "sorting" has priors only, and may be named
    assert health["calibration"]["workloads"] == {"plain": {"none": 1.0}, "triage": {"none": 2.0}}


# -- startup, in a real process ---------------------------------------------------------------------


def stub_env(path: str, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEMIF_")}
    return {
        **env,
        "SEMIF_API_TOKEN": TOKEN,
        "SEMIF_SCORER": "stub",
        "SEMIF_CALIBRATION": path,
        "SEMIF_HOST": "127.0.0.1",
        **extra,
    }


def refused_startup(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "semif_serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr  # as any other invalid setting
    (line,) = done.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize(
    ("priors", "message"),
    [
        (
            {"triage": {"4": {"prior": [0.4, 0.3, 0.2], "decisions": 8}}},
            "priors 'triage' entry '4': prior has 3 entries; 4 options need 4",
        ),
        (
            {"triage": {"4": {"prior": [0.5, 0.3, 0.2, 0.0], "decisions": 8}}},
            "priors 'triage' entry '4': prior holds a value <= 0 (0.0); every position needs a positive prior",
        ),
        (
            {"triage": {"4": {"prior": [0.4, 0.3, 0.2, 0.2], "decisions": 8}}},
            "priors 'triage' entry '4': prior sums to 1.1, not 1 within 1e-06",
        ),
    ],
    ids=["length", "zero", "sum"],
)
def test_a_bad_prior_refuses_startup_with_one_line_naming_the_variable_and_the_entry(
    tmp_path: Path, priors: Any, message: str
) -> None:
    line = refused_startup(stub_env(prior_path(tmp_path, priors=priors)))
    assert line == f"semif-serve: SEMIF_CALIBRATION: {message}"


def test_a_prior_bound_elsewhere_refuses_startup(tmp_path: Path) -> None:
    line = refused_startup(stub_env(prior_path(tmp_path, workloads=None, model="fitted-elsewhere")))
    assert (
        line
        == f"semif-serve: SEMIF_CALIBRATION is bound to model 'fitted-elsewhere', but SEMIF_MODEL is {MATCHING['model']!r}"
    )


def test_the_systemone_default_prior_without_priors_refuses_startup(tmp_path: Path) -> None:
    path = tmp_path / "temperatures.json"
    path.write_text(json.dumps({"triage": 1.5}))
    line = refused_startup(
        stub_env(str(path), SEMIF_SYSTEMONE_ORDERINGS="prior", SEMIF_SYSTEMONE_WORKLOAD="triage")
    )
    assert line == (
        "semif-serve: SEMIF_SYSTEMONE_WORKLOAD 'triage' has no priors for SEMIF_SYSTEMONE_ORDERINGS='prior'; "
        "workloads with priors: none"
    )
