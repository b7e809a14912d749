"""Exact refusals of the calibration file (SEMIF_CALIBRATION), one fault per document.

Startup prints the refusal as its one line, so each names the variable, the file or
workload it is about, and what is allowed. In process through `calibration_file.load`
and `plain`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from semif_serve.decisions import calibration_file

BINDING = {"model": "m", "revision": "r", "prompt_version": "p"}


def refusal(tmp_path: Path, document: Any, read: Any = calibration_file.load) -> tuple[str, str]:
    path = tmp_path / "calibration_file.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ValueError) as refused:
        read(str(path))
    return str(refused.value), str(path)


def test_a_file_that_is_no_object_is_refused_naming_the_file(tmp_path: Path) -> None:
    message, path = refusal(tmp_path, [1.0])
    assert (
        message == f"SEMIF_CALIBRATION: {path!r} must hold a JSON object {{workload: temperature}}"
    )


def test_an_unknown_method_is_refused_listing_the_methods(tmp_path: Path) -> None:
    message, _ = refusal(tmp_path, {**BINDING, "workloads": {"w": {"pairs": 1.0}}})
    assert message == (
        "SEMIF_CALIBRATION: workload 'w' names unknown method(s) ['pairs']; methods are "
        + ", ".join(calibration_file.ORDERINGS)
    )
    assert calibration_file.ORDERINGS == ("none", "rotations", "all", "prior")


def test_an_unknown_key_is_refused_listing_the_keys(tmp_path: Path) -> None:
    message, _ = refusal(tmp_path, {**BINDING, "workloads": {"w": {"none": 1.0}}, "extra": 1})
    assert message == (
        "SEMIF_CALIBRATION: a bound file has unknown key(s) ['extra']; "
        "keys are dtype, fitted, model, priors, prompt_version, revision, workloads"
    )


def test_fitted_that_is_no_object_is_refused_naming_its_type(tmp_path: Path) -> None:
    message, _ = refusal(tmp_path, {**BINDING, "workloads": {"w": {"none": 1.0}}, "fitted": [1]})
    assert message == "SEMIF_CALIBRATION: 'fitted' must be an object, got list"


def test_a_plain_mapping_out_of_range_is_refused_naming_the_workload() -> None:
    with pytest.raises(ValueError) as refused:
        calibration_file.plain({"w": 0})
    assert str(refused.value).startswith(
        "SEMIF_CALIBRATION: workload 'w' temperature 0 is not in ["
    )


@pytest.mark.parametrize(
    "loaded,message",
    [
        (("m2", "r", "p"), "SEMIF_CALIBRATION is bound to model 'm', but SEMIF_MODEL is 'm2'"),
        (
            ("m", "r2", "p"),
            "SEMIF_CALIBRATION is bound to revision 'r', but SEMIF_REVISION is 'r2'",
        ),
        (
            ("m", "r", "p2"),
            "SEMIF_CALIBRATION is bound to prompt_version 'p', but the scorer's prompt_version is 'p2'",
        ),
    ],
    ids=["model", "revision", "prompt_version"],
)
def test_a_binding_mismatch_names_where_the_loaded_value_came_from(
    loaded: tuple[str, str, str], message: str
) -> None:
    table = calibration_file.bound({**BINDING, "workloads": {"w": {"none": 1.0}}})
    calibration_file.check_binding(table, "m", "r", "p", "float32")  # the matching triple passes
    with pytest.raises(calibration_file.BindingMismatch) as refused:
        calibration_file.check_binding(table, *loaded, "float32")
    assert str(refused.value) == message


def test_a_file_without_a_dtype_is_bound_to_float32_and_refused_under_bfloat16() -> None:
    table = calibration_file.bound({**BINDING, "workloads": {"w": {"none": 1.0}}})
    assert table.binding is not None and table.binding.dtype == "float32"
    calibration_file.check_binding(table, "m", "r", "p", "float32")
    with pytest.raises(calibration_file.BindingMismatch) as refused:
        calibration_file.check_binding(table, "m", "r", "p", "bfloat16")
    assert str(refused.value) == (
        "SEMIF_CALIBRATION is bound to dtype 'float32', but the served dtype "
        "(SEMIF_CPU_DTYPE on the CPU) is 'bfloat16'"
    )
    calibration_file.check_binding(table, "m", "r", "p", None)  # the stub serves no weights


@pytest.mark.parametrize("method", ["none", "prior"])
def test_a_temperature_or_prior_fitted_in_bfloat16_is_refused_under_float32(method: str) -> None:
    prior = {"priors": {"w": {"2": {"prior": [0.6, 0.4], "decisions": 8}}}}
    table = calibration_file.bound(
        {**BINDING, "dtype": "bfloat16", "workloads": {"w": {method: 1.5}}, **prior}
    )
    calibration_file.check_binding(table, "m", "r", "p", "bfloat16")
    with pytest.raises(calibration_file.BindingMismatch) as refused:
        calibration_file.check_binding(table, "m", "r", "p", "float32")
    assert str(refused.value) == (
        "SEMIF_CALIBRATION is bound to dtype 'bfloat16', but the served dtype "
        "(SEMIF_CPU_DTYPE on the CPU) is 'float32'"
    )


def test_an_unknown_dtype_in_a_bound_file_is_refused() -> None:
    with pytest.raises(ValueError) as refused:
        calibration_file.bound({**BINDING, "dtype": "fp16", "workloads": {"w": {"none": 1.0}}})
    assert str(refused.value) == (
        "SEMIF_CALIBRATION: a bound file's 'dtype' must be one of float32, bfloat16, got 'fp16'"
    )
