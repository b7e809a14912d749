"""Orderings "adaptive" on a real socket: one row per decision first, a second call over the unsure
decisions' half turns only, a third over the rest of those whose half turn disagreed, and the
answers those rows give under "prior" and "rotations".

The scripted scorer's logits are each option's description (a number) plus log prior by position,
so the workload's prior divides the position out exactly and each decision's margin is set by its
descriptions: "sure" far above the threshold, "unsure" and "split" below it. A half turn then agrees
with the first row, except in "split", whose half-turn row is twisted. The scorer records every call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from typing import Any

import pytest

from semif_serve.decisions import calibration_file
from semif_serve.engine.scorer import ScoringFailed
from tests.metrics_samples import scrape, value
from tests.wire_client import Connection, eventually, request

PRIOR3 = (0.5, 0.3, 0.2)
THRESHOLD = 0.2
TABLE = calibration_file.Table(
    {"triage": {"prior": 2.0, "rotations": 1.5}},
    calibration_file.Binding("semif-serve/fake", "f" * 40, "direct-options-v1"),
    None,
    {
        "triage": {
            3: calibration_file.FittedPrior(PRIOR3, 8, THRESHOLD),
            2: calibration_file.FittedPrior((0.6, 0.4), 8),  # a prior without a threshold
        }
    },
)


def logits(row: dict[str, Any]) -> list[float]:
    values = [float(o["description"]) + math.log(PRIOR3[i]) for i, o in enumerate(row["options"])]
    values[0] += 3.0 if row["id"].startswith("split#o1") else 0.0  # the half turn disagrees
    return values


def decision(name: str, values: tuple[float, ...], orderings: str = "adaptive") -> dict[str, Any]:
    options = [{"id": f"{name}{i}", "description": str(v)} for i, v in enumerate(values)]
    return {"id": name, "question": f"{name}?", "options": options, "orderings": orderings}


SURE = decision("sure", (0.0, 0.0, 4.0))
UNSURE = decision("unsure", (1.0, 1.2, 0.0))
AGAIN = decision("again", (0.3, 0.0, 0.1))
SPLIT = decision("split", (1.2, 1.0, 0.0))


def shared(*items: dict[str, Any]) -> dict[str, Any]:
    return {"state": "s", "workload": "triage", "decisions": list(items)}


def ids(fake: Any) -> list[list[str]]:
    """The row ids of each scorer call, in order."""
    return [[row["id"] for row in payload] for _, payload in fake.calls]


async def served(start_server: Any, fake: Any, **settings: Any) -> Any:
    fake.logits = logits
    return await start_server(fake, calibration=TABLE, **settings)


async def test_each_later_call_carries_exactly_the_decisions_that_go_on(start_server, fake) -> None:
    server = await served(start_server, fake)
    answered = await request(
        server.port, "POST", "/decide/shared", shared(UNSURE, SURE, SPLIT, AGAIN)
    )
    assert answered.status == 200
    assert ids(fake) == [
        ["unsure#o0", "sure#o0", "split#o0", "again#o0"],
        ["unsure#o1", "split#o1", "again#o1"],  # the half turns of the unsure
        ["split#o2"],  # the rest, where the half turn disagreed
    ]
    assert answered.json["timing"]["batch_size"] == 4  # the first call's SemIf timing
    unsure, sure, split, again = (result["combined"] for result in answered.json["results"])
    assert [
        (c["method"], c["rows"], c["orderings"], c["escalated"])
        for c in (unsure, sure, split, again)
    ] == [
        ("adaptive", 2, 1, True),
        ("adaptive", 1, 1, False),
        ("adaptive", 3, 3, True),
        ("adaptive", 2, 1, True),
    ]
    assert {c["threshold"] for c in (unsure, sure, split, again)} == {THRESHOLD}


async def test_no_decision_unsure_makes_one_call(start_server, fake) -> None:
    server = await served(start_server, fake)
    answered = await request(
        server.port, "POST", "/decide", {**SURE, "state": "s", "workload": "triage"}
    )
    assert answered.status == 200 and answered.json["combined"]["escalated"] is False
    assert ids(fake) == [["sure#o0"]]


async def test_the_answers_are_the_priors_where_sure_or_confirmed_and_the_rotations_where_not(
    start_server, fake
) -> None:
    """Each adaptive answer against the same server's answer under the method it reduced to."""
    server = await served(start_server, fake)
    adaptive = (
        await request(server.port, "POST", "/decide/shared", shared(SURE, UNSURE, SPLIT))
    ).json
    reference = (
        await request(
            server.port,
            "POST",
            "/decide/shared",
            shared(
                {**SURE, "orderings": "prior"},
                {**UNSURE, "orderings": "prior"},
                {**SPLIT, "orderings": "rotations"},
            ),
        )
    ).json
    for got, want, rows, escalated in zip(
        adaptive["results"], reference["results"], (1, 2, 3), (False, True, True)
    ):
        extra = {"method": "adaptive", "rows": rows, "escalated": escalated, "threshold": THRESHOLD}
        assert got["combined"] == {**want["combined"], **extra}
    sure, unsure, split = adaptive["results"]
    assert sure["orderings"] == reference["results"][0]["orderings"]  # the SemIf results, untouched
    assert [r["id"] for r in unsure["orderings"]] == ["unsure#o0", "unsure#o1"]  # both rows scored
    assert unsure["orderings"][0] == reference["results"][1]["orderings"][0]
    assert split["orderings"] == reference["results"][2]["orderings"]
    calibrated = [result["combined"]["calibrated"] for result in adaptive["results"]]
    assert [(c["method"], c["temperature"]) for c in calibrated] == [
        ("prior", 2.0),
        ("prior", 2.0),
        ("rotations", 1.5),
    ]


async def test_a_failing_second_call_fails_the_request(start_server, fake) -> None:
    server = await served(start_server, fake)

    def failing(row: dict[str, Any]) -> list[float]:
        if not row["id"].endswith("#o0"):
            raise ScoringFailed("the second call failed")
        return logits(row)

    fake.logits = failing
    refused = await request(server.port, "POST", "/decide/shared", shared(SURE, UNSURE))
    assert refused.status == 500 and refused.json["error"]["code"] == "scoring_failed"
    assert ids(fake) == [["sure#o0", "unsure#o0"], ["unsure#o1"]]


async def test_a_failing_third_call_fails_the_request(start_server, fake) -> None:
    server = await served(start_server, fake)

    def failing(row: dict[str, Any]) -> list[float]:
        if row["id"] == "split#o2":
            raise ScoringFailed("the third call failed")
        return logits(row)

    fake.logits = failing
    refused = await request(server.port, "POST", "/decide/shared", shared(SPLIT))
    assert refused.status == 500 and refused.json["error"]["code"] == "scoring_failed"
    assert ids(fake) == [["split#o0"], ["split#o1"], ["split#o2"]]


async def test_a_client_that_left_during_the_first_call_gets_no_second(start_server, fake) -> None:
    server = await served(start_server, fake)
    fake.gate = threading.Event()
    leaving = await Connection.open(server.port)
    leaving.send_request("POST", "/decide/shared", json.dumps(shared(UNSURE)).encode())
    await fake.wait_entered()
    (task,) = server.connections
    await leaving.close()
    await asyncio.sleep(0.05)  # the wire notices the close while the first call still runs
    fake.gate.set()
    await asyncio.wait({task}, timeout=5)
    await eventually(lambda: server.service.admission.in_progress == 0)
    assert ids(fake) == [["unsure#o0"]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            shared(decision("two", (0.0, 1.0))),
            "workload 'triage' has no threshold for 2 options (decision 'two'), which orderings "
            '"adaptive" needs beside the prior; it has thresholds for: 3',
        ),
        (
            {**shared(UNSURE), "workload": None},
            "decision 'unsure' has orderings \"adaptive\" over 3 options, which needs a workload "
            "naming the prior; the request names no workload",
        ),
        (
            shared(*[{**UNSURE, "id": f"u{k}"} for k in range(6)]),
            "the request expands to 18 rows; at most 16 are allowed",
        ),
    ],
    ids=["prior-without-threshold", "no-workload", "worst-case-over-the-cap"],
)
async def test_a_refused_adaptive_request_never_reaches_the_scorer(
    start_server, fake, body: dict[str, Any], message: str
) -> None:
    server = await served(start_server, fake, max_decisions=16)
    refused = await request(server.port, "POST", "/decide/shared", body)
    assert refused.status == 422 and refused.json["error"]["message"] == message
    assert fake.calls == []


async def test_metrics_and_the_access_log_count_the_rows_scored(start_server, fake, caplog) -> None:
    caplog.set_level(logging.INFO, "semif_serve.access")
    server = await served(start_server, fake, metrics=True, access_log=True)
    before = await scrape(server.port)
    assert (
        await request(server.port, "POST", "/decide/shared", shared(UNSURE, SURE, SPLIT))
    ).status == 200
    after = await scrape(server.port)
    scored = 3 + 2 + 1  # one row each, the two unsure decisions' half turns, then split's rest
    assert (
        value(after, "semif_rows_scored_total") - value(before, "semif_rows_scored_total") == scored
    )
    assert value(after, "semif_escalations_total", workload="triage") == 2
    calls = (
        "semif_scorer_call_duration_seconds_count"  # every call a shared one, observed as it ends
    )
    assert value(after, calls, kind="shared") - value(before, calls, kind="shared") == 3
    assert value(after, "semif_decisions_total", method="adaptive") == 3
    (line,) = [
        r.fields
        for r in caplog.records
        if r.name.endswith("access") and r.fields["path"] == "/decide/shared"
    ]
    assert line["rows"] == scored


async def test_the_wait_budget_counts_an_adaptive_decision_at_its_worst_case(
    start_server, fake
) -> None:
    server = await served(start_server, fake, max_wait_s=60.0)
    fake.gate = threading.Event()
    pending = asyncio.ensure_future(
        request(server.port, "POST", "/decide/shared", shared(SURE, UNSURE))
    )
    await fake.wait_entered()
    assert server.engine.ahead("-").total() == 6  # two decisions of three rows each
    fake.gate.set()
    assert (await pending).status == 200
    assert not server.engine.ahead("-")


async def test_the_wait_budget_counts_the_rows_a_later_call_may_add(start_server, fake) -> None:
    server = await served(start_server, fake, max_wait_s=60.0)
    inside, held = threading.Event(), threading.Event()

    def holding(row: dict[str, Any]) -> list[float]:
        if row["id"] == "split#o1":  # the second call, held on the engine thread
            inside.set()
            held.wait(10)
        return logits(row)

    fake.logits = holding
    pending = asyncio.ensure_future(request(server.port, "POST", "/decide/shared", shared(SPLIT)))
    assert await asyncio.get_running_loop().run_in_executor(None, inside.wait, 5)
    assert server.engine.ahead("-").total() == 1 + 1  # the half turn, and the rest it may add
    held.set()
    assert (await pending).status == 200
    assert not server.engine.ahead("-")


async def test_the_second_call_is_its_callers_follow_up(start_server, fake, tmp_path) -> None:
    """It goes ahead of its caller's later request, and still waits for another caller's turn."""
    tokens = {"alice": "alice-" + "a" * 32, "bob": "bob-" + "b" * 32}
    path = tmp_path / "tokens"
    path.write_text("".join(f"{name} {token}\n" for name, token in tokens.items()))
    path.chmod(0o600)
    server = await served(start_server, fake, api_tokens_file=str(path), api_token="")
    turns = server.engine.dispatcher

    def send(caller: str, item: dict[str, Any]) -> asyncio.Future[Any]:
        bearer = [(b"authorization", f"Bearer {tokens[caller]}".encode())]
        return asyncio.ensure_future(
            request(server.port, "POST", "/decide/shared", shared(item), bearer)
        )

    fake.gate = threading.Event()
    first = send("alice", UNSURE)
    await fake.wait_entered()
    later = send("alice", decision("later", (0.0, 0.0, 4.0)))
    await eventually(lambda: turns.depths().get("alice") == 1)
    other = send("bob", decision("other", (0.0, 0.0, 4.0)))
    await eventually(lambda: turns.depths().get("bob") == 1)
    # Each call now takes 1 s, so bob's turn outlasts the loop's reading of alice's first answer: the
    # follow-up is queued while alice's later request still waits, the case this test is about (the
    # worker takes its next call as one returns, so a follow-up not yet queued cannot be waited for).
    fake.delay = 1.0
    fake.gate.set()
    assert [r.status for r in await asyncio.gather(first, later, other)] == [200] * 3
    assert ids(fake) == [["unsure#o0"], ["other#o0"], ["unsure#o1"], ["later#o0"]]


def choice(values: tuple[float, ...]) -> dict[str, Any]:
    return {
        "type": "choice",
        "instructions": "Which?",
        "criteria": {f"c{i}": str(v) for i, v in enumerate(values)},
    }


async def test_system_one_answers_from_the_adaptive_view(start_server, fake) -> None:
    server = await served(start_server, fake)
    shared_call = fake.score_shared
    fake.score_shared = lambda rows: (shared_call(rows)[0], {"prefix_tokens": 5})
    body = {
        "model": "jev-latest",
        "state": "s",
        "questions": {
            "sure": choice((0.0, 0.0, 4.0)),
            "unsure": choice((1.0, 1.2, 0.0)),
            "split": choice((1.2, 1.0, 0.0)),
        },
        "semif": {"orderings": "adaptive", "workload": "triage"},
    }
    answered = await request(server.port, "POST", "/v1/systemone", body)
    assert answered.status == 200
    assert ids(fake) == [
        ["sure#o0", "unsure#o0", "split#o0"],
        ["unsure#o1", "split#o1"],
        ["split#o2"],
    ]
    answers = answered.json["answers"]
    for key, escalated, method in (
        ("sure", False, "prior"),
        ("unsure", True, "prior"),
        ("split", True, "rotations"),
    ):
        combined = answers[key]["semif"]["combined"]
        assert (combined["escalated"], combined["calibrated"]["method"]) == (escalated, method)
        calibrated = combined["calibrated"]["probabilities"]
        assert list(answers[key]["probabilities"].values()) == calibrated
    # Each call prefills the state once: 17 a row, less the 5 prefix tokens of every row but one.
    tokens = sum(rows * 17 - 5 * (rows - 1) for rows in (3, 2, 1))
    assert answered.json["usage"] == {"input_tokens": tokens, "output_tokens": 0}


@pytest.mark.parametrize(
    "mangle", [lambda results: results[:-1], lambda results: [None] * len(results)]
)
async def test_a_broken_first_answer_is_the_logged_500_and_no_second_call(
    start_server, fake, caplog, mangle: Any
) -> None:
    server = await served(start_server, fake)
    original = fake.score_shared
    fake.score_shared = lambda rows: (mangle(original(rows)[0]), {})
    refused = await request(server.port, "POST", "/decide/shared", shared(UNSURE, SURE))
    assert refused.status == 500 and refused.json["error"] == {
        "code": "scoring_failed",
        "message": "failed to build the response",
        "type": "api_error",
    }
    assert ids(fake) == [["unsure#o0", "sure#o0"]]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage() == "failed to build a response from a scorer result"
