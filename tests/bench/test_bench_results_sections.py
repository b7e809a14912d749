"""`python -m bench load` rewrites only its own marked sections of bench/RESULTS.md: sections
other benches or people own (unmarked ones included) survive a run, and a section this run did
not measure (`--only`) keeps its earlier figures."""

from __future__ import annotations

from bench.common.report import machine, section
from bench.load.load import TITLE, write_markdown

ADMISSION = {
    "checks": {"max_queue_reported": True},
    "offered": 24,
    "max_queue": 8,
    "delay_s": 0.25,
    "ok_200": 8,
    "refused_429": 16,
    "refusal_latency_max_s": 0.011,
    "refusal_latency_p50_s": 0.010,
    "peak_in_progress": 8,
    "health_samples": 100,
}


def results(**parts: object) -> dict[str, object]:
    return {"machine": machine(), "verdicts": ["admission: PASS"], **parts}


def test_a_load_run_keeps_the_sections_it_does_not_own() -> None:
    old = (
        f"{TITLE}\n\n<!-- load-tiny: begin -->\n## Tiny model\nold tiny figures\n"
        "<!-- load-tiny: end -->\n<!-- load-admission: begin -->\nold admission\n<!-- load-admission: end -->\n\n"
        "## Scaling out: stub replicas behind nginx\nscale figures\n\n## Weights check before load\nweights figures\n\n"
        "<!-- wrk: begin -->\nwrk figures\n<!-- wrk: end -->\n## Real model on a GPU\nreal figures\n"
    )
    new = write_markdown(old, results(admission=ADMISSION))
    for kept in (
        "## Scaling out: stub replicas behind nginx\nscale figures",
        "## Weights check before load\nweights figures",
        "wrk figures",
        "## Real model on a GPU\nreal figures",
    ):
        assert kept in new
    assert section(new, "load-tiny") == "## Tiny model\nold tiny figures"  # not measured: kept
    admission = section(new, "load-admission")
    assert (
        admission is not None
        and "old admission" not in admission
        and "Burst of 24 /decide" in admission
    )
    machine_line = section(new, "load-machine") or ""
    assert (
        "load average" in machine_line
        and "the wrk section below (`python -m bench wrk`)" in machine_line
    )
    assert new.startswith(TITLE) and new.count(TITLE) == 1


def test_a_second_run_replaces_rather_than_repeats() -> None:
    once = write_markdown("", results(admission=ADMISSION))
    twice = write_markdown(once, results(admission={**ADMISSION, "offered": 30}))
    assert (
        twice.count("## Admission") == 1 and "Burst of 30" in twice and "Burst of 24" not in twice
    )
    assert twice.count("## Verdicts") == 1


def test_verdicts_of_sections_not_run_are_kept_and_this_runs_replaced() -> None:
    old = (
        f"{TITLE}\n\n<!-- load-verdicts: begin -->\n## Verdicts\n\n- admission: FAIL\n"
        "- tiny: served /decide/shared within 1.1x of in-process: MET (1.031x)\n"
        "- small: served /decide/shared within 1.05x of in-process: MISSED (1.12x)\n<!-- load-verdicts: end -->\n"
    )
    new = write_markdown(old, results(admission=ADMISSION))  # this run measured admission only
    assert section(new, "load-verdicts") == (
        "## Verdicts\n\n- admission: PASS\n"
        "- tiny: served /decide/shared within 1.1x of in-process: MET (1.031x)\n"
        "- small: served /decide/shared within 1.05x of in-process: MISSED (1.12x)"
    )
