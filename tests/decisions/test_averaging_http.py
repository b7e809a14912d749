"""Order averaging over the wire: one engine call per request, exact shapes, refusals."""

from __future__ import annotations

import itertools

import pytest

from tests.fake_scorer import biased, semif_like
from tests.reference import softmax
from tests.request_bodies import FOUR, ROW
from tests.wire_client import request


async def test_rotations_send_n_rows_in_one_shared_call(start_server, fake) -> None:
    server = await start_server(fake)
    fake.logits = biased
    response = await request(
        server.port, "POST", "/decide", {**ROW, "options": FOUR, "orderings": "rotations"}
    )
    assert response.status == 200
    ((kind, rows),) = fake.calls
    assert kind == "shared" and [r["id"] for r in rows] == [f"r1#o{k}" for k in range(4)]
    for position in range(4):
        assert sorted(r["options"][position]["id"] for r in rows) == list("abcd")
    body = response.json
    assert body["id"] == "r1" and body["option_ids"] == list("abcd")
    assert body["orderings"] == [semif_like(r, biased(r)) for r in rows]
    combined = body["combined"]
    assert combined["method"] == "rotations" and combined["orderings"] == 4
    true = [len(o["description"]) for o in FOUR]
    assert combined["probabilities"] == pytest.approx(softmax(true), abs=1e-12)
    assert combined["top"] == "d"


async def test_all_sends_n_factorial_rows_and_is_422_above_four(start_server, fake) -> None:
    server = await start_server(fake)
    response = await request(
        server.port, "POST", "/decide", {**ROW, "options": FOUR[:3], "orderings": "all"}
    )
    ((kind, rows),) = fake.calls
    assert response.status == 200 and len(rows) == 6
    assert {tuple(o["id"] for o in r["options"]) for r in rows} == set(
        itertools.permutations("abc")
    )
    five = FOUR + [{"id": "e", "description": "e"}]
    refused = await request(
        server.port, "POST", "/decide", {**ROW, "options": five, "orderings": "all"}
    )
    assert refused.status == 422 and "at most 4" in refused.json["error"]["message"]
    assert len(fake.calls) == 1


async def test_agreement_and_spread_come_from_the_orderings(start_server, fake) -> None:
    server = await start_server(fake)
    fake.logits = biased
    body = (
        await request(
            server.port, "POST", "/decide", {**ROW, "options": FOUR, "orderings": "rotations"}
        )
    ).json
    tops = [
        o["option_ids"][max(range(4), key=o["probabilities"].__getitem__)]
        for o in body["orderings"]
    ]
    assert body["combined"]["agreement"] == tops.count(body["combined"]["top"]) / 4
    for option in "abcd":
        native = [o["probabilities"][o["option_ids"].index(option)] for o in body["orderings"]]
        assert body["combined"]["spread"][option] == [min(native), max(native)]


async def test_a_mixed_shared_request_is_one_call_in_request_order(start_server, fake) -> None:
    server = await start_server(fake)
    decisions = [
        {"id": "plain1", "question": "q1", "options": FOUR[:2]},
        {"id": "avg", "question": "q2", "options": FOUR[:3], "orderings": "rotations"},
        {"id": "plain2", "question": "q3", "options": FOUR},
    ]
    response = await request(
        server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions}
    )
    assert response.status == 200
    ((kind, rows),) = fake.calls
    assert [r["id"] for r in rows] == ["plain1", "avg#o0", "avg#o1", "avg#o2", "plain2"]
    results = response.json["results"]
    assert [r["id"] for r in results] == ["plain1", "avg", "plain2"]
    assert results[0] == semif_like(rows[0]) and results[2] == semif_like(rows[4])
    assert set(results[1]) == {"id", "option_ids", "combined", "orderings"}


async def test_expanded_rows_count_toward_the_cap(start_server, fake) -> None:
    server = await start_server(fake, max_decisions=5)
    decisions = [
        {"id": "a", "question": "q", "options": FOUR, "orderings": "rotations"},
        {"id": "b", "question": "q", "options": FOUR[:2]},
    ]
    response = await request(
        server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions}
    )
    assert response.status == 200  # 4 rotations + 1 plain = 5 rows: exactly at the cap
    decisions.append({"id": "c", "question": "q", "options": FOUR[:2]})
    response = await request(
        server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions}
    )
    assert response.status == 422 and "expands to 6 rows" in response.json["error"]["message"]
    single = await request(
        server.port, "POST", "/decide", {**ROW, "options": FOUR[:3], "orderings": "all"}
    )
    assert single.status == 422 and "expands to 6 rows" in single.json["error"]["message"]
    assert len(fake.calls) == 1


@pytest.mark.parametrize(
    "body,needle",
    [
        ({**ROW, "orderings": "rotations", "workload": "triage"}, "workload"),
        ({**ROW, "orderings": "sideways"}, "orderings"),
        ({**ROW, "orderings": None}, "orderings"),
        ({**ROW, "id": "x#o1", "orderings": "rotations"}, "#o"),
    ],
)
async def test_averaging_refusals_are_422(start_server, fake, body, needle) -> None:
    server = await start_server(fake, calibration={"triage": 2.0})
    response = await request(server.port, "POST", "/decide", body)
    assert response.status == 422 and needle in response.json["error"]["message"]
    assert fake.calls == []


async def test_an_id_that_would_collide_after_expansion_is_422(start_server, fake) -> None:
    server = await start_server(fake)
    decisions = [
        {"id": "a", "question": "q", "options": FOUR[:2], "orderings": "rotations"},
        {"id": "a#o1", "question": "q", "options": FOUR[:2]},
    ]
    response = await request(
        server.port, "POST", "/decide/shared", {"state": "s", "decisions": decisions}
    )
    assert response.status == 422 and fake.calls == []


async def test_plain_ids_with_hash_o_pass_through_without_orderings(start_server, fake) -> None:
    server = await start_server(fake)
    response = await request(server.port, "POST", "/decide", {**ROW, "id": "ticket#o7"})
    assert response.status == 200 and response.json["id"] == "ticket#o7"
