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
}


def test_every_row_of_the_table_is_in_the_exposition() -> None:
    text = Metrics(lambda: FACTS, **READINGS).render().decode()
    for family in FAMILIES:
        prefix = family.name.rstrip("*")
        assert f"# HELP {prefix}" in text, family.name


def test_a_family_whose_reading_is_none_is_off() -> None:
    text = Metrics(lambda: FACTS, **(READINGS | {"busy_refusals": None})).render().decode()
    assert "semif_busy_refusals" not in text
    assert "semif_wait_estimate_error_seconds" not in text
    assert "semif_max_queue 2.0" in text


def test_a_reading_no_family_reads_is_refused() -> None:
    misspelt = READINGS | {"busy_refusal": lambda: {}}
    with pytest.raises(TypeError, match="busy_refusal"):
        Metrics(lambda: FACTS, **misspelt)
