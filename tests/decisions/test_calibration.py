"""Calibration (contract: "Calibration" and the SEMIF_CALIBRATION rules under Configuration)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semif_serve.decisions.calibration import calibrated_view
from semif_serve.decisions.calibration_file import PLAIN_METHOD, T_MAX, T_MIN, VARIABLE, load
from tests.reference import softmax


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "calibration.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


def result(logits: list[float]) -> dict[str, Any]:
    return {
        "id": "q1",
        "option_ids": [f"o{i}" for i in range(len(logits))],
        "option_logits": logits,
        "probabilities": softmax(logits),
        "probability_status": "uncalibrated",
    }


# --- load, the plain form -------------------------------------------------------------


def temperatures(path: str) -> dict[str, float]:
    """A plain file read by `load`: each workload's `none` temperature, the only method a plain file holds."""
    table = load(path)
    assert table.binding is None and all(
        set(methods) == {PLAIN_METHOD} for methods in table.values()
    )
    return {name: methods[PLAIN_METHOD] for name, methods in table.items()}


def test_a_valid_table_loads_as_floats(tmp_path: Path) -> None:
    table = temperatures(write(tmp_path, json.dumps({"triage": 1.5, "routing": 2, "other": 0.7})))
    assert table == {"triage": 1.5, "routing": 2.0, "other": 0.7}
    assert all(type(value) is float for value in table.values())


def test_the_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    assert VARIABLE == "SEMIF_CALIBRATION" and (T_MIN, T_MAX) == (0.05, 20.0)
    assert temperatures(write(tmp_path, '{"low": 0.05, "high": 20, "high_float": 20.0}')) == {
        "low": 0.05,
        "high": 20.0,
        "high_float": 20.0,
    }


def refused(path: str) -> str:
    with pytest.raises(ValueError) as caught:
        temperatures(path)
    message = str(caught.value)
    assert "SEMIF_CALIBRATION" in message
    return message


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    refused(str(tmp_path / "absent.json"))


@pytest.mark.parametrize("text", ["", "{", "{'triage': 1.0}", "triage = 1.0", '{"triage": 1.0,}'])
def test_invalid_json_is_refused(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    assert refused(path).startswith(f"SEMIF_CALIBRATION: {path!r} is not valid JSON: ")


@pytest.mark.parametrize("text", ["[1.0]", "1.0", '"triage"', "null", "true"])
def test_a_table_that_is_not_an_object_is_refused(tmp_path: Path, text: str) -> None:
    refused(write(tmp_path, text))


@pytest.mark.parametrize(
    "value",
    [
        "true",
        "false",
        '"1.0"',
        "null",
        "[1.0]",
        '{"t": 1.0}',  # not numbers (a bool is an int)
        "NaN",
        "Infinity",
        "-Infinity",
        "1e400",  # json's non-finite literals and an overflow
        "0.0499",
        "0",
        "-1",
        "20.0001",
        "21",
        "1" + "0" * 400,
    ],  # out of range; the last overflows a float
)
def test_a_bad_temperature_is_refused_naming_the_workload(tmp_path: Path, value: str) -> None:
    message = refused(write(tmp_path, '{"fine": 1.0, "w-7": ' + value + "}"))
    assert "'w-7'" in message


# --- calibrated_view -----------------------------------------------------------------

LOGIT = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)
TEMPERATURE = st.floats(min_value=T_MIN, max_value=T_MAX, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(LOGIT, min_size=2, max_size=16), TEMPERATURE)
def test_the_view_keeps_the_argmax_and_sums_to_one(logits: list[float], temperature: float) -> None:
    native = result(logits)
    view = calibrated_view(native, "triage", temperature)
    probabilities = view.probabilities
    assert view.workload == "triage" and view.temperature == temperature
    assert len(probabilities) == len(logits)
    assert all(math.isfinite(p) and 0 <= p <= 1 for p in probabilities)
    assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-12)
    # The option SemIf ranks first is ranked first by the view too (a tie may
    # appear only where rounding merges two nearly equal scaled logits).
    top = max(range(len(logits)), key=logits.__getitem__)
    assert probabilities[top] == max(probabilities)
    if len(set(probabilities)) == len(probabilities):
        assert max(range(len(logits)), key=probabilities.__getitem__) == top


def test_the_view_keeps_a_clear_argmax_that_is_not_first() -> None:
    for temperature in (T_MIN, 0.5, 1.0, 7.0, T_MAX):
        probabilities = calibrated_view(
            result([0.1, 3.0, -2.0, 2.9]), "w", temperature
        ).probabilities
        assert max(range(4), key=probabilities.__getitem__) == 1


@pytest.mark.parametrize("temperature", [T_MIN, 1.0, T_MAX])
@pytest.mark.parametrize(
    "logits", [[1e4, -1e4], [1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, 9999.0]]
)
def test_the_view_is_finite_at_extreme_logits_and_both_bounds(
    temperature: float, logits: list[float]
) -> None:
    probabilities = calibrated_view(result(logits), "w", temperature).probabilities
    assert all(math.isfinite(p) and p >= 0 for p in probabilities)
    assert math.fsum(probabilities) == pytest.approx(1.0, abs=1e-12)


def test_the_view_is_softmax_of_logits_over_t() -> None:
    logits = [1.0, 2.0, 0.5]
    for temperature in (0.5, 2.0):
        expected = softmax(logits, temperature)
        assert calibrated_view(result(logits), "w", temperature).probabilities == pytest.approx(
            expected, abs=1e-15
        )
    # T sharpens below 1 and flattens above it.
    sharp = calibrated_view(result(logits), "w", 0.5).probabilities
    flat = calibrated_view(result(logits), "w", 2.0).probabilities
    assert sharp[1] > result(logits)["probabilities"][1] > flat[1]


def test_the_view_does_not_modify_the_input_result() -> None:
    native = result([1e4, -3.0, 0.25])
    snapshot = copy.deepcopy(native)
    view = calibrated_view(native, "w", 0.05)
    assert native == snapshot
    assert view.probabilities is not native["probabilities"]
    assert view.probabilities is not native["option_logits"]
    assert "calibrated" not in native
