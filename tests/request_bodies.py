"""Request bodies the tests send: one valid /decide row, one /decide/shared body, the
row as bytes and as a whole raw POST, and four options for order averaging. Defined
once; every test file imports them from here.
"""

from __future__ import annotations

import json

from tests.wire_client import raw_request

ROW = {
    "id": "r1",
    "state": {"ticket": "printer on fire"},
    "question": "Is this urgent?",
    "options": [{"id": "yes", "description": "Yes, urgent"}, {"id": "no", "description": "No"}],
}
SHARED = {
    "state": "the shared state",
    "decisions": [
        {"id": "a", "question": "Q1?", "options": ROW["options"]},
        {
            "id": "b",
            "question": "Q2?",
            "options": [
                {"id": "x", "description": "x"},
                {"id": "y", "description": "yy"},
                {"id": "z", "description": "z"},
            ],
        },
    ],
}
FOUR = [{"id": k, "description": d} for k, d in zip("abcd", ["one", "three", "fives", "seven!!"])]
BODY = json.dumps(ROW).encode()
POST = raw_request(
    fields=b"content-length: %d\r\n" % len(BODY), body=BODY
)  # authorised, framed by content-length
