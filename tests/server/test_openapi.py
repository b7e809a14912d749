"""The OpenAPI document ships with the package and describes what the server really sends.

A plain check that it parses and names every error code, explicit cases for each
result shape (direct, calibrated, averaged, shared), and a short bounded schemathesis
run (bench/acceptance/schemathesis_run.py's driver) against a live stub server in its own thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import schemathesis
from schemathesis import checks

from bench.acceptance.schemathesis_run import document, fuzz
from semif_serve.errors import CODES, STATUS
from tests.request_bodies import ROW, SHARED
from tests.server.threaded_server import AUTH, serving
from tests.wire_client import TOKEN

SYSTEMONE = {
    "model": "jev-latest",
    "state": {"ticket": "payouts failing"},
    "questions": {
        "urgent": {"type": "noul", "instructions": "Urgent?"},
        "choice": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"billing": None, "tech": "Bugs"},
        },
        "score": {"type": "score", "criteria": ["Calm", "Angry", "Furious"]},
    },
}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving() as base:
        yield base


def test_the_document_parses_and_names_every_error_code() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    assert {
        label
        for label in (
            r.ok().label for r in schemathesis.openapi.from_dict(doc).get_all_operations()
        )
    } == {
        "GET /health",
        "HEAD /health",
        "GET /metrics",
        "HEAD /metrics",
        "POST /decide",
        "POST /decide/shared",
        "POST /v1/systemone",
        "GET /v1/models",
        "HEAD /v1/models",
        "GET /v1/audit",
        "HEAD /v1/audit",
        "GET /healthz",
        "HEAD /healthz",
    }
    envelope = doc["components"]["schemas"]["Error"]["properties"]["error"]
    assert envelope["required"] == ["code", "message", "type"] and envelope["properties"]["code"][
        "enum"
    ] == sorted(STATUS)
    assert envelope["properties"]["type"]["enum"] == sorted({kind for _, kind in CODES.values()})
    for code, status in STATUS.items():
        (restriction,) = [
            part
            for part in doc["components"]["responses"][str(status)]["content"]["application/json"][
                "schema"
            ]["allOf"]
            if "properties" in part
        ]
        assert code in restriction["properties"]["error"]["properties"]["code"]["enum"], code
    for path in ("/decide", "/decide/shared", "/v1/systemone"):
        responses = doc["paths"][path]["post"]["responses"]
        assert {str(s) for s in (401, 413, 415, 422, 429, 500, 503)} <= set(responses)
        assert all(
            ref == {"$ref": f"#/components/responses/{status}"}
            for status, ref in responses.items()
            if status != "200"
        )
    assert doc["paths"]["/health"]["get"]["security"] == [] and doc["security"] == [{"bearer": []}]


@pytest.mark.parametrize(
    "label,body",
    [
        ("POST /decide", ROW),
        ("POST /decide", {**ROW, "workload": "triage"}),
        ("POST /decide", {**ROW, "orderings": "rotations"}),
        (
            "POST /decide",
            {
                **ROW,
                "options": ROW["options"] + [{"id": "maybe", "description": "?"}],
                "orderings": "all",
            },
        ),
        ("POST /decide/shared", SHARED),
        ("POST /decide/shared", {**SHARED, "workload": "triage"}),
        (
            "POST /decide/shared",
            {
                **SHARED,
                "decisions": [
                    {**SHARED["decisions"][0], "orderings": "rotations"},
                    SHARED["decisions"][1],
                ],
            },
        ),
        ("POST /decide", {**ROW, "orderings": "prior", "workload": "triage"}),
        (
            "POST /decide/shared",
            {
                **SHARED,
                "workload": "triage",
                "decisions": [
                    {**decision, "orderings": "prior"} for decision in SHARED["decisions"]
                ],
            },
        ),
        ("POST /decide", {**ROW, "orderings": "adaptive", "workload": "triage"}),
        (
            "POST /decide/shared",
            {
                **SHARED,
                "workload": "triage",
                "decisions": [
                    {**decision, "orderings": "adaptive"} for decision in SHARED["decisions"]
                ],
            },
        ),
        ("GET /health", None),
        ("POST /v1/systemone", SYSTEMONE),
        (
            "POST /v1/systemone",
            {**SYSTEMONE, "semif": {"orderings": "adaptive", "workload": "triage"}},
        ),
        (
            "POST /v1/systemone",
            {**SYSTEMONE, "semif": {"orderings": "prior", "workload": "triage"}},
        ),
        (
            "POST /v1/systemone",
            {**SYSTEMONE, "questions": {"one": SYSTEMONE["questions"]["choice"]}},
        ),
        ("POST /v1/systemone", {**SYSTEMONE, "semif": {"orderings": "rotations"}}),
        ("POST /v1/systemone", {**SYSTEMONE, "semif": {"workload": "triage"}}),
        ("GET /v1/models", None),
        ("GET /v1/audit", None),
    ],
)
def test_every_result_shape_matches_the_document(url: str, label: str, body: Any) -> None:
    operation = schemathesis.openapi.from_dict(document()).find_operation_by_label(label)
    case = (
        operation.Case(body=body, media_type="application/json")
        if body is not None
        else operation.Case()
    )
    response = case.call(base_url=url, headers=AUTH, timeout=10)
    assert response.status_code == 200
    case.validate_response(
        response, checks=[checks.response_schema_conformance, checks.content_type_conformance]
    )


@pytest.mark.parametrize(
    "label,body,headers,status",
    [
        ("POST /decide", ROW, {}, 401),
        ("POST /decide", {**ROW, "workload": "unknown"}, AUTH, 422),
        ("POST /decide/shared", {"state": "s", "decisions": []}, AUTH, 422),
        ("POST /v1/systemone", {**SYSTEMONE, "model": "other"}, AUTH, 422),
        ("POST /v1/systemone", SYSTEMONE, {}, 401),
        ("GET /v1/models", None, {}, 401),
        ("GET /v1/audit", None, {}, 401),
    ],
)
def test_error_envelopes_match_the_document(
    url: str, label: str, body: Any, headers: dict[str, str], status: int
) -> None:
    operation = schemathesis.openapi.from_dict(document()).find_operation_by_label(label)
    case = (
        operation.Case(body=body, media_type="application/json")
        if body is not None
        else operation.Case()
    )
    response = case.call(base_url=url, headers=headers, timeout=10)
    assert response.status_code == status
    case.validate_response(
        response, checks=[checks.response_schema_conformance, checks.status_code_conformance]
    )


@pytest.mark.parametrize(
    "label,body,schema",
    [
        ("POST /decide", {**ROW, "workload": None}, "DecideBody"),
        ("POST /decide/shared", {**SHARED, "workload": None}, "SharedBody"),
    ],
)
def test_a_null_workload_is_documented_as_no_workload(
    url: str, label: str, body: Any, schema: str
) -> None:
    """The server has always read `"workload": null` as no workload; a document typing it as a string alone
    let schemathesis's negative cases find "a schema-violating request accepted" now and then."""
    doc = document()
    jsonschema.Draft202012Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
    ).validate(body)
    operation = schemathesis.openapi.from_dict(doc).find_operation_by_label(label)
    response = operation.Case(body=body, media_type="application/json").call(
        base_url=url, headers=AUTH, timeout=10
    )
    assert response.status_code == 200 and "calibrated" not in response.text


def test_a_bounded_schemathesis_run_finds_nothing(url: str) -> None:
    sent, findings = fuzz(url, TOKEN, max_examples=25)
    assert sent >= 50 and findings == []
