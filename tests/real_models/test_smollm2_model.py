"""SmolLM2-135M-Instruct, the real model, served on the CPU: what CI proves about it.

* The build is deterministic: the revision (a content hash of every file) is pinned here.
* INV-1: /decide and /decide/shared return exactly what fastjev returns in-process on an
  independently loaded copy of the same snapshot.
* Content under rotations: six decisions (three city pairs) whose rotation-averaged top
  choice follows the evidence in both directions. They were searched for, not sampled:
  of 25 city pairs tried ("In which country is this city?"), only these 3 followed the
  evidence both ways, fewer than a coin would; without averaging the model picks the
  first-listed option. They pin the served averaging path to a real model's answers.
* It does not read: the reading check of tests/reading_rows.py (which the 1.5B reading
  model passes) fails here, so that check can fail.
* INV-7 on this tokenizer: upstream's one-token state prefix is not a prefix of the real
  prompt when the state's last value is itself an object (`"}}` then `,` re-tokenises
  two tokens back) or a string ending in `+` or `/` (e.g. `"x+"`). Upstream refuses
  both; the server answers them with the same tokens as /decide.

The model is built once per machine into $SEMIF_SMOLLM2_HOME (default
~/.cache/semif-serve/smollm2), which CI keeps between runs; a rebuild takes about a
minute, a cached one well under a second. The conftest's model fixtures (`tiny_settings`,
`tiny_scorer`, `tiny_metadata`) are reused here by overriding `tiny_built`.
"""

from __future__ import annotations

from typing import Any

import pytest

from semif_serve.builders import smollm2
from semif_serve.decisions import averaging
from semif_serve.decisions.views import as_json
from semif_serve.engine import prefix
from tests.reading_rows import misread
from tests.timing import timeless
from tests.wire_client import request

REVISION = "16708cffca79e01d1e090d2e12526c31f5cd17ce"
REFUSAL = "The fixed state prefix does not match every full prompt"
QUESTION = "In which country is this city?"
# (city, its country, the other country): each pair appears in both directions.
CONTENT = [
    ("Toronto", "Canada", "India"),
    ("Mumbai", "India", "Canada"),
    ("Toronto", "Canada", "Germany"),
    ("Berlin", "Germany", "Canada"),
    ("Mumbai", "India", "Germany"),
    ("Berlin", "Germany", "India"),
]
BOUNDARY_STATES = [{"ticket": {"text": "printer jammed"}}, {"person_said": "x+"}]


def country_row(city: str, first: str, second: str) -> dict[str, Any]:
    options = [{"id": name.lower(), "description": name} for name in (first, second)]
    return {"id": city.lower(), "state": {"city": city}, "question": QUESTION, "options": options}


def ticket_rows(state: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": "upset",
            "state": state,
            "question": "Is the customer upset?",
            "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
        },
        {
            "id": "team",
            "state": state,
            "question": "Which team should handle it?",
            "options": [
                {"id": "billing", "description": "Billing"},
                {"id": "tech", "description": "Technical support"},
                {"id": "shipping", "description": "Shipping"},
            ],
        },
    ]


def top(result: dict[str, Any]) -> str:
    return result["option_ids"][result["probabilities"].index(max(result["probabilities"]))]


@pytest.fixture(scope="module")
def tiny_built(smollm2_build: dict[str, str]) -> dict[str, str]:
    """Points the conftest's model fixtures at SmolLM2 for this module."""
    return smollm2_build


def test_the_build_is_deterministic_and_found_again_without_converting(
    smollm2_build, monkeypatch
) -> None:
    assert smollm2_build["SEMIF_REVISION"] == REVISION
    monkeypatch.setattr(
        smollm2, "convert", lambda path: pytest.fail("the second build converted again")
    )
    assert smollm2.build() == smollm2_build


async def test_served_equals_in_process(
    start_server, tiny_scorer, tiny_settings, reference, tiny_metadata
) -> None:
    from fastjev._runtime import direct, shared

    server = await start_server(tiny_scorer)
    health = (await request(server.port, "GET", "/health", headers=[])).json
    assert (health["model"], health["revision"], health["device"]) == (
        smollm2.REPO_ID,
        REVISION,
        "cpu",
    )
    model, tokenizer = reference
    rows = ticket_rows({"ticket": "I was charged twice for one order", "customer": "Dana"})
    decided = await request(server.port, "POST", "/decide", rows[1])
    assert decided.status == 200
    assert timeless(decided.json) == timeless(
        direct.score(model, tokenizer, rows[1], tiny_metadata, 4096)
    )
    body = {
        "state": rows[0]["state"],
        "decisions": [{key: r[key] for key in ("id", "question", "options")} for r in rows],
    }
    served = await request(server.port, "POST", "/decide/shared", body)
    assert served.status == 200
    with pytest.MonkeyPatch.context() as patch:  # upstream's own prefix: an ordinary state keeps it
        patch.setattr(shared, "_state_prefix", prefix.original_of(shared._state_prefix))
        theirs = shared.score_shared(model, tokenizer, rows, tiny_metadata, 4096)[0]
    assert served.json["results"] == theirs


async def test_rotations_follow_the_evidence_where_the_first_position_does_not(
    start_server, tiny_scorer
) -> None:
    server = await start_server(tiny_scorer)
    for city, right, wrong in CONTENT:
        row = country_row(city, wrong, right)  # the right answer listed second
        plain = await request(server.port, "POST", "/decide", row)
        rotated = await request(server.port, "POST", "/decide", {**row, "orderings": "rotations"})
        assert plain.status == rotated.status == 200
        assert top(plain.json) == wrong.lower(), f"{city}: no first-position pick without averaging"
        assert rotated.json["combined"]["top"] == right.lower(), (
            f"{city}: rotations did not follow the evidence"
        )
        assert rotated.json == as_json(
            averaging.combine(row, "rotations", rotated.json["orderings"])
        )


@pytest.mark.parametrize("state", BOUNDARY_STATES, ids=["nested-object", "ends-in-plus"])
async def test_boundary_states_upstream_refuses_are_served_with_the_same_tokens(
    state, start_server, tiny_scorer, reference, tiny_metadata
) -> None:
    from fastjev._runtime import shared

    model, tokenizer = reference
    rows = ticket_rows(state)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shared, "_state_prefix", prefix.original_of(shared._state_prefix))
        with pytest.raises(ValueError, match=REFUSAL):
            shared.score_shared(model, tokenizer, rows, tiny_metadata, 4096)
    server = await start_server(tiny_scorer)
    body = {
        "state": state,
        "decisions": [{key: r[key] for key in ("id", "question", "options")} for r in rows],
    }
    served = await request(server.port, "POST", "/decide/shared", body)
    assert served.status == 200
    for row, many in zip(rows, served.json["results"], strict=True):
        alone = (await request(server.port, "POST", "/decide", row)).json
        assert alone["prompt_sha256"] == many["prompt_sha256"]
        assert max(abs(a - b) for a, b in zip(alone["probabilities"], many["probabilities"])) < 1e-5


async def test_the_reading_check_fails_on_it(start_server, tiny_scorer) -> None:
    """tests/reading_rows.py's check fails on a model that does not read, so passing it (the
    1.5B reading model does) is evidence of reading, not of a check that cannot fail."""
    server = await start_server(tiny_scorer)
    assert await misread(server.port) != []
