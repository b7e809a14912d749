"""`python -m bench ...` run as a user runs it: from the repository root, in a child process, with the
server's token in its environment."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.common import procs


def run(token: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One bench command's exit status and output; never raises on a non-zero status."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "SEMIF_API_TOKEN": token},
        timeout=timeout,
        check=False,
    )
