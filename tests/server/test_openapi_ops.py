"""The OpenAPI document's operational parts against the live stub server: /metrics, and the
X-Request-Id and Retry-After headers it promises (schemathesis' header conformance check)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from schemathesis import checks

from bench.acceptance.schemathesis_run import document
from tests.request_bodies import ROW
from tests.server.threaded_server import AUTH, serving

HEADER_CHECKS = [
    checks.response_schema_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.status_code_conformance,
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving() as base:
        yield base


@pytest.mark.parametrize(
    "label,body,headers,status",
    [
        ("GET /metrics", None, {}, 200),
        ("HEAD /metrics", None, {}, 200),
        ("HEAD /health", None, {"X-Request-Id": "trace-8"}, 200),
        ("GET /health", None, {"X-Request-Id": "trace-7"}, 200),
        ("POST /decide", ROW, AUTH, 200),
        ("POST /decide", ROW, {}, 401),
        ("POST /decide", {**ROW, "state": {"n": 1}, "question": ""}, AUTH, 422),
    ],
)
def test_responses_carry_the_documented_headers(
    url: str, label: str, body: Any, headers: dict[str, str], status: int
) -> None:
    operation = schemathesis.openapi.from_dict(document()).find_operation_by_label(label)
    case = (
        operation.Case(body=body, media_type="application/json")
        if body is not None
        else operation.Case()
    )
    response = case.call(base_url=url, headers=headers, timeout=10)
    assert response.status_code == status and response.headers["x-request-id"]
    case.validate_response(response, checks=HEADER_CHECKS)


def test_retry_after_is_documented_on_every_429_and_503() -> None:
    doc = document()
    for status in ("429", "503"):
        assert "Retry-After" in doc["components"]["responses"][status]["headers"]
    assert "Retry-After" in doc["paths"]["/health"]["get"]["responses"]["503"]["headers"]
    assert all(
        "X-Request-Id" in response["headers"]
        for response in doc["components"]["responses"].values()
    )
