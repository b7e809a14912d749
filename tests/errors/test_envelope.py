"""The error envelope, rendered from the one table of codes (semif_serve/errors.py), in process: each
code's body carries the code, the message and the API `type` its row gives, an ApiError's status is its
row's, and a field's JSON path appears as `param` only when a field is to blame. What reaches a socket
is tests/service/test_faults.py's."""

from __future__ import annotations

import json

import pytest

from semif_serve.errors import CODES, ApiError, envelope


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_renders_the_envelope_its_row_gives(code: str) -> None:
    status, kind = CODES[code]
    body = json.loads(envelope(code, "what to do"))
    assert body == {"error": {"code": code, "message": "what to do", "type": kind}}
    assert ApiError(code, "what to do").status == status


def test_the_field_to_blame_is_named_only_when_there_is_one() -> None:
    blamed = json.loads(envelope("invalid_request", "no such option", "options[1].id"))
    assert blamed["error"]["param"] == "options[1].id"
    assert "param" not in json.loads(envelope("invalid_request", "no such option"))["error"]
