"""The README's test command passes in the README's own shell: a slice of the suite, run with
what the README's and the guides' shells export, passes (tests/hermetic.py clears it).

The slice starts servers every way the suite does (bench/common/procs.py, its own
`python -m semif_serve`, in process) and reads the token and TypeSafe's settings from the
environment, as the files that failed in such a shell did.
"""

from __future__ import annotations

import os
import subprocess
import sys

from bench.common.procs import ROOT
from semif_serve.builders import smollm2, snapshot
from tests.hermetic import clear

SLICE = (
    "tests/decisions/test_calibration_http.py",
    "tests/bench/test_prior_cli.py::test_a_new_file_is_bound_to_what_the_server_reports_and_holds_no_temperatures",
    "tests/cli/test_entry_point.py",
    "tests/ops/test_access_log.py",
    "tests/client/test_client_ask.py",
    "tests/systemone/test_sdk_stub.py",
)


def shell_exports() -> dict[str, str]:
    """README shell 1 (`. <(semif-serve small-model)`, the token), docs/models.md's calibration
    file (bound to SmolLM2, not the stub), docs/calling.md's TypeSafe settings, and a port and a
    few library settings a user may hold."""
    return {
        **snapshot.settings(smollm2.default_out(), "semif-serve/smollm2-135m-instruct", "0" * 40),
        "SEMIF_API_TOKEN": "local-dev-token-0123456789abcdef",
        "SEMIF_CALIBRATION": "bench/evidence/smollm2/calibration.json",
        "SEMIF_PORT": "8000",
        "SEMIF_MAX_BODY_BYTES": "100",
        "TYPESAFE_BASE_URL": "http://127.0.0.1:8000",
        "TYPESAFE_API_KEY": "local-dev-token-0123456789abcdef",
        "TRANSFORMERS_OFFLINE": "1",
    }


def test_a_slice_of_the_suite_passes_in_a_shell_that_followed_the_docs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SLICE],
        cwd=ROOT,
        env={**os.environ, **shell_exports()},
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-4000:]


def test_clear_keeps_the_suite_inputs_and_every_other_variable_but_no_setting() -> None:
    kept = {
        "SEMIF_SMOLLM2_HOME": "/s",
        "SEMIF_READING_HOME": "/r",
        "SEMIF_NGINX": "/n",
        "SEMIF_PROMETHEUS": "/p",
        "CI": "true",
        "PATH": "/bin",
        "HOME": "/h",
    }
    environ = {**kept, **shell_exports(), "HF_TOKEN": "hf_x", "SEMIF_API_KEY": "k" * 32}
    clear(environ)
    assert environ == kept
