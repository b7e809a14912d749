"""The bench's calibration file carries the served dtype, and refuses to join a file fitted in another.

A file the server reads without a dtype was fitted in float32; the bench reads it the same way.
"""

from __future__ import annotations

from pathlib import Path

from bench.labelled import calibration_file

HEALTH = {"model": "m", "revision": "r", "prompt_version": "p"}


def test_the_binding_names_the_dtype_the_server_reports() -> None:
    assert calibration_file.binding({**HEALTH, "dtype": "bfloat16"}, {"p"}) == {
        **HEALTH,
        "dtype": "bfloat16",
    }
    assert calibration_file.binding({**HEALTH, "dtype": None}, {"p"}) == HEALTH  # the stub's


def test_a_file_fitted_in_another_dtype_is_not_joined(tmp_path: Path) -> None:
    where = tmp_path / "calibration.json"
    fitted_in_float32 = {**HEALTH, "workloads": {"w": {"none": 1.0}}}  # no dtype: float32
    assert (
        calibration_file.mismatch(fitted_in_float32, {**HEALTH, "dtype": "float32"}, where) is None
    )
    assert calibration_file.mismatch(fitted_in_float32, {**HEALTH, "dtype": "bfloat16"}, where) == (
        f"{where} is bound to dtype 'float32', but the server reports 'bfloat16'"
    )
    fitted_in_bfloat16 = {**fitted_in_float32, "dtype": "bfloat16"}
    assert calibration_file.mismatch(fitted_in_bfloat16, HEALTH, where) == (
        f"{where} is bound to dtype 'bfloat16', but the server reports 'float32'"
    )
