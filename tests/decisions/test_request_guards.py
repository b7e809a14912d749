"""Strict JSON, one rule at a time: each faulty body differs from an accepted one only by its fault.

The request model refuses duplicate keys, NaN, Infinity and -Infinity anywhere
in a body. Older tests sent such bodies with another fault as well (an empty
`options`, a control byte), so they stayed green with these rules disabled.
Here each body is the valid control with exactly one fault added, and the
control itself is shown to be accepted, in process and on a real socket.
(A number that overflows to infinity, such as 1e400, is the operations branch's.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from semif_serve.decisions import request_model
from semif_serve.errors import ApiError
from tests.request_bodies import ROW, SHARED
from tests.wire_client import request

LIMITS = request_model.Limits(max_decisions=8, workloads=frozenset())
CONTROL = json.dumps(ROW)
SHARED_CONTROL = json.dumps(SHARED)
STATE = json.dumps(ROW["state"])  # {"ticket": "printer on fire"}
OPTION = json.dumps(ROW["options"][0])  # {"id": "yes", "description": "Yes, urgent"}


def faulty(control: str, old: str, new: str) -> bytes:
    assert control.count(old) == 1, old
    return control.replace(old, new).encode()


# name -> (body, the reason in the 422 message)
FAULTS: dict[str, tuple[bytes, str]] = {
    "duplicate top-level key": (
        faulty(CONTROL, '"question": ', '"question": "Is this urgent?", "question": '),
        "duplicate key 'question'",
    ),
    "duplicate key in an option": (
        faulty(CONTROL, OPTION, OPTION.replace('{"id": "yes"', '{"id": "yes", "id": "yes"')),
        "duplicate key 'id'",
    ),
    "duplicate key in the state": (
        faulty(CONTROL, STATE, '{"ticket": "printer on fire", "ticket": "printer on fire"}'),
        "duplicate key 'ticket'",
    ),
    "NaN in the state": (faulty(CONTROL, STATE, '{"ticket": NaN}'), "NaN is not valid JSON"),
    "Infinity in the state": (
        faulty(CONTROL, STATE, '{"ticket": Infinity}'),
        "Infinity is not valid JSON",
    ),
    "-Infinity in the state": (
        faulty(CONTROL, STATE, '{"ticket": [-Infinity]}'),
        "-Infinity is not valid JSON",
    ),
}
SHARED_FAULTS: dict[str, tuple[bytes, str]] = {
    "duplicate key in a decision": (
        faulty(SHARED_CONTROL, '{"id": "b", ', '{"id": "b", "id": "b", '),
        "duplicate key 'id'",
    ),
    "NaN as the state": (
        faulty(SHARED_CONTROL, '"the shared state"', "[NaN]"),
        "NaN is not valid JSON",
    ),
    "Infinity as the state": (
        faulty(SHARED_CONTROL, '"the shared state"', '{"x": Infinity}'),
        "Infinity is not valid JSON",
    ),
}


def refusal(parse, body: bytes) -> str:
    with pytest.raises(ApiError) as refused:
        parse(body, LIMITS)
    assert refused.value.code == "invalid_request"
    return refused.value.message


def test_the_controls_are_accepted() -> None:
    assert request_model.parse_decide(CONTROL.encode(), LIMITS).decisions[0].row == ROW
    # The same values, only spelled differently, are accepted too: the rules are about the faults.
    assert request_model.parse_decide(
        faulty(CONTROL, STATE, '{"ticket": 1e308, "other": -1e308}'), LIMITS
    )
    assert len(request_model.parse_shared(SHARED_CONTROL.encode(), LIMITS).decisions) == 2


@pytest.mark.parametrize("name", FAULTS)
def test_each_fault_alone_is_refused_in_process(name: str) -> None:
    body, reason = FAULTS[name]
    assert refusal(request_model.parse_decide, body) == f"body is not valid JSON: {reason}"


@pytest.mark.parametrize("name", SHARED_FAULTS)
def test_each_fault_alone_is_refused_in_a_shared_body(name: str) -> None:
    body, reason = SHARED_FAULTS[name]
    assert refusal(request_model.parse_shared, body) == f"body is not valid JSON: {reason}"


async def test_on_the_wire_each_fault_is_a_422_that_never_reaches_the_scorer(
    start_server, fake
) -> None:
    server = await start_server(fake)
    cases = [("/decide", body, reason) for body, reason in FAULTS.values()]
    cases += [("/decide/shared", body, reason) for body, reason in SHARED_FAULTS.values()]
    for path, body, reason in cases:
        response = await request(server.port, "POST", path, body)
        assert (response.status, response.code) == (422, "invalid_request"), body
        assert reason in response.json["error"]["message"]
    assert fake.calls == []
    for path, control in (("/decide", CONTROL), ("/decide/shared", SHARED_CONTROL)):
        assert (await request(server.port, "POST", path, control.encode())).status == 200
    assert [kind for kind, _ in fake.calls] == ["direct", "shared"]


# -- where a refusal points: each message names the field it is about --------------------------


@pytest.mark.parametrize(
    "parse,body,message",
    [
        (request_model.parse_decide, b"[]", "body must be a JSON object"),
        (request_model.parse_shared, b"[]", "body must be a JSON object"),
        (
            request_model.parse_decide,
            json.dumps({**ROW, "options": []}).encode(),
            "body.options must be an array of 2..16 options",
        ),
        (
            request_model.parse_decide,
            json.dumps({**ROW, "id": ""}).encode(),
            "body.id must be a nonempty string",
        ),
        (
            request_model.parse_shared,
            json.dumps({**SHARED, "decisions": [SHARED["decisions"][0], 5]}).encode(),
            "decisions[1] must be a JSON object",
        ),
        (
            request_model.parse_shared,
            json.dumps(
                {"state": "s", "decisions": [{**SHARED["decisions"][0], "options": []}]}
            ).encode(),
            "decisions[0].options must be an array of 2..16 options",
        ),
        (
            request_model.parse_shared,
            json.dumps({"state": "s", "decisions": []}).encode(),
            "decisions must be an array of 1..8 entries",
        ),
    ],
    ids=[
        "decide-not-object",
        "shared-not-object",
        "decide-options",
        "decide-id",
        "shared-item",
        "shared-options",
        "shared-empty",
    ],
)
def test_each_refusal_names_its_field(parse, body: bytes, message: str) -> None:
    assert refusal(parse, body) == message


def test_one_decision_is_a_valid_shared_body_and_the_kinds_are_told_apart() -> None:
    one = request_model.parse_shared(
        json.dumps({"state": "s", "decisions": SHARED["decisions"][:1]}).encode(), LIMITS
    )
    assert len(one.decisions) == 1 and one.shared is True
    assert request_model.parse_decide(CONTROL.encode(), LIMITS).shared is False


WITH_WORKLOADS = request_model.Limits(max_decisions=8, workloads=frozenset({"b", "a"}))
LONG = "w" * 100  # echoed as a 60-character excerpt


@pytest.mark.parametrize(
    "limits,body,message",
    [
        (
            LIMITS,
            {**ROW, "orderings": "some"},
            "body.orderings must be one of none, rotations, all, prior, adaptive",
        ),
        (
            WITH_WORKLOADS,
            {**ROW, "workload": LONG},
            f"unknown workload {'w' * 60 + '…'!r}; known: a, b",
        ),
        (LIMITS, {**ROW, "workload": "a"}, "unknown workload 'a'; known: none"),
        (
            WITH_WORKLOADS,
            {**ROW, "workload": "a", "orderings": "rotations"},
            "workload 'a' has no temperature for method 'rotations' (decision 'r1'); it has: none",
        ),
        (
            LIMITS,
            {**ROW, "id": "x#o1" + LONG, "orderings": "rotations"},
            f"decision id {'x#o1' + 'w' * 56 + '…'!r} contains '#o<digits>', reserved for orderings",
        ),
    ],
    ids=[
        "orderings",
        "workload-known",
        "workload-none-known",
        "workload-and-orderings",
        "reserved-id",
    ],
)
def test_the_decide_refusals_say_exactly_what_is_wrong(
    limits, body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as refused:
        request_model.parse_decide(json.dumps(body).encode(), limits)
    assert refused.value.message == message


def test_repeated_decision_ids_are_refused_exactly() -> None:
    body = {"state": "s", "decisions": [SHARED["decisions"][0], SHARED["decisions"][0]]}
    assert (
        refusal(request_model.parse_shared, json.dumps(body).encode())
        == "decision ids must be unique"
    )


# -- the rest of the strict-JSON and shape messages, exactly ----------------------------------


def decide(**changes: Any) -> bytes:
    return json.dumps({**ROW, **changes}).encode()


@pytest.mark.parametrize(
    "body,message",
    [
        (b"\xff{}", "body is not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "body is nested too deeply"),
        (
            faulty(CONTROL, STATE, '"\\ud800"'),
            "body holds a lone surrogate escape (\\ud800-\\udfff)",
        ),
        (
            faulty(
                CONTROL,
                '"question": ',
                '"' + "\\\\" * 41 + '": 1, "' + "\\\\" * 41 + '": 1, "question": ',
            ),
            "body is not valid JSON: duplicate key " + repr("\\" * 40 + "…"),
        ),
        (
            decide(**{f"extra{i}": 1 for i in range(6)}, **{"y" * 50: 1}),
            "body has unknown field(s): extra0, extra1, extra2, extra3, extra4",
        ),
        (decide(**{"y" * 50: 1}), "body has unknown field(s): " + "y" * 40 + "…"),
        (json.dumps({"id": "r"}).encode(), "body is missing field(s): options, question, state"),
        (decide(state=""), "state must be a nonempty string, object or array"),
        (decide(question=""), "body.question must be a nonempty string"),
        (
            decide(options=[{"id": 1, "description": "d"}, {"id": "b", "description": "e"}]),
            "body.options[0] needs string id and description",
        ),
        (
            decide(options=[{"id": "a", "description": "d"}, {"id": "b", "description": 2}]),
            "body.options[1] needs string id and description",
        ),
        (
            decide(options=[{"id": "a"}, {"id": "b", "description": "e"}]),
            "body.options[0] is missing field(s): description",
        ),
        (decide(options=[{"id": "a", "description": "d"}] * 2), "body.options ids must be unique"),
        (
            decide(options=[{"id": str(i), "description": "d"} for i in range(17)]),
            "body.options must be an array of 2..16 options",
        ),
    ],
    ids=[
        "not-utf8",
        "nested",
        "lone-surrogate",
        "long-duplicate-key",
        "unknown-five",
        "unknown-long",
        "missing",
        "state",
        "question",
        "option-id-type",
        "option-description-type",
        "option-missing",
        "option-ids",
        "seventeen-options",
    ],
)
def test_the_shape_refusals_say_exactly_what_is_wrong(body: bytes, message: str) -> None:
    assert refusal(request_model.parse_decide, body) == message


def test_all_orderings_of_four_options_are_accepted() -> None:
    four = [{"id": str(i), "description": "d"} for i in range(4)]
    roomy = request_model.Limits(max_decisions=24, workloads=frozenset())  # 4! rows
    assert (
        request_model.parse_decide(decide(options=four, orderings="all"), roomy).decisions[0].method
        == "all"
    )


def test_sixteen_options_and_a_surrogate_pair_are_accepted() -> None:
    sixteen = [{"id": str(i), "description": "d"} for i in range(16)]
    assert (
        len(request_model.parse_decide(decide(options=sixteen), LIMITS).decisions[0].row["options"])
        == 16
    )
    paired = request_model.parse_decide(faulty(CONTROL, STATE, '"\\ud83d\\ude00"'), LIMITS)
    assert paired.decisions[0].row["state"] == "\U0001f600"
