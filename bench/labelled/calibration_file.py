"""The calibration file as the bench writes it: its binding, an existing file read, merged, written whole.

Rules: calibrate (temperatures) and prior (position priors) both write one file,
`SEMIF_CALIBRATION`'s bound form, so each must keep what the other put there.
This module reads an existing file, refuses one the new figures cannot join
(plain, or bound to another model, revision, prompt version or dtype), merges, and
writes beside the old file before moving over it, so a failure never leaves
half a file. What a valid file is stays the server's business
(semif_serve/decisions/calibration_file.py); this module only knows which top-level keys each
command owns: calibrate owns `workloads` and `fitted` (except `fitted.priors`),
prior owns `priors` and `fitted.priors`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.common.report import write_json
from semif_serve.decisions.calibration_file import BINDING_KEYS, DEFAULT_DTYPE, is_bound

PRIORS = "priors"


class CalibrationError(ValueError):
    """Results that cannot give a bound calibration file, or a file they cannot join."""


def binding(health: dict[str, Any], versions: set[Any]) -> dict[str, Any]:
    """model, revision and dtype from /health; the one prompt_version behind every score (and /health's,
    when it reports one)."""
    seen = set(versions)
    reported = health.get("prompt_version")
    if reported is not None:
        seen.add(reported)
    seen.discard(None)
    if len(seen) != 1:
        raise CalibrationError(f"the scores do not name exactly one prompt_version: {sorted(seen)}")
    bound = {
        "model": health.get("model"),
        "revision": health.get("revision"),
        "prompt_version": seen.pop(),
    }
    if health.get("dtype") is not None:  # the stub serves no weights, so it has no dtype
        bound["dtype"] = health["dtype"]
    return bound


def read(path: Path) -> Any:
    """The existing file's JSON, or None when there is none."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise CalibrationError(f"{path} is not valid JSON ({error}); not overwritten") from None


def mismatch(existing: Any, bound_to: dict[str, Any], where: Path) -> str | None:
    """Why `existing` cannot take figures fitted under `bound_to` (None: it can, or there is no file)."""
    if existing is None:
        return None
    if not is_bound(existing):
        return f"{where} is a plain {{workload: T}} file with no binding"
    for key in (*BINDING_KEYS, "dtype"):
        # A file (or a server) that names no dtype means float32, as the server reads it.
        theirs, ours = (
            (existing.get(key, DEFAULT_DTYPE), bound_to.get(key, DEFAULT_DTYPE))
            if key == "dtype"
            else (existing.get(key), bound_to[key])
        )
        if theirs != ours:
            return f"{where} is bound to {key} {theirs!r}, but the server reports {ours!r}"
    return None


def fitted_of(existing: Any) -> dict[str, Any]:
    return (
        dict(existing["fitted"])
        if isinstance(existing, dict) and isinstance(existing.get("fitted"), dict)
        else {}
    )


def write(path: Path, document: dict[str, Any]) -> None:
    """Write beside `path`, then move over it: a reader never sees half a file."""
    partial = path.with_name(f".{path.name}.partial")
    write_json(partial, document)
    os.replace(partial, path)
