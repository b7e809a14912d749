"""Qwen2.5-Coder-1.5B-Instruct served on the CPU reads: the check of tests/reading_rows.py, which
SmolLM2 fails (test_smollm2_model.py) and the 0.5B passes only by chance, so it runs on the 1.5B.

The model is built once per machine into $SEMIF_READING_HOME (default
~/.cache/semif-serve/reading), which CI keeps between runs; it is served through the production
path by the conftest's `tiny_scorer` over an overridden `tiny_built`.
"""

from __future__ import annotations

import pytest

from semif_serve.builders import reading
from tests.reading_rows import misread

REVISION = "ce7d1a6abd5c122f46b0ee2ea574931f866a91dc"


@pytest.fixture(scope="module")
def tiny_built(reading_large_build: dict[str, str]) -> dict[str, str]:
    """Points the conftest's model fixtures at the 1.5B reading model for this module."""
    return reading_large_build


def test_the_build_is_the_pinned_one(reading_large_build: dict[str, str]) -> None:
    assert reading_large_build["SEMIF_MODEL"] == reading.MODELS["1.5b"].repo_id
    assert reading_large_build["SEMIF_REVISION"] == REVISION


async def test_its_top_follows_the_right_description_wherever_it_is_listed(
    start_server, tiny_scorer
) -> None:
    server = await start_server(tiny_scorer)
    assert await misread(server.port) == []
