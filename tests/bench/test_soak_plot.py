"""`python -m bench soak --plot`: a real Prometheus watches a short soak, and the PNG shows
what it saw, the queue saturated and busy refusals, with the same numbers in the JSON.

Runs the soak's own main (stub server, real Prometheus, matplotlib) for 3 s. Without
prometheus this skips, except under CI=true, where it fails. The threshold line is the
shipped alert's own bound, read from the rules file, and the rules are evaluated at the
scrape interval asked for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bench.common import prometheus
from bench.load import soak, soak_plot
from tests import promql


def test_a_short_soak_draws_saturation_and_busy_refusals(tmp_path: Path) -> None:
    promql.require("prometheus")
    plot, out = tmp_path / "soak.png", tmp_path / "soak.json"
    assert (
        soak.main(
            [
                "--seconds",
                "3",
                "--max-queue",
                "2",
                "--delay-ms",
                "50",
                "--plot",
                str(plot),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 20_000
    seen = json.loads(out.read_text())["figures"]["prometheus"]
    assert seen["plot"] == str(plot)
    assert seen["peaks"]["saturation"] == 1.0  # 2 x SEMIF_MAX_QUEUE clients keep every slot taken
    assert seen["peaks"]["refusals_per_s"]["busy"] > 0


def test_the_threshold_drawn_is_the_one_the_rules_file_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = prometheus.load_yaml(prometheus.RULES)
    (saturated,) = [
        rule
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "SemifQueueSaturated"
    ]
    edited = tmp_path / "semif-serve.rules.yml"
    monkeypatch.setattr(prometheus, "RULES", edited)
    saturated["expr"] = f"{soak_plot.SATURATION} >= 0.75"
    edited.write_text(yaml.safe_dump(rules))
    assert soak_plot.threshold() == 0.75
    saturated["expr"] = (
        f"max_over_time({soak_plot.SATURATION}[1m]) >= 0.75"  # a shape the line cannot follow
    )
    edited.write_text(yaml.safe_dump(rules))
    with pytest.raises(ValueError, match="no longer"):
        soak_plot.threshold()


def test_prometheus_evaluates_the_rules_at_the_interval_it_scrapes(tmp_path: Path) -> None:
    promql.require("prometheus")
    with prometheus.running(["127.0.0.1:9"], interval="500ms", workdir=tmp_path) as prom:
        groups = prom.rules()
    assert groups and {group["interval"] for group in groups} == {0.5}
