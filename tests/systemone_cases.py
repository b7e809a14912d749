"""What the System One tests share: the refusal list, run in process (tests/systemone/test_translate.py)
and on a socket (test_http.py); and the SDK's requests, the rows SemIf's mapping gives them and the
checks of its answers against /decide/shared, run on the stub (test_sdk_stub.py), the tiny model
(test_sdk_tiny.py) and SmolLM2 (test_sdk_smollm2.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typesafe_sdk import AsyncTypeSafeClient, Choice, Noul, Score, SystemOneResponse, TypeSafeClient

from semif_serve.config import DEFAULT_ALIASES
from tests.wire_client import TOKEN, Connection

# -- refusals: (case, body, the param the 422 names, what its message opens with); a "served" model is the served id or an alias --

NOUL = {"type": "noul", "instructions": "Urgent?"}
REFUSALS = [
    ("wrong body type", ["x"], None, "body must be a JSON object"),
    (
        "missing questions",
        {"model": "served", "state": "s"},
        "questions",
        "body is missing field questions",
    ),
    (
        "unknown model",
        {"model": "gpt", "state": "s", "questions": {"q": NOUL}},
        "model",
        "unknown model 'gpt'; served: ",
    ),
    (
        "model not a string",
        {"model": 3, "state": "s", "questions": {"q": NOUL}},
        "model",
        "unknown model '3'; served: ",
    ),
    (
        "model an array (unhashable: schemathesis found the crash)",
        {"model": ["served"], "state": "s", "questions": {"q": NOUL}},
        "model",
        "unknown model \"['",
    ),
    (
        "model an object",
        {"model": {"name": "served"}, "state": "s", "questions": {"q": NOUL}},
        "model",
        "unknown model \"{'name': '",
    ),
    (
        "state of the wrong type",
        {"model": "served", "state": 5, "questions": {"q": NOUL}},
        "state",
        "state must be a nonempty string, object or array",
    ),
    (
        "empty state",
        {"model": "served", "state": "", "questions": {"q": NOUL}},
        "state",
        "state must be a nonempty string, object or array",
    ),
    (
        "a model name over 60 characters, cut in the message",
        {"model": "m" * 70, "state": "s", "questions": {"q": NOUL}},
        "model",
        "unknown model '" + "m" * 60 + "…'; served: ",
    ),
    (
        "questions of the wrong type",
        {"model": "served", "state": "s", "questions": [NOUL]},
        "questions",
        "questions must be an object of 1..64 questions",
    ),
    (
        "empty questions",
        {"model": "served", "state": "s", "questions": {}},
        "questions",
        "questions must be an object of 1..64 questions",
    ),
    (
        "a question of the wrong type",
        {"model": "served", "state": "s", "questions": {"q": "noul"}},
        "questions.q",
        "questions.q must be an object",
    ),
    (
        "an empty question key",
        {"model": "served", "state": "s", "questions": {"": NOUL}},
        "questions",
        "question keys must be nonempty",
    ),
    (
        "a blank question key",
        {"model": "served", "state": "s", "questions": {" ": NOUL}},
        "questions",
        "question keys must be nonempty",
    ),
    (
        "an empty option name",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "choice", "criteria": {"": None, "b": None}}},
        },
        "questions.q.criteria",
        "questions.q.criteria has an empty option name",
    ),
    (
        "an option description of the wrong type",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "choice", "criteria": {"a": 4, "b": None}}},
        },
        "questions.q.criteria.a",
        "questions.q.criteria.a must be a string, object or array",
    ),
    (
        "score criteria as an object",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "score", "criteria": {"a": "x", "b": "y"}}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an array of 2..10 levels, got dict",
    ),
    (
        "a noul criterion named over 40 characters, cut in the message",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "noul", "criteria": {"k" * 50: "m"}}},
        },
        "questions.q.criteria",
        "questions.q.criteria accepts only true and false, got '" + "k" * 40 + "…'",
    ),
    (
        "a type over 40 characters, cut in the message",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "type": "t" * 50}}},
        "questions.q.type",
        "questions.q.type must be one of noul, choice, score, got '" + "t" * 40 + "…'",
    ),
    (
        "1 option",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "choice", "criteria": {"a": None}}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an object of 2..16 options (SemIf's letters A..P), got 1",
    ),
    (
        "17 options",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(17)}}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an object of 2..16 options (SemIf's letters A..P), got 17",
    ),
    (
        "choice criteria as an array",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "choice", "criteria": ["a", "b"]}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an object of 2..16 options (SemIf's letters A..P), got list",
    ),
    (
        "a score with 1 level",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "score", "criteria": ["low"]}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an array of 2..10 levels, got 1",
    ),
    (
        "a score with 11 levels",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "score", "criteria": [str(i) for i in range(11)]}},
        },
        "questions.q.criteria",
        "questions.q.criteria must be an array of 2..10 levels, got 11",
    ),
    (
        "a score level of the wrong type",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "score", "criteria": ["a", 2]}},
        },
        "questions.q.criteria[1]",
        "questions.q.criteria[1] must be a string, object or array",
    ),
    (
        "a score without criteria",
        {"model": "served", "state": "s", "questions": {"q": {"type": "score"}}},
        "questions.q.criteria",
        "questions.q.criteria is required for a score question",
    ),
    (
        "noul criteria with another key",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "noul", "criteria": {"true": "y", "maybe": "m"}}},
        },
        "questions.q.criteria",
        "questions.q.criteria accepts only true and false, got 'maybe'",
    ),
    (
        "noul criteria not an object",
        {"model": "served", "state": "s", "questions": {"q": {"type": "noul", "criteria": "yes"}}},
        "questions.q.criteria",
        "questions.q.criteria must be an object with keys true and/or false",
    ),
    (
        "empty string instructions",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "instructions": ""}}},
        "questions.q.instructions",
        "questions.q.instructions is empty",
    ),
    (
        "blank instructions",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "instructions": "  "}}},
        "questions.q.instructions",
        "questions.q.instructions is empty",
    ),
    (
        "empty object instructions",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "instructions": {}}}},
        "questions.q.instructions",
        "questions.q.instructions is empty",
    ),
    (
        "empty array instructions",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "instructions": []}}},
        "questions.q.instructions",
        "questions.q.instructions is empty",
    ),
    (
        "instructions of the wrong type",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "instructions": 4}}},
        "questions.q.instructions",
        "questions.q.instructions must be a string, object or array",
    ),
    (
        "an empty noul criterion",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "criteria": {"true": []}}}},
        "questions.q.criteria.true",
        "questions.q.criteria.true is empty",
    ),
    (
        "an unknown type",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "rank", "criteria": ["a", "b"]}},
        },
        "questions.q.type",
        "questions.q.type must be one of noul, choice, score, got 'rank'",
    ),
    (
        "no type",
        {"model": "served", "state": "s", "questions": {"q": {"instructions": "A?"}}},
        "questions.q.type",
        "questions.q.type must be one of noul, choice, score, got 'None'",
    ),
    (
        "a type given as an array (unhashable)",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "type": ["noul"]}}},
        "questions.q.type",
        "questions.q.type must be one of noul, choice, score, got \"['noul']\"",
    ),
    (
        "a type given as an object",
        {"model": "served", "state": "s", "questions": {"q": {**NOUL, "type": {"box": 1}}}},
        "questions.q.type",
        "questions.q.type must be one of noul, choice, score, got \"{'box': 1}\"",
    ),
    (
        "a box question",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": {"type": "box", "instructions": "Find the dog"}},
        },
        "questions.q.type",
        "questions.q: box questions locate regions in images; this service scores text only",
    ),
    (
        "image assets",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "assets": {"img": {"type": "image", "format": "png", "data_base64": "AA=="}},
        },
        "assets",
        "image assets are refused: this service scores text only",
    ),
    (
        "an unknown orderings method",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": {"orderings": "some"}},
        "semif.orderings",
        "semif.orderings must be one of none, rotations, all, prior, adaptive",
    ),
    (
        "orderings given as an array",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "semif": {"orderings": ["all"]},
        },
        "semif.orderings",
        "semif.orderings must be one of none, rotations, all, prior, adaptive",
    ),
    (
        "a workload given as an object",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "semif": {"workload": {"triage": 1}},
        },
        "semif.workload",
        "unknown workload \"{'triage': 1}\"",
    ),
    (
        "an unknown workload",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": {"workload": "other"}},
        "semif.workload",
        "unknown workload 'other'",
    ),
    (
        "semif an array",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": []},
        "semif",
        "semif must be an object with orderings and/or workload",
    ),
    (
        "semif a string",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": "x"},
        "semif",
        "semif must be an object with orderings and/or workload",
    ),
    (
        "unknown extension fields, sorted and joined",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "semif": {"zeta": 1, "alpha": 2},
        },
        "semif",
        "semif has unknown field(s): alpha, zeta",
    ),
    (
        "an unknown extension field over 40 characters, cut in the message",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": {"x" * 50: 1}},
        "semif",
        "semif has unknown field(s): " + "x" * 40 + "…",
    ),
    (
        "an unknown extension field",
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": {"order": "all"}},
        "semif",
        "semif has unknown field(s): order",
    ),
    (
        "orderings all over 4 options",
        {
            "model": "served",
            "state": "s",
            "semif": {"orderings": "all"},
            "questions": {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(5)}}},
        },
        "semif.orderings",
        'questions.q: semif.orderings "all" allows at most 4 options, got 5',
    ),
    (
        "a workload without a temperature for the orderings sent",
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "semif": {"orderings": "all", "workload": "triage"},
        },
        "semif.workload",
        "workload 'triage' has no temperature for method 'all' (decision 'q')",
    ),
    (
        "more rows than the cap after expansion",
        {
            "model": "served",
            "state": "s",
            "semif": {"orderings": "rotations"},
            "questions": {
                f"q{i}": {"type": "score", "criteria": [str(j) for j in range(10)]}
                for i in range(7)
            },
        },
        "questions",
        "the request expands to 70 rows; at most 64 are allowed",
    ),
]


# -- the SDK's requests and their checks ---------------------------------------------------------

STATE = {"message": "Help! My payouts have been failing for 3 days.", "plan": "pro"}
QUESTIONS = {
    "is_urgent": Noul(
        instructions="Does this convey urgency?",
        criteria={"true": "Explicitly time-sensitive", "false": "No urgency expressed"},
    ),
    "spam": Noul(criteria={"true": "The message is unsolicited advertising."}),
    "department": Choice(
        instructions="Which team should handle this?",
        criteria={"billing": "Payments, invoicing, refunds", "technical": None, "sales": "Pricing"},
    ),
    "frustration": Score(
        instructions={"task": "Rate the frustration", "scale": "low to high"},
        criteria=["Calm", "Frustrated", "Very angry"],
    ),
}
# The rows SemIf's mapping gives QUESTIONS (tests/systemone/test_translate.py pins the mapping itself).
ROWS = [
    {
        "id": "is_urgent",
        "question": "Does this convey urgency?",
        "options": [
            {"id": "true", "description": "Explicitly time-sensitive"},
            {"id": "false", "description": "No urgency expressed"},
        ],
    },
    {
        "id": "spam",
        "question": "Which of the two options holds for the state?",
        "options": [
            {"id": "true", "description": "The message is unsolicited advertising."},
            {"id": "false", "description": "The answer to the question is no."},
        ],
    },
    {
        "id": "department",
        "question": "Which team should handle this?",
        "options": [
            {"id": "billing", "description": "Payments, invoicing, refunds"},
            {"id": "technical", "description": "technical"},
            {"id": "sales", "description": "Pricing"},
        ],
    },
    {
        "id": "frustration",
        "question": '{"task": "Rate the frustration", "scale": "low to high"}',
        "options": [
            {"id": str(i), "description": level}
            for i, level in enumerate(["Calm", "Frustrated", "Very angry"])
        ],
    },
]


def url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def sdk(port: int, **options: Any) -> TypeSafeClient:
    return TypeSafeClient(
        **{"api_key": TOKEN, "base_url": url(port), "compression": False, **options}
    )


def async_sdk(port: int, **options: Any) -> AsyncTypeSafeClient:
    return AsyncTypeSafeClient(
        **{"api_key": TOKEN, "base_url": url(port), "compression": False, **options}
    )


async def shared_views(
    port: int, orderings: str | None = None, workload: str | None = None
) -> list[dict[str, Any]]:
    """What /decide/shared returns for ROWS, with the same orderings and workload."""
    each = {} if orderings is None else {"orderings": orderings}
    payload = {
        "state": STATE,
        "decisions": [{**row, **each} for row in ROWS],
        **({} if workload is None else {"workload": workload}),
    }
    connection = await Connection.open(port)
    try:  # a real model on a loaded machine may take a while: the client waits as long as the SDK does
        connection.send_request("POST", "/decide/shared", json.dumps(payload).encode())
        response = await connection.read_response(timeout=120.0)
    finally:
        await connection.close()
    assert response.status == 200, response.body
    return response.json["results"]


def expected(kind: str, ids: list[str], p: list[float]) -> dict[str, Any]:
    """The API's answer fields for a distribution, computed here from the API's formulas."""
    if kind == "noul":
        return {"noul": p[0]}
    confidence = (len(p) * max(p) - 1) / (len(p) - 1)
    if kind == "choice":
        return {
            "choice": ids[p.index(max(p))],
            "probabilities": dict(zip(ids, p)),
            "confidence": confidence,
        }
    return {
        "score": sum(i * v for i, v in enumerate(p)),
        "probabilities": dict(enumerate(p)),
        "confidence": confidence,
    }


def check_answers(
    result: SystemOneResponse,
    views: list[dict[str, Any]],
    path: tuple[str, ...] = (),
    keys: list[str] | None = None,
) -> None:
    """Each typed answer equals the formulas over the /decide/shared view (at `path` within it)."""
    assert list(result.answers) == (list(QUESTIONS) if keys is None else keys)
    for (key, answer), view in zip(result.answers.items(), views):
        source = view
        for step in path:
            source = source[step]
        want = expected(answer.type, list(view["option_ids"]), source["probabilities"])
        for name, value in want.items():
            got = getattr(answer, name)
            assert got == (pytest.approx(value) if isinstance(value, float) else value), (key, name)


def native_hashes(result: SystemOneResponse) -> list[str]:
    """The prompt hash of every row a response scored (from its `semif` blocks): the stub's is of the whole row."""
    answers = result.raw_http_response.json()["answers"]
    return [
        r["prompt_sha256"]
        for a in answers.values()
        for r in (a["semif"].get("orderings") or [a["semif"]])
    ]


def view_hashes(views: list[dict[str, Any]]) -> list[str]:
    return [r["prompt_sha256"] for v in views for r in (v.get("orderings") or [v])]


async def synchronous_answer(
    port: int, extra_body: dict[str, Any] | None = None, **options: Any
) -> SystemOneResponse:
    """QUESTIONS through the sync client (with the SDK's `extra_body`, if given), in a worker thread so
    the loop keeps serving; the client is closed after."""

    def ask() -> SystemOneResponse:
        with sdk(port, **options) as client:
            return client.system_one(
                STATE, QUESTIONS, **({} if extra_body is None else {"extra_body": extra_body})
            )

    return await asyncio.to_thread(ask)


def semif_id(model: str, revision: str) -> str:
    """SemIf's id form for a snapshot served by a torch scorer on the CPU, spelled out from its documented pattern."""
    return f"semif/{model.rstrip('/').rsplit('/', 1)[-1]}@{revision[:12]}+torch-float32"


async def both_clients_on_a_model(
    port: int, model: str, revision: str
) -> tuple[SystemOneResponse, list[dict[str, Any]]]:
    """The real-model check: every type through both clients equals /decide/shared, answers and models.list
    name the snapshot in SemIf's form (SEMIF_MODEL listed after it); a loaded machine may take a while per
    call. The async answer and the views."""
    async with async_sdk(port, timeout=120.0) as client:
        asynchronous = await client.system_one(STATE, QUESTIONS)
        listed = await client.models.list()
    synchronous = await synchronous_answer(port, timeout=120.0)
    views = await shared_views(port)
    for result in (asynchronous, synchronous):
        assert result.model == semif_id(model, revision)
        assert native_hashes(result) == view_hashes(views)
        check_answers(result, views)
    assert [m.name for m in listed.models] == [semif_id(model, revision), model, *DEFAULT_ALIASES]
    return asynchronous, views
