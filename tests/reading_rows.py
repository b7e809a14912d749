"""Does a served model read? Easy rows whose right answer a reader finds wherever it is listed.

Each row is asked twice with `"orderings": "rotations"` (so no position can win by itself): as
written, with the right description on option `a`, and with the descriptions of `a` and `b`
swapped. A model that reads puts its averaged top on the right description both times; one
that does not (SmolLM2, whose rotation-averaged top is close to a coin flip) misses some.
The rows were chosen where Qwen2.5-Coder-0.5B-Instruct reads them both ways; the same check
run on SmolLM2 is tests/models/test_smollm2_model.py's proof that it can fail.
"""

from __future__ import annotations

from typing import Any

from tests.wire_client import request

# (state, question, descriptions with the right one first)
ROWS: list[tuple[Any, str, list[str]]] = []


def row(number: int, state: Any, question: str, descriptions: list[str]) -> dict[str, Any]:
    options = [{"id": key, "description": text} for key, text in zip("abc", descriptions)]
    return {
        "id": f"easy-{number}",
        "state": state,
        "question": question,
        "options": options,
        "orderings": "rotations",
    }


async def misread(port: int) -> list[str]:
    """The rows (and which way) whose rotation-averaged top is not the right description."""
    missed = []
    for number, (state, question, descriptions) in enumerate(ROWS):
        swapped = [descriptions[1], descriptions[0], *descriptions[2:]]
        for right, asked in (("a", descriptions), ("b", swapped)):
            answer = await request(port, "POST", "/decide", row(number, state, question, asked))
            assert answer.status == 200, answer.json
            if answer.json["combined"]["top"] != right:
                missed.append(f"{descriptions[0]!r} listed as {right}")
    return missed
