"""Qwen2.5-Coder-0.5B-Instruct, the reading model CI builds, served on the CPU: what CI proves.

* INV-1: /decide and /decide/shared return exactly what fastjev returns in-process on an
  independently loaded copy of the same snapshot, bitwise.
* The stored weights are the GGUF's: the snapshot's logits equal, bitwise, those of
  transformers loading the reassembled GGUF itself (float32).

The model is built once per machine into $SEMIF_READING_HOME (default
~/.cache/semif-serve/reading), which CI keeps between runs. The conftest's model fixtures
(`tiny_settings`, `tiny_scorer`, `tiny_metadata`, `reference`) serve it here through an
overridden `tiny_built`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from semif_serve.builders import reading
from tests.timing import timeless
from tests.wire_client import request

REVISION = "a9ff0de0daefd5bd73ee56338af903feb4000042"
# Seconds a model answer may take: a 0.5B forward pass is seconds on two loaded cores, not ms.
ANSWER_S = 300.0
STATE = {"ticket": "The app crashes every time I open the settings page.", "customer": "Dana"}
ROWS = [
    {
        "id": "team",
        "state": STATE,
        "question": "Which team should handle this ticket?",
        "options": [
            {"id": "billing", "description": "Billing"},
            {"id": "tech", "description": "Technical support"},
            {"id": "shipping", "description": "Shipping"},
        ],
    },
    {
        "id": "upset",
        "state": STATE,
        "question": "Is the customer upset?",
        "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
    },
]


@pytest.fixture(scope="module")
def tiny_built(reading_build: dict[str, str]) -> dict[str, str]:
    """Points the conftest's model fixtures at the 0.5B reading model for this module."""
    return reading_build


def test_the_build_is_deterministic_and_found_again_without_converting(
    reading_build, monkeypatch
) -> None:
    assert reading_build["SEMIF_REVISION"] == REVISION
    monkeypatch.setattr(
        reading, "convert", lambda *args: pytest.fail("the second build converted again")
    )
    assert reading.build(reading.MODELS["0.5b"]) == reading_build


async def test_served_equals_in_process(
    start_server, tiny_scorer, reference, tiny_metadata
) -> None:
    from fastjev._runtime import direct, shared

    server = await start_server(tiny_scorer)
    health = (await request(server.port, "GET", "/health", headers=[])).json
    assert (health["model"], health["revision"], health["device"], health["dtype"]) == (
        reading.MODELS["0.5b"].repo_id,
        REVISION,
        "cpu",
        "float32",
    )
    model, tokenizer = reference
    for row in ROWS:
        decided = await request(server.port, "POST", "/decide", row, timeout=ANSWER_S)
        assert decided.status == 200
        assert timeless(decided.json) == timeless(
            direct.score(model, tokenizer, row, tiny_metadata, 4096)
        )
    body = {
        "state": STATE,
        "decisions": [{key: row[key] for key in ("id", "question", "options")} for row in ROWS],
    }
    served = await request(server.port, "POST", "/decide/shared", body, timeout=ANSWER_S)
    assert served.status == 200
    assert (
        served.json["results"]
        == shared.score_shared(model, tokenizer, ROWS, tiny_metadata, 4096)[0]
    )


def test_the_snapshot_holds_the_ggufs_weights(reference: tuple[Any, Any], tmp_path: Path) -> None:
    """The stored float32 tensors are what transformers de-quantises from the GGUF itself."""
    import torch
    import transformers

    model = reading.MODELS["0.5b"]
    gguf = tmp_path / "qwen2.5-coder-0.5b.gguf"
    reading.reassemble(model, reading.locate_parts(model), gguf)
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    ).eval()
    served, tokenizer = reference
    messages = [
        {"role": "user", "content": "Which team handles a double charge: billing or shipping?"}
    ]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        assert torch.equal(served(ids).logits, from_gguf(ids).logits)
