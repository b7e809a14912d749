"""`python -m bench soak --plot`: a real Prometheus watches a short soak, and the PNG shows
what it saw, the queue saturated and busy refusals, with the same numbers in the JSON.

Runs the soak's own main (stub server, real Prometheus, matplotlib) for 3 s. Without
prometheus this skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.load import soak
from tests import promql


def test_a_short_soak_draws_saturation_and_busy_refusals(tmp_path: Path) -> None:
    promql.require("prometheus")
    plot, out = tmp_path / "soak.png", tmp_path / "soak.json"
    assert soak.main(["--seconds", "3", "--max-queue", "2", "--delay-ms", "50", "--plot", str(plot),
                      "--out", str(out)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 20_000
    seen = json.loads(out.read_text())["figures"]["prometheus"]
    assert seen["plot"] == str(plot)
    assert seen["peaks"]["saturation"] == 1.0  # 2 x SEMIF_MAX_QUEUE clients keep every slot taken
    assert seen["peaks"]["refusals_per_s"]["busy"] > 0
