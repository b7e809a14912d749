"""The suite's environment: none of the caller's settings, only the suite's own inputs.

A shell that followed the README still exports SEMIF_MODEL, SEMIF_CALIBRATION, HF_HOME...,
and every server a test starts inherits this process's environment. `clear` runs from
`tests/__init__.py`, before any test module (or huggingface_hub, which reads HF_* once, at
import) is imported; a test then sets exactly what it means (TESTING.md, "A hermetic suite").
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# The server's settings, huggingface_hub's and transformers' (model cache, offline mode) and
# TypeSafe's SDK's (docs/calling.md exports TYPESAFE_BASE_URL and TYPESAFE_API_KEY).
SETTINGS = ("SEMIF_", "HF_", "TRANSFORMERS_", "TYPESAFE_")
# The suite's own inputs, kept: where SmolLM2's and the reading model's snapshots are built,
# and where nginx and prometheus are when not on PATH. CI (no such prefix) stays too.
SUITE_INPUTS = frozenset(
    {"SEMIF_SMOLLM2_HOME", "SEMIF_READING_HOME", "SEMIF_NGINX", "SEMIF_PROMETHEUS"}
)


def clear(environ: MutableMapping[str, str] = os.environ) -> None:
    """Remove every setting from `environ` but the suite's inputs."""
    for name in [name for name in environ if name.startswith(SETTINGS)]:
        if name not in SUITE_INPUTS:
            del environ[name]
