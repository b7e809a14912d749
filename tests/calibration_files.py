"""A calibration file bound to what the stub scorer reports, written for a test that starts a
real process with SEMIF_CALIBRATION (the startup binding check, the startup refusal's log line).

Rule: it writes the file; whether a server accepts or refuses it is the test's to check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from semif_serve.config import DEFAULT_MODEL, DEFAULT_REVISION
from semif_serve.engine.stub import PROMPT_VERSION as STUB_PROMPT_VERSION

MATCHING = {
    "model": DEFAULT_MODEL,
    "revision": DEFAULT_REVISION,
    "prompt_version": STUB_PROMPT_VERSION,
}
# Position priors (extension): "triage" has priors and a temperature for "prior" at n=4 only;
# "sorting" has priors and no temperature at all.
PRIORS = {
    "triage": {"4": {"prior": [0.4, 0.3, 0.2, 0.1], "decisions": 12}},
    "sorting": {
        "2": {"prior": [0.75, 0.25], "decisions": 8},
        "4": {"prior": [0.1, 0.2, 0.3, 0.4], "decisions": 9},
    },
}
WITH_PRIORS = {"triage": {"none": 2.0, "rotations": 1.5, "prior": 2.0}}


def prior_path(
    tmp_path: Path, workloads: Any = WITH_PRIORS, priors: Any = PRIORS, **binding: str
) -> str:
    """A bound file with priors (and, unless `workloads` is None, temperatures)."""
    document = {**MATCHING, **binding, "priors": priors}
    if workloads is not None:
        document["workloads"] = workloads
    path = tmp_path / "priors.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def bound_path(tmp_path: Path, **binding: str) -> str:
    document = {
        **MATCHING,
        **binding,
        "fitted": {"rows": 10, "date": "2026-11-30"},
        "workloads": {"triage": {"none": 2.0, "rotations": 1.5}},
    }
    path = tmp_path / "bound.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)
