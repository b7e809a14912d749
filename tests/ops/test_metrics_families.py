"""Metrics declares its families from one table: every row reaches /metrics, and a reading no row
names is refused, so a misspelt optional reading cannot silently turn its family off."""

from __future__ import annotations

import pytest

from semif_serve.ops.metrics import CUDA_MEMORY, FAMILIES, Metrics

FACTS = {key: 1.0 for key in CUDA_MEMORY} | {"scorer": "stub"}
READINGS = {
    "max_queue": 2,
    "in_progress": lambda: 0,
    "open_connections": lambda: 0,
    "drain_seconds": lambda: 0.0,
    "shutdown_grace": 30.0,
    "busy_refusals": lambda: {"queue": 0},
    "queued_by_caller": lambda: {"-": 0},
    "background_queued": lambda: 0,
    "audits": lambda: {
        "outcomes": {("triage", "4", "done"): 3},
        "agreements": {("triage", "4"): 2},
        "drift": {("triage", "4"): 1.5},
        "drift_threshold": {("triage", "4"): 3.0},
        "pending": {"triage": 0},
        "last": {"triage": 1.0},
    },
}


def test_every_row_of_the_table_is_in_the_exposition() -> None:
    text = Metrics(lambda: FACTS, **READINGS).render().decode()
    for family in FAMILIES:
        prefix = family.name.rstrip("*")
        assert f"# HELP {prefix}" in text, family.name


def test_a_family_whose_reading_is_none_is_off() -> None:
    text = Metrics(lambda: FACTS, **(READINGS | {"busy_refusals": None, "audits": None})).render()
    assert b"semif_busy_refusals" not in text and b"semif_audit" not in text
    assert b"semif_wait_estimate_error_seconds" not in text
    assert b"semif_max_queue 2.0" in text


def test_a_family_read_from_several_labels_shows_each() -> None:
    text = Metrics(lambda: FACTS, **READINGS).render().decode()
    assert 'semif_audits_total{n="4",outcome="done",workload="triage"} 3.0' in text
    assert 'semif_prior_drift{n="4",workload="triage"} 1.5' in text


def test_a_reading_no_family_reads_is_refused() -> None:
    misspelt = READINGS | {"busy_refusal": lambda: {}}
    with pytest.raises(TypeError, match="busy_refusal"):
        Metrics(lambda: FACTS, **misspelt)
