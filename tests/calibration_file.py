"""A calibration file bound to what the stub scorer reports, written for a test that starts a
real process with SEMIF_CALIBRATION (the startup binding check, the startup refusal's log line).

Rule: it writes the file; whether a server accepts or refuses it is the test's to check.
"""

from __future__ import annotations

import json
from pathlib import Path

from semif_serve.config import DEFAULT_MODEL, DEFAULT_REVISION
from semif_serve.stub import PROMPT_VERSION as STUB_PROMPT_VERSION

MATCHING = {"model": DEFAULT_MODEL, "revision": DEFAULT_REVISION, "prompt_version": STUB_PROMPT_VERSION}


def bound_path(tmp_path: Path, **binding: str) -> str:
    document = {**MATCHING, **binding, "fitted": {"rows": 10, "date": "2026-11-30"},
                "workloads": {"triage": {"none": 2.0, "rotations": 1.5}}}
    path = tmp_path / "bound.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)
