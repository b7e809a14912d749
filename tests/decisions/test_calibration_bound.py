"""The bound calibration file, the binding check and the calibrated averaged view (extensions).

Unit level: files on disk through calibration_file.load and the server's startup read, the binding
check against what is loaded, and the view arithmetic under hypothesis.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semif_serve import config, server
from semif_serve.decisions import averaging, calibration, calibration_file
from semif_serve.decisions.calibration_file import T_MAX, T_MIN, BindingMismatch, check_binding
from semif_serve.decisions.views import as_json
from tests.wire_client import TOKEN

BINDING = {
    "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "revision": "a" * 40,
    "prompt_version": "direct-options-v1",
}
FITTED = {
    "rows": 400,
    "date": "2026-11-30",
    "nll": {"before": 0.91, "after": 0.62},
    "ece": {"before": 0.31, "after": 0.04},
}


def bound_file(**overrides: Any) -> dict[str, Any]:
    return {
        **BINDING,
        "fitted": FITTED,
        "workloads": {"triage": {"none": 2.5, "rotations": 1.8}, "routing": {"all": 0.9}},
        **overrides,
    }


def write(tmp_path: Path, document: Any) -> str:
    path = tmp_path / "calibration_file.json"
    path.write_text(
        document if isinstance(document, str) else json.dumps(document), encoding="utf-8"
    )
    return str(path)


def refused(path: str) -> str:
    with pytest.raises(ValueError) as caught:
        calibration_file.load(path)
    assert str(caught.value).startswith("SEMIF_CALIBRATION")
    return str(caught.value)


# -- the two forms --------------------------------------------------------------------


def test_a_bound_file_loads_every_method_and_its_binding(tmp_path: Path) -> None:
    table = calibration_file.load(write(tmp_path, bound_file()))
    assert dict(table["triage"]) == {"none": 2.5, "rotations": 1.8} and dict(table["routing"]) == {
        "all": 0.9
    }
    assert table.binding == calibration_file.Binding(**BINDING)
    assert table.describe() == {
        "binding": {**BINDING, "dtype": "float32"},  # a file without a dtype is bound to float32
        "fitted": FITTED,
        "workloads": {"routing": {"all": 0.9}, "triage": {"none": 2.5, "rotations": 1.8}},
        "priors": {},
    }
    assert table.methods() == {
        "triage": frozenset({"none", "rotations"}),
        "routing": frozenset({"all"}),
    }


def test_a_plain_file_is_the_none_method_and_unbound(tmp_path: Path) -> None:
    table = calibration_file.load(write(tmp_path, {"triage": 1.5, "routing": 2}))
    assert {name: dict(methods) for name, methods in table.items()} == {
        "triage": {"none": 1.5},
        "routing": {"none": 2.0},
    }
    assert table.binding is None and table.describe()["binding"] is None
    check_binding(table, "any/model", "b" * 40, None, None)  # nothing to check: never refused


def test_fitted_is_optional_and_the_bounds_are_accepted(tmp_path: Path) -> None:
    document = bound_file(workloads={"w": {"none": T_MIN, "rotations": T_MAX, "all": 20}})
    del document["fitted"]
    table = calibration_file.load(write(tmp_path, document))
    assert (
        dict(table["w"]) == {"none": 0.05, "rotations": 20.0, "all": 20.0} and table.fitted is None
    )


@pytest.mark.parametrize(
    "value", [True, False, "1.0", None, [1.0], 0.0499, 0, -1, 20.0001, "NaN", "Infinity", "1e400"]
)
def test_every_method_temperature_follows_the_contract_rules(tmp_path: Path, value: Any) -> None:
    # The three non-finite spellings go in as JSON literals, the rest as JSON values.
    literal = (
        value
        if isinstance(value, str) and value in ("NaN", "Infinity", "1e400")
        else json.dumps(value)
    )
    text = json.dumps(
        bound_file(workloads={"ok": {"none": 1.0}, "w-7": {"none": 1.0, "rotations": 0.5}})
    )
    text = text.replace('"rotations": 0.5', f'"rotations": {literal}')
    message = refused(write(tmp_path, text))
    assert "'w-7'" in message and "'rotations'" in message


@pytest.mark.parametrize(
    "mutation,needle",
    [
        ({"workloads": {"w": {"sideways": 1.0}}}, "sideways"),
        ({"workloads": {"w": {}}}, "'w'"),
        ({"workloads": {"w": 1.5}}, "'w'"),
        ({"model": ""}, "'model'"),
        ({"revision": None}, "'revision'"),
        ({"prompt_version": 3}, "'prompt_version'"),
        ({"fitted": [1, 2]}, "fitted"),
        ({"fitted": {"nll": float("nan")}}, "non-finite"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_malformed_bound_file_is_refused_naming_what(
    tmp_path: Path, mutation: dict[str, Any], needle: str
) -> None:
    assert needle in refused(write(tmp_path, bound_file(**mutation)))


def test_a_bound_file_without_its_binding_is_refused(tmp_path: Path) -> None:
    document = bound_file()
    del document["prompt_version"]
    assert "'prompt_version'" in refused(write(tmp_path, document))


def test_startup_reads_the_bound_form_that_config_names(tmp_path: Path) -> None:
    path = write(tmp_path, bound_file())
    loaded = server.read_calibration(
        config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_CALIBRATION": path})
    )
    assert loaded.table.binding == calibration_file.Binding(**BINDING)
    assert dict(loaded.table["triage"]) == {"none": 2.5, "rotations": 1.8}
    assert loaded.sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()


# -- the binding ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,source",
    [
        ("model", "SEMIF_MODEL"),
        ("revision", "SEMIF_REVISION"),
        ("prompt_version", "prompt_version"),
    ],
)
def test_a_mismatched_binding_is_refused_naming_the_variable_and_the_mismatch(
    tmp_path: Path, key: str, source: str
) -> None:
    table = calibration_file.load(write(tmp_path, bound_file()))
    loaded = {**BINDING, key: "something-else"}
    with pytest.raises(BindingMismatch) as caught:
        check_binding(
            table, loaded["model"], loaded["revision"], loaded["prompt_version"], "float32"
        )
    message = str(caught.value)
    assert message.startswith("SEMIF_CALIBRATION") and key in message and source in message
    assert repr(BINDING[key]) in message and "'something-else'" in message
    check_binding(
        table, BINDING["model"], BINDING["revision"], BINDING["prompt_version"], "float32"
    )  # the exact match passes


def test_a_scorer_without_a_prompt_version_cannot_satisfy_a_binding(tmp_path: Path) -> None:
    with pytest.raises(BindingMismatch, match="prompt_version"):
        check_binding(
            calibration_file.load(write(tmp_path, bound_file())),
            BINDING["model"],
            BINDING["revision"],
            None,
            "float32",
        )


# -- the calibrated averaged view -----------------------------------------------------

LOGIT = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)
TEMPERATURE = st.one_of(
    st.sampled_from([T_MIN, T_MAX]), st.floats(min_value=T_MIN, max_value=T_MAX)
)


def _row(n: int) -> dict[str, Any]:
    return {"id": "d", "options": [{"id": f"o{i}", "description": f"option {i}"} for i in range(n)]}


def _results(
    row: dict[str, Any], method: str, logits_by_option: list[list[float]]
) -> list[dict[str, Any]]:
    """One SemIf-shaped result per ordering; option i scores logits_by_option[k][i] in ordering k."""
    expanded = averaging.expand(row, method)
    results = []
    for k, ordered in enumerate(expanded):
        ids = [option["id"] for option in ordered["options"]]
        logits = [logits_by_option[k][int(option_id[1:])] for option_id in ids]
        results.append(
            {
                "id": ordered["id"],
                "option_ids": ids,
                "option_logits": logits,
                "probabilities": calibration.tempered_softmax(logits, 1.0),
            }
        )
    return results


@st.composite
def averaged_cases(draw: st.DrawFn) -> tuple[dict[str, Any], str, list[dict[str, Any]], float]:
    method = draw(st.sampled_from(["rotations", "all"]))
    n = draw(st.integers(2, 4 if method == "all" else 6))
    row = _row(n)
    count = averaging.row_count(n, method)
    logits = draw(st.lists(st.lists(LOGIT, min_size=n, max_size=n), min_size=count, max_size=count))
    return row, method, _results(row, method, logits), draw(TEMPERATURE)


@settings(max_examples=300, deadline=None)
@given(averaged_cases())
def test_the_calibrated_combined_view_keeps_the_combined_top_and_stays_finite(case) -> None:
    row, method, results, temperature = case
    combined = as_json(averaging.combine(row, method, results))["combined"]
    mean = averaging.mean_log_probabilities(row, method, results)
    view = calibration.combined_view("triage", method, temperature, mean)
    probabilities = view.probabilities
    assert (view.workload, view.method, view.temperature) == (
        "triage",
        method,
        temperature,
    )
    assert all(math.isfinite(p) and 0 <= p <= 1 for p in probabilities)
    assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-12)
    top = combined["top"]
    ids = [option["id"] for option in row["options"]]
    # The combined top keeps the highest calibrated probability; a T above 1 may only round
    # a near-tie into an exact tie, and then the earliest option in the caller's order wins both.
    assert probabilities[ids.index(top)] == max(probabilities)
    if len(set(probabilities)) == len(probabilities):
        assert ids[max(range(len(ids)), key=probabilities.__getitem__)] == top


@pytest.mark.parametrize("temperature", [T_MIN, 1.0, T_MAX])
@pytest.mark.parametrize(
    "logits", [[1e4, -1e4], [-1e4, 1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, 9999.0]]
)
def test_the_combined_view_is_finite_at_extreme_logits_and_both_bounds(
    temperature: float, logits: list[float]
) -> None:
    row = _row(len(logits))
    # Each option keeps its logit in every ordering: a probability that underflows to 0 in
    # combined.probabilities still has a finite mean log-probability to temper.
    results = _results(row, "rotations", [logits] * len(logits))
    mean = averaging.mean_log_probabilities(row, "rotations", results)
    assert all(math.isfinite(value) for value in mean)
    probabilities = calibration.combined_view("w", "rotations", temperature, mean).probabilities
    assert all(math.isfinite(p) and p >= 0 for p in probabilities)
    assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-12)


def test_the_combined_view_tempers_the_mean_log_softmax() -> None:
    row = _row(3)
    results = _results(row, "rotations", [[1.0, 2.0, 0.5], [0.0, 3.0, 1.0], [2.0, 2.5, -1.0]])
    mean = averaging.mean_log_probabilities(row, "rotations", results)
    for temperature in (0.5, 2.0):
        weights = [math.exp(value / temperature) for value in mean]
        expected = [weight / sum(weights) for weight in weights]
        assert calibration.combined_view(
            "w", "rotations", temperature, mean
        ).probabilities == pytest.approx(expected, abs=1e-15)
    at_one = calibration.combined_view("w", "rotations", 1.0, mean).probabilities
    assert at_one == pytest.approx(
        as_json(averaging.combine(row, "rotations", results))["combined"]["probabilities"],
        abs=1e-15,
    )
