"""Qwen2.5-Coder-1.5B-Instruct served on the CPU reads: the check of tests/reading_rows.py, which
SmolLM2 fails (test_smollm2_model.py) and the 0.5B passes only by chance, so it runs on the 1.5B.
The calibration file docs/models.md offers beside it (bench/evidence/qwen2.5-coder-1.5b/) is bound
to this build and serves its prior, on the same loaded model.

The model is built once per machine into $SEMIF_READING_HOME (default
~/.cache/semif-serve/reading), which CI keeps between runs; it is served through the production
path by the conftest's `tiny_scorer` over an overridden `tiny_built`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from semif_serve.builders import reading
from semif_serve.decisions import averaging, calibration, calibration_file
from semif_serve.decisions.methods import Method
from semif_serve.decisions.numerics import log_softmax
from semif_serve.decisions.prior import debias
from semif_serve.decisions.views import as_json
from tests.reading_rows import ROWS, misread
from tests.wire_client import request

REVISION = "ce7d1a6abd5c122f46b0ee2ea574931f866a91dc"
EVIDENCE = (
    Path(__file__).resolve().parents[2] / "bench/evidence/qwen2.5-coder-1.5b/calibration.json"
)


@pytest.fixture(scope="module")
def tiny_built(reading_large_build: dict[str, str]) -> dict[str, str]:
    """Points the conftest's model fixtures at the 1.5B reading model for this module."""
    return reading_large_build


def test_the_build_is_the_pinned_one(reading_large_build: dict[str, str]) -> None:
    assert reading_large_build["SEMIF_MODEL"] == reading.MODELS["1.5b"].repo_id
    assert reading_large_build["SEMIF_REVISION"] == REVISION


async def test_its_top_follows_the_right_description_wherever_it_is_listed(
    start_server, tiny_scorer
) -> None:
    server = await start_server(tiny_scorer)
    assert await misread(server.port) == []


async def test_the_committed_calibration_is_bound_to_it_and_serves_its_prior(
    start_server, tiny_scorer
) -> None:
    table = calibration_file.load(str(EVIDENCE))
    facts = tiny_scorer.health()
    assert table.binding is not None and facts["dtype"] == "float32"
    calibration_file.check_binding(
        table, facts["model"], REVISION, facts["prompt_version"], facts["dtype"]
    )  # startup's own check: a rebuilt revision or another prompt must refit or rebind the file
    server = await start_server(tiny_scorer, calibration=table)
    state, question, descriptions = ROWS[0]
    options = [{"id": f"o{i}", "description": text} for i, text in enumerate(descriptions)]
    body = {"id": "r", "state": state, "question": question, "options": options}
    answer = await request(
        server.port,
        "POST",
        "/decide",
        {**body, "workload": "default", "orderings": "prior"},
        timeout=600,
    )
    assert answer.status == 200, answer.json
    combined = answer.json["combined"]
    assert combined["prior"] == list(table.priors["default"][3].prior)
    assert combined["calibrated"]["temperature"] == table["default"]["prior"]


def top_id(result: dict[str, Any], prior: Sequence[float], order: list[str]) -> str:
    """A row's top option once the prior is divided out by position, ties to the caller's first."""
    scores = dict(zip(result["option_ids"], debias(log_softmax(result["option_logits"]), prior)))
    return max(order, key=scores.__getitem__)


@pytest.mark.parametrize("threshold", [0.0, 1.0], ids=["never-escalates", "always-escalates"])
async def test_adaptive_answers_as_the_prior_or_as_the_rotations_of_the_rows_it_scored(
    start_server, tiny_scorer, threshold: float
) -> None:
    """Over the committed prior with a threshold beside it (0: no margin is below it; 1: every one
    is), each adaptive answer is averaging's combination of the rows it scored: the prior's view
    of its one row (alone, or confirmed by its half turn), or the rotations' of all n, each with
    that method's temperature."""
    committed = calibration_file.load(str(EVIDENCE))
    priors = {
        workload: {
            n: dataclasses.replace(entry, threshold=threshold) for n, entry in counts.items()
        }
        for workload, counts in committed.priors.items()
    }
    table = dataclasses.replace(committed, priors=priors)
    server = await start_server(tiny_scorer, calibration=table)
    for number, (state, question, descriptions) in enumerate(ROWS[:2]):
        options = [{"id": f"o{i}", "description": text} for i, text in enumerate(descriptions)]
        row = {"id": f"r{number}", "state": state, "question": question, "options": options}
        answer = await request(
            server.port,
            "POST",
            "/decide",
            {**row, "workload": "default", "orderings": "adaptive"},
            timeout=600,
        )
        assert answer.status == 200, answer.json
        combined, scored = answer.json["combined"], answer.json["orderings"]
        escalated, n = threshold == 1.0, len(options)
        prior = table.priors["default"][n].prior
        rotations = {1: [0], 2: [0, n // 2], n: list(range(n))}[len(scored)]
        assert [r["id"] for r in scored] == [f"r{number}#o{k}" for k in rotations]
        if escalated:  # the half turn scored; the rest only where its debiased top differs
            half = scored[rotations.index(n // 2)]
            ids = [o["id"] for o in options]
            confirmed = top_id(scored[0], prior, ids) == top_id(half, prior, ids)
            assert len(scored) == (2 if confirmed else n)
        else:
            assert len(scored) == 1
        basis = Method.ROTATIONS if len(scored) == n else Method.PRIOR
        temper = functools.partial(
            calibration.combined_view, "default", basis, table["default"][basis]
        )
        rows = scored if basis is Method.ROTATIONS else scored[:1]
        divided = prior if basis is Method.PRIOR else None
        expected = as_json(averaging.combine(row, basis, rows, temper, divided))["combined"]
        extra = {"method": "adaptive", "rows": len(scored), "escalated": escalated}
        assert combined == {**expected, **extra, "threshold": threshold}
