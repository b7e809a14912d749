"""The dispatcher's order (engine/dispatcher.py), in process: `Turns` alone (round-robin over callers, a
follow-up ahead of its caller's later calls, background work last, what runs before a new call), then
the Engine over a gated fake scorer (a follow-up and background work through the real worker, a drain,
a close). The same order on a real socket is tests/service/test_turns_http.py."""

from __future__ import annotations

import asyncio
import threading

import pytest

from semif_serve.engine.dispatcher import Call, Turns
from semif_serve.engine.worker import Engine
from tests.request_bodies import ROW


def named(turns: Turns, *calls: Call) -> None:
    for call in calls:
        turns.put(call)


def drained(turns: Turns) -> list[str]:
    """Take every call in turn, naming each `caller:rows` (background as `bg:rows`)."""
    order = []
    while (call := turns.take()) is not None:
        order.append(f"{'bg' if call.background else call.caller}:{call.rows}")
    return order


def test_callers_take_turns_one_call_each_in_the_order_they_came() -> None:
    turns = Turns()
    named(turns, *(Call("alice", "direct", n) for n in (1, 2, 3)))
    named(turns, Call("bob", "direct", 1), Call("bob", "direct", 2))
    named(turns, Call("carol", "shared", 1))
    assert drained(turns) == ["alice:1", "bob:1", "carol:1", "alice:2", "bob:2", "alice:3"]


def test_one_caller_alone_is_served_first_come_first_served() -> None:
    turns = Turns()
    named(turns, *(Call("alice", "direct", n) for n in range(1, 6)))
    assert drained(turns) == [f"alice:{n}" for n in range(1, 6)]


def test_a_caller_that_comes_while_another_runs_goes_before_that_callers_next_call() -> None:
    """The running caller is last in the round: bob, come while alice's first call runs, is next."""
    turns = Turns()
    named(turns, Call("alice", "direct", 1))
    assert turns.take() is not None  # alice's first runs
    named(turns, Call("alice", "direct", 2), Call("alice", "direct", 3))
    named(turns, Call("bob", "direct", 1))
    assert drained(turns) == ["bob:1", "alice:2", "alice:3"]


def test_a_follow_up_goes_ahead_of_its_callers_later_calls_not_of_another_callers_turn() -> None:
    turns = Turns()
    named(turns, Call("alice", "direct", 1))
    assert turns.take() is not None
    named(turns, Call("alice", "direct", 2), Call("bob", "direct", 1))
    named(
        turns,
        Call("alice", "shared", 7, follow_up=True),
        Call("alice", "shared", 8, follow_up=True),
    )
    # bob's turn first; then alice's follow-ups in the order they came, then her later call.
    assert drained(turns) == ["bob:1", "alice:7", "alice:8", "alice:2"]


def test_background_work_runs_only_when_no_callers_call_waits_and_not_while_draining() -> None:
    turns = Turns()
    named(turns, Call("bg", "shared", 4, background=True), Call("alice", "direct", 1))
    named(turns, Call("bg", "shared", 5, background=True), Call("bob", "direct", 1))
    assert drained(turns) == ["alice:1", "bob:1", "bg:4", "bg:5"]
    named(turns, Call("bg", "shared", 6, background=True), Call("alice", "direct", 2))
    turns.draining = True
    assert drained(turns) == ["alice:2"] and len(turns.background) == 1


def test_a_withdrawn_call_never_runs_and_its_caller_leaves_the_round_when_it_had_no_other() -> None:
    turns = Turns()
    left = Call("bob", "direct", 9)
    background = Call("bg", "shared", 3, background=True)
    named(turns, Call("alice", "direct", 1), left, Call("alice", "direct", 2), background)
    turns.withdraw(left)
    turns.withdraw(background)
    assert drained(turns) == ["alice:1", "alice:2"]
    assert turns.depths() == {
        "alice": 0,
        "bob": 0,
    }  # every caller that queued keeps its gauge, at 0


def test_ahead_counts_the_running_call_its_own_queue_and_of_each_other_at_most_its_turns() -> None:
    turns = Turns()
    assert turns.ahead("alice") == {}
    named(turns, Call("bulk", "direct", 1))
    assert turns.take() is not None  # bulk's first call runs: 1 row
    named(turns, *(Call("bulk", "direct", 1) for _ in range(6)))
    assert turns.ahead("alice") == {"direct": 1 + 1}  # the running one, then one of bulk's
    assert turns.ahead("bulk") == {"direct": 1 + 6}
    named(turns, Call("alice", "shared", 10), Call("alice", "shared", 20))
    # Alice's third call waits three turns: her two queued, then her own; bulk gets one call each.
    assert turns.ahead("alice") == {"direct": 1 + 3, "shared": 30}
    assert turns.ahead("bulk") == {
        "direct": 1 + 6,
        "shared": 30,
    }  # alice's two, fewer than bulk's 7 turns
    assert turns.ahead("carol") == {"direct": 1 + 1, "shared": 10}
    # The bound holds: alice's third call really has that many rows before it.
    named(turns, Call("alice", "shared", 1))
    order = drained(turns)
    assert sum(int(name.split(":")[1]) for name in order[: order.index("alice:1")]) <= 1 + 3 + 30


def test_a_running_background_call_counts_and_a_queued_one_does_not() -> None:
    turns = Turns()
    named(turns, Call("bg", "shared", 8, background=True))
    assert turns.take() is not None
    named(turns, Call("bg", "shared", 5, background=True))
    assert turns.ahead("alice") == {"shared": 8}


# -- through the Engine's one worker ------------------------------------------------------------


async def test_a_follow_up_through_the_engine_goes_ahead_of_its_callers_later_calls(fake) -> None:
    engine = Engine(fake)
    fake.gate = threading.Event()
    try:
        first = asyncio.ensure_future(engine.score({**ROW, "id": "a1"}, caller="alice"))
        await fake.wait_entered()
        later = asyncio.ensure_future(engine.score({**ROW, "id": "a2"}, caller="alice"))
        other = asyncio.ensure_future(engine.score({**ROW, "id": "b1"}, caller="bob"))
        await asyncio.sleep(0)
        follow_up = asyncio.ensure_future(
            engine.score_shared([{**ROW, "id": "a1-rest"}], caller="alice", follow_up=True)
        )
        await asyncio.sleep(0)
        assert engine.dispatcher.depths() == {"alice": 2, "bob": 1}
        fake.gate.set()
        await asyncio.gather(first, later, other, follow_up)
    finally:
        engine.close()
    ids = [row["id"] if kind == "direct" else row[0]["id"] for kind, row in fake.calls]
    assert ids == ["a1", "b1", "a1-rest", "a2"]


async def test_background_work_through_the_engine_waits_for_callers_then_runs(fake) -> None:
    engine = Engine(fake)
    fake.gate = threading.Event()
    try:
        held = asyncio.ensure_future(engine.score_shared_background([{**ROW, "id": "bg1"}]))
        await fake.wait_entered()  # started on an idle engine: it holds the worker
        background = asyncio.ensure_future(engine.score_shared_background([{**ROW, "id": "bg2"}]))
        await asyncio.sleep(0)
        caller = asyncio.ensure_future(engine.score({**ROW, "id": "a1"}, caller="alice"))
        await asyncio.sleep(0)
        assert engine.dispatcher.background_depth() == 1
        fake.gate.set()
        results, _ = await background
        assert [result["id"] for result in results] == ["bg2"]
        await asyncio.gather(held, caller)
    finally:
        engine.close()
    ids = [row["id"] if kind == "direct" else row[0]["id"] for kind, row in fake.calls]
    assert ids == ["bg1", "a1", "bg2"]  # the running one delayed alice by itself alone


async def test_a_drain_drops_queued_background_work_and_refuses_more_while_callers_finish(
    fake,
) -> None:
    engine = Engine(fake)
    fake.gate = threading.Event()
    try:
        running = asyncio.ensure_future(engine.score({**ROW, "id": "a1"}, caller="alice"))
        await fake.wait_entered()
        queued = asyncio.ensure_future(engine.score({**ROW, "id": "a2"}, caller="alice"))
        background = asyncio.ensure_future(engine.score_shared_background([{**ROW, "id": "bg"}]))
        await asyncio.sleep(0)
        engine.drain()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(background, 5)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(engine.score_shared_background([{**ROW, "id": "bg-late"}]), 5)
        fake.gate.set()
        assert [(await each)["id"] for each in (running, queued)] == ["a1", "a2"]
    finally:
        engine.close()
    assert [row["id"] for _, row in fake.calls] == ["a1", "a2"]


async def test_a_queued_background_call_whose_awaiter_left_never_runs(fake) -> None:
    engine = Engine(fake)
    fake.gate = threading.Event()
    try:
        running = asyncio.ensure_future(engine.score({**ROW, "id": "a1"}, caller="alice"))
        await fake.wait_entered()
        background = asyncio.ensure_future(engine.score_shared_background([{**ROW, "id": "bg"}]))
        await asyncio.sleep(0)
        background.cancel()
        with pytest.raises(asyncio.CancelledError):
            await background
        assert not engine.dispatcher.background_depth()
        fake.gate.set()
        await running
        await engine.score({**ROW, "id": "a2"}, caller="alice")
    finally:
        engine.close()
    assert [row["id"] for _, row in fake.calls] == ["a1", "a2"]
