"""The real process: `python -m semif_serve` refuses bad settings with exit status 2.

A few cases only (each is a process start); test_config.py covers every setting
through `cli.main` in process. `cuda:x` is the form that used to pass
configuration and fail only at load, with exit status 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from semif_serve import cli, config
from semif_serve.ops import hangup
from tests.wire_client import TOKEN


def run(**changes: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEMIF_")}
    env["SEMIF_API_TOKEN"] = TOKEN
    env.update({key: value for key, value in changes.items() if value is not None})
    if changes.get("SEMIF_API_TOKEN", "") is None:
        del env["SEMIF_API_TOKEN"]
    return subprocess.run(
        [sys.executable, "-m", "semif_serve"], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "name,value",
    [
        ("SEMIF_DEVICE", "cuda:x"),
        ("SEMIF_PORT", "0"),
        ("SEMIF_API_TOKEN", None),
        ("SEMIF_API_TOKEN", "short"),
        # SemIf's own server's settings: refused naming them, never ignored
        ("SEMIF_DEVICE", "auto"),
        ("SEMIF_MODE", "serial"),
        ("SEMIF_MAX_INPUT_TOKENS", "0"),
        # files a setting names, read by the server before the model loads
        ("SEMIF_API_TOKENS_FILE", ""),
        ("SEMIF_CALIBRATION", "/nonexistent/semif-calibration.json"),
        ("SEMIF_SYSTEMONE_WORKLOAD", "unknown"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_and_no_traceback(name: str, value: str | None) -> None:
    done = run(**{name: value})
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"semif-serve: {name}") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


def test_without_a_token_the_process_says_what_a_valid_one_is() -> None:
    done = run(SEMIF_API_TOKEN=None)
    assert done.returncode == 2
    assert done.stderr == (
        "semif-serve: SEMIF_API_TOKEN is required: at least 32 characters of visible ASCII (33-126) "
        "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one), "
        "or SEMIF_API_TOKENS_FILE for named callers\n"
    )


def test_serve_holds_sighup_before_it_reads_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry point's first line: a SIGHUP from then on is counted, never the default action
    (terminate), before anything else is read or imported (ops/hangup.py, Rule 1)."""
    seen = []

    def load() -> config.Settings:
        seen.append(signal.getsignal(signal.SIGHUP))
        raise ValueError("SEMIF_TEST stops here")

    monkeypatch.setattr(config, "load", load)
    previous = signal.getsignal(signal.SIGHUP)
    try:
        assert cli.main(["serve"]) == 2
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert seen == [hangup._count]
