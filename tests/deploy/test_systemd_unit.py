"""deploy/systemd/semif-serve.service: `systemd-analyze verify` finds nothing to say about it, and it
keeps what docs/operating.md promises: reload by SIGHUP to the main pid, the tokens file as a
credential, the pid file in its runtime directory, and the hardening block. Without
systemd-analyze this skips, except under CI=true, where it fails (.ci/run installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "semif-serve.service"
INSTALLED = "/opt/semif-serve/.venv/bin/semif-serve"  # where the unit says the checkout lives


def verified(text: str, tmp_path: Path) -> str:
    """What `systemd-analyze verify` says of the unit (empty: nothing wrong), with ExecStart pointed
    at this venv's program, since verify insists the program exists."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        message = "systemd-analyze is not installed (apt-get install systemd)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    program = Path(sys.executable).with_name("semif-serve")
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace(INSTALLED, str(program)))
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    return f"exit {done.returncode}: {done.stderr}{done.stdout}" if done.returncode else done.stderr


def test_systemd_analyze_verify_finds_nothing(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert INSTALLED in text
    assert verified(text, tmp_path) == ""
    # The check itself: a misspelt key is reported, so an empty answer means something.
    assert "Unknown key" in verified(text.replace("NoNewPrivileges=", "NoNewPrivilege="), tmp_path)


def test_the_unit_reloads_by_sighup_reads_its_credential_and_is_hardened() -> None:
    lines = set(UNIT.read_text().splitlines())
    assert {
        "Type=exec",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "LoadCredential=tokens:/etc/semif-serve/tokens",
        "Environment=SEMIF_API_TOKENS_FILE=%d/tokens",
        "RuntimeDirectory=semif-serve",
        "Environment=SEMIF_PID_FILE=%t/semif-serve/semif-serve.pid",
        "DynamicUser=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    } <= lines
