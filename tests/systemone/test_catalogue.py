"""The System One model names, in process: SemIf's id form for what a scorer reports, and the listing."""

from __future__ import annotations

from typing import Any

import pytest

from semif_serve.systemone import catalogue

REVISION = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            {
                "scorer": "semif_phase1",
                "model": "Qwen/Qwen3.5-4B",
                "revision": REVISION,
                "dtype": "bfloat16",
            },
            "semif/Qwen3.5-4B@851bf6e806ef+torch-bfloat16",
        ),  # the example SemIf's README gives
        (
            {
                "scorer": "fastjev",
                "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                "revision": REVISION,
                "dtype": "float32",
            },
            "semif/SmolLM2-135M-Instruct@851bf6e806ef+torch-float32",
        ),
        (
            {
                "scorer": "fastjev",
                "model": "/srv/models/tiny/",
                "revision": "abc",
                "dtype": "float32",
            },
            "semif/tiny@abc+torch-float32",
        ),  # a local directory names itself; a short revision is kept whole
        (
            {"scorer": "stub", "model": "stub", "revision": None, "dtype": None},
            "semif/stub@000000000000+stub-none",
        ),
    ],
    ids=["qwen", "hub-id", "local-dir", "stub"],
)
def test_the_id_names_the_snapshot_in_semifs_form(facts: dict[str, Any], expected: str) -> None:
    assert catalogue.model_id(facts) == expected


@pytest.mark.parametrize(
    ("scorer", "backend"), [("stub", "stub"), ("semif_phase1", "torch"), ("fastjev", "torch")]
)
def test_the_backend_is_stub_for_the_stub_and_torch_for_both_scorer_packages(
    scorer: str, backend: str
) -> None:
    assert catalogue.backend({"scorer": scorer}) == backend


def test_the_listing_names_each_alias_once_after_the_served_id() -> None:
    listed = catalogue.listing(
        "semif/x@1+torch-float32", ["x", "semif/x@1+torch-float32", "jev-latest", "x"]
    )
    assert [entry["name"] for entry in listed["models"]] == [
        "semif/x@1+torch-float32",
        "x",
        "jev-latest",
    ]
    assert listed["models"][1]["description"] == "alias of semif/x@1+torch-float32"
