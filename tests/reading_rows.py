"""Does a served model read? Easy rows whose right answer a reader finds wherever it is listed.

Each row is asked twice with `"orderings": "rotations"` (so no position can win by itself): as
written, with the right description on option `a`, and with the descriptions of `a` and `b`
swapped. A model that reads puts its averaged top on the right description both times; one
that does not (SmolLM2, whose rotation-averaged top is close to a coin flip) misses some.
Chosen from 16 easy rows tried on each model (float32, fastjev's prompt): Qwen2.5-Coder-1.5B
read 15 of them both ways, these four with a rotation-averaged top of 0.69 to 0.99;
Qwen2.5-Coder-0.5B read 3 of 16, about what chance gives (1/9 a row), so it cannot carry this
check; SmolLM2 read 1 of 16 and none of these four. tests/real_models/test_smollm2_model.py runs
the check on SmolLM2 and requires it to fail.
"""

from __future__ import annotations

from typing import Any

from tests.wire_client import request

# Seconds one answer may take: three forward passes of a 1.5B, on two loaded cores.
ANSWER_S = 600.0
# (state, question, descriptions with the right one first)
ROWS: list[tuple[Any, str, list[str]]] = [
    (
        {"ticket": "The app crashes every time I open the settings page."},
        "Which team should handle this ticket?",
        ["Technical support", "Billing", "Shipping"],
    ),
    (
        {"person_said": "I am furious, this is the third time you have lost my order!"},
        "How does the person feel?",
        ["Angry", "Happy", "Sleepy"],
    ),
    ({"city": "Paris"}, "In which country is this city?", ["France", "Japan", "Brazil"]),
    (
        {"language": "Python", "code": "print('hello')"},
        "What does this code do?",
        ["Prints hello", "Deletes a file", "Opens a network socket"],
    ),
]


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
            answer = await request(
                port, "POST", "/decide", row(number, state, question, asked), timeout=ANSWER_S
            )
            assert answer.status == 200, answer.json
            if answer.json["combined"]["top"] != right:
                missed.append(f"{descriptions[0]!r} listed as {right}")
    return missed
