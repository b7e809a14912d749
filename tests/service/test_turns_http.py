"""A turn each at the engine, on a real socket: named callers (SEMIF_API_TOKENS_FILE) over the stub with
a per-call delay, whose first call is held until every request is queued. Two and three callers
alternate, one caller alone is served as before, a client that left is never scored, background work
waits for callers' calls, a drain drops it, a caller removed by a reload keeps its queued calls, the
queues' depths are gauges, and the wait budget's estimate and a count refusal's Retry-After follow
the order. The order alone, in
process, is tests/engine/test_dispatcher.py."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from semif_serve.engine.stub import StubScorer
from tests.fakes import settings
from tests.metrics_samples import sample, scrape
from tests.request_bodies import ROW, SHARED
from tests.timing import timeless
from tests.wire_client import Connection, eventually, request

TOKENS = {name: f"{name}-" + name[0] * 32 for name in ("alice", "bob", "carol")}
DELAY_MS = 50  # the stub's delay per call, once the held call is let go


class Held(StubScorer):
    """The stub (a fixed delay per call) recording the ids it scores in order; while `gate` is clear,
    the call inside waits for it, holding the worker."""

    def __init__(self, delay_ms: int = DELAY_MS) -> None:
        super().__init__(settings(stub_delay_ms=delay_ms))
        self.order: list[str] = []
        self.gate = threading.Event()

    def _hold(self, first_id: str) -> None:
        self.order.append(first_id)
        self.gate.wait(10)

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        self._hold(row["id"])
        return super().score(row)

    def score_shared(self, rows: list[dict[str, Any]]) -> Any:
        self._hold(rows[0]["id"])
        return super().score_shared(rows)


def tokens_file(tmp_path: Path, names: tuple[str, ...] = tuple(TOKENS)) -> str:
    path = tmp_path / "tokens"
    path.write_text("".join(f"{name} {TOKENS[name]}\n" for name in names))
    path.chmod(0o600)
    return str(path)


async def serve(start_server: Any, tmp_path: Path, scorer: Held, **overrides: Any) -> Any:
    return await start_server(
        scorer, api_tokens_file=tokens_file(tmp_path), api_token="", **overrides
    )


def send(server: Any, caller: str, row_id: str) -> asyncio.Future[Any]:
    """/decide with one row; an id ending in `s` is a one-decision /decide/shared instead."""
    headers = [(b"authorization", f"Bearer {TOKENS[caller]}".encode())]
    path, body = (
        ("/decide/shared", {**SHARED, "decisions": [{**SHARED["decisions"][0], "id": row_id}]})
        if row_id.endswith("s")
        else ("/decide", {**ROW, "id": row_id})
    )
    return asyncio.ensure_future(request(server.port, "POST", path, body, headers, timeout=30))


async def queue(server: Any, scorer: Held, caller: str, row_id: str) -> asyncio.Future[Any]:
    """Send one request and wait until its call holds the worker or waits in its caller's queue."""
    turns = server.engine.dispatcher
    before = turns.depths().get(caller, 0)
    sent = send(server, caller, row_id)
    await eventually(
        lambda: row_id in scorer.order or turns.depths().get(caller, 0) == before + 1, 10.0
    )
    return sent


async def background_queued(server: Any, row_id: str) -> asyncio.Future[Any]:
    """Background work over one row, once it waits in the background queue."""
    work = asyncio.ensure_future(server.engine.score_shared_background([{**ROW, "id": row_id}]))
    await eventually(lambda: server.engine.dispatcher.background_depth() == 1)
    return work


async def queued_in_turn(
    start_server: Any, tmp_path: Path, arrivals: list[tuple[str, str]]
) -> list[str]:
    """The first arrival holds the worker while the rest queue, one at a time; then the order scored."""
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    sent = [await queue(server, scorer, caller, row_id) for caller, row_id in arrivals]
    scorer.gate.set()
    assert [response.status for response in await asyncio.gather(*sent)] == [200] * len(sent)
    return scorer.order


async def test_two_callers_alternate(start_server, tmp_path: Path) -> None:
    """The reproduction: one caller's backlog no longer runs ahead of another's one call. Bob's calls are
    shared ones (`s`): both kinds take their caller's turn."""
    order = await queued_in_turn(
        start_server,
        tmp_path,
        [("alice", "a1"), ("alice", "a2"), ("alice", "a3"), ("alice", "a4"), ("bob", "b1s")]
        + [("bob", "b2s"), ("bob", "b3s")],
    )
    assert order == ["a1", "b1s", "a2", "b2s", "a3", "b3s", "a4"]


async def test_three_callers_take_one_call_each_in_turn(start_server, tmp_path: Path) -> None:
    order = await queued_in_turn(
        start_server,
        tmp_path,
        [("alice", "a1"), ("alice", "a2"), ("alice", "a3"), ("bob", "b1"), ("bob", "b2")]
        + [("carol", "c1"), ("carol", "c2"), ("carol", "c3")],
    )
    assert order == ["a1", "b1", "c1", "a2", "b2", "c2", "a3", "c3"]


async def test_one_caller_alone_is_served_in_its_order_with_the_same_answers(
    start_server, tmp_path: Path
) -> None:
    """Queued behind its own first call or sent one at a time, the same order and the same bytes."""
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    ids = [f"a{n}" for n in range(1, 6)]
    sent = [await queue(server, scorer, "alice", row_id) for row_id in ids]
    scorer.gate.set()
    queued = [response.json for response in await asyncio.gather(*sent)]
    assert scorer.order == ids
    alone = [(await send(server, "alice", row_id)).json for row_id in ids]
    assert timeless(queued) == timeless(alone)


async def test_a_client_that_left_while_queued_is_never_scored_and_the_turns_go_on(
    start_server, tmp_path: Path
) -> None:
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    first = await queue(server, scorer, "alice", "a1")
    leaving = await Connection.open(server.port)
    leaving.send_request(
        "POST",
        "/decide",
        json.dumps({**ROW, "id": "a2"}).encode(),
        [(b"authorization", f"Bearer {TOKENS['alice']}".encode())],
    )
    turns = server.engine.dispatcher
    await eventually(lambda: turns.depths().get("alice") == 1, 10.0)
    others = [await queue(server, scorer, "bob", "b1"), await queue(server, scorer, "alice", "a3")]
    await leaving.close()
    await eventually(lambda: (turns.depths()["alice"], turns.depths()["bob"]) == (1, 1), 10.0)
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(first, *others)] == [200, 200, 200]
    assert scorer.order == ["a1", "b1", "a3"]
    assert server.service.admission.in_progress == 0


async def test_background_work_waits_while_a_callers_call_is_queued_and_runs_when_none_is(
    start_server, tmp_path: Path
) -> None:
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    first = await queue(server, scorer, "alice", "a1")
    background = await background_queued(server, "bg1")
    later = [await queue(server, scorer, "bob", "b1"), await queue(server, scorer, "alice", "a2")]
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(first, *later)] == [200] * 3
    results, _ = await background
    assert [result["id"] for result in results] == ["bg1"]
    assert scorer.order == ["a1", "b1", "a2", "bg1"]
    # On an idle engine it runs at once; started, it delays a caller's call by itself alone.
    scorer.gate.clear()
    idle = asyncio.ensure_future(server.engine.score_shared_background([{**ROW, "id": "bg2"}]))
    await eventually(lambda: "bg2" in scorer.order, 10.0)
    behind = [await queue(server, scorer, "alice", "a3"), await queue(server, scorer, "bob", "b2")]
    scorer.gate.set()
    await idle
    assert [r.status for r in await asyncio.gather(*behind)] == [200, 200]
    assert scorer.order[4:] == ["bg2", "a3", "b2"]


async def test_a_drain_drops_background_work_and_lets_callers_queued_calls_finish(
    start_server, tmp_path: Path
) -> None:
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    sent = [await queue(server, scorer, "alice", "a1"), await queue(server, scorer, "bob", "b1")]
    background = await background_queued(server, "bg")
    shutdown = asyncio.ensure_future(server.shutdown())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(background, 10)
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(*sent)] == [200, 200]
    await asyncio.wait_for(shutdown, 30)
    assert scorer.order == ["a1", "b1"]


async def test_a_caller_removed_by_a_reload_keeps_its_queued_calls(
    start_server, tmp_path: Path
) -> None:
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    sent = [await queue(server, scorer, "bob", "b1"), await queue(server, scorer, "alice", "a1")]
    sent.append(await queue(server, scorer, "alice", "a2"))
    tokens_file(tmp_path, ("bob", "carol"))
    server.reload()
    assert (await send(server, "alice", "a3")).status == 401  # removed: no new request
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(*sent)] == [200] * 3
    assert scorer.order == ["b1", "a1", "a2"]


async def test_the_queues_depths_are_gauges_and_name_a_caller_only_once_it_queued(
    start_server, tmp_path: Path
) -> None:
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer)
    before = (await request(server.port, "GET", "/metrics")).body.decode()
    assert "semif_engine_queued_calls{" in before and 'caller="alice"' not in before
    sent = [await queue(server, scorer, "alice", f"a{n}") for n in (1, 2, 3)]
    sent.append(await queue(server, scorer, "bob", "b1"))
    background = await background_queued(server, "bg")
    during = await scrape(server.port)
    assert [
        sample(during, "semif_engine_queued_calls", caller=name) for name in ("alice", "bob")
    ] == [2, 1]  # alice's first call runs: not queued
    assert sample(during, "semif_engine_background_queued_calls") == 1
    scorer.gate.set()
    await asyncio.gather(*sent, background)
    after = await scrape(server.port)
    assert [
        sample(after, "semif_engine_queued_calls", caller=name) for name in ("alice", "bob")
    ] == [0, 0]
    assert sample(after, "semif_engine_background_queued_calls") == 0


# -- the estimates follow the order ---------------------------------------------------------------


async def test_the_wait_budgets_estimate_counts_the_rows_before_this_callers_call(
    start_server, tmp_path: Path
) -> None:
    """With 0.5 s a row and a 1.9 s budget: alice's fifth call (4 rows before it) is refused, while bob,
    whose call waits one turn of hers, is admitted (2 rows before it); bob's second waits two."""
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer, max_wait_s=1.9)
    server.recent.observe("direct", 1, 0.5)
    admitted = [await queue(server, scorer, "alice", f"a{n}") for n in range(1, 5)]
    refused = await send(server, "alice", "a5")
    admitted.append(await queue(server, scorer, "bob", "b1"))
    bob_refused = await send(server, "bob", "b2")
    for response in (refused, bob_refused):
        assert (response.status, response.json["error"]["message"]) == (
            429,
            "estimated wait 2.00 s (4 rows ahead) exceeds the SEMIF_MAX_WAIT_S budget of 1.9 s; "
            "retry later",
        )
        assert response.headers[b"retry-after"] == b"2"
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(*admitted)] == [200] * 5
    assert scorer.order == ["a1", "b1", "a2", "a3", "a4"]


async def test_a_count_refusals_retry_after_is_the_refused_callers_wait_in_turn(
    start_server, tmp_path: Path
) -> None:
    """At 0.5 s a row: alice, over her share with six in, hears 3 s (her five queued behind the one
    running); bob, refused by the full queue with one in, hears 2 s (the running call, his own, two of
    alice's), not the queue's length in calls."""
    scorer = Held()
    server = await serve(start_server, tmp_path, scorer, max_queue=7, max_queue_per_caller=6)
    server.recent.observe("direct", 1, 0.5)
    sent = [await queue(server, scorer, "alice", f"a{n}") for n in range(1, 7)]
    alice = await send(server, "alice", "a7")
    sent.append(await queue(server, scorer, "bob", "b1"))
    bob = await send(server, "bob", "b2")
    assert "its share" in alice.json["error"]["message"]
    assert "7 requests already in progress" in bob.json["error"]["message"]
    assert (alice.headers[b"retry-after"], bob.headers[b"retry-after"]) == (b"3", b"2")
    metrics = await scrape(server.port)
    assert sample(metrics, "semif_busy_refusals_total", reason="caller") == 1
    scorer.gate.set()
    assert [r.status for r in await asyncio.gather(*sent)] == [200] * 7
