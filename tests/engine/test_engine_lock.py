"""The engine (INV-2): two scorer calls never overlap inside the scorer, whoever submits them.

One engine's single worker thread serialises its own calls anyway, so that alone
would pass with the process-wide lock removed. Here two engines, each with its own
worker thread, drive one scorer at once: only `engine.SCORER_LOCK` keeps them apart.
The rest drives one Engine directly: submission order, callers that leave while
queued or while scoring, and close().
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from semif_serve.engine.worker import SCORER_LOCK, Engine
from tests.request_bodies import ROW


class OverlapProbe:
    """A scorer whose first call waits up to `patience` seconds for a second call to arrive inside it."""

    def __init__(self, patience: float = 1.0) -> None:
        self.patience = patience
        self._count = threading.Lock()
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.threads: set[int] = set()
        self.overlapped = threading.Event()

    def _call(self, row: dict[str, Any]) -> dict[str, Any]:
        with self._count:
            self.calls += 1
            first = self.calls == 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.get_ident())
            if self.active > 1:
                self.overlapped.set()
        try:
            if first:  # with the lock the second call cannot arrive, so this waits the full second
                self.overlapped.wait(self.patience)
            return {"id": row["id"]}
        finally:
            with self._count:
                self.active -= 1

    def load(self) -> None:
        pass

    def score(self, row: dict[str, Any]) -> dict[str, Any]:
        return self._call(row)

    def score_shared(
        self, rows: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return [self._call(row) for row in rows], {}

    def health(self) -> dict[str, Any]:
        return {}


async def test_two_engine_threads_never_overlap_inside_the_scorer() -> None:
    probe = OverlapProbe()
    engines = [Engine(probe), Engine(probe)]
    try:
        results = await asyncio.gather(engines[0].score(ROW), engines[1].score_shared([ROW]))
    finally:
        for engine in engines:
            engine.close()
    assert results == [{"id": "r1"}, ([{"id": "r1"}], {})]
    assert len(probe.threads) == 2  # two submitting threads really were involved
    assert probe.max_active == 1 and not probe.overlapped.is_set()


async def test_a_lock_held_outside_the_engine_keeps_the_engine_out() -> None:
    """Any code in the process that holds SCORER_LOCK excludes the engine's calls until it lets go."""
    probe = OverlapProbe(patience=0.0)
    engine = Engine(probe)
    try:
        assert SCORER_LOCK.acquire(timeout=5)
        try:
            pending = asyncio.ensure_future(engine.score(ROW))
            await asyncio.sleep(0.5)
            assert probe.calls == 0 and not pending.done()
        finally:
            SCORER_LOCK.release()
        assert await asyncio.wait_for(pending, 5) == {"id": "r1"}
    finally:
        engine.close()


# -- the one worker thread: queueing, callers that leave, close -------------------------------


async def test_calls_run_on_one_named_worker_thread_in_submission_order(fake) -> None:
    names: list[str] = []
    fake.logits = lambda row: names.append(threading.current_thread().name) or [1.0, 0.0]
    engine = Engine(fake)
    try:
        fake.gate = threading.Event()
        calls = [asyncio.ensure_future(engine.score({**ROW, "id": f"r{i}"})) for i in range(3)]
        await fake.wait_entered()
        fake.gate.set()
        await asyncio.gather(*calls)
    finally:
        engine.close()
    assert [row["id"] for _, row in fake.calls] == ["r0", "r1", "r2"] and fake.max_active == 1
    assert len(set(names)) == 1 and names[0].startswith("semif-engine")


async def test_a_queued_call_whose_caller_left_never_reaches_the_scorer(fake) -> None:
    engine = Engine(fake)
    try:
        fake.gate = threading.Event()
        running = asyncio.ensure_future(engine.score({**ROW, "id": "running"}))
        await fake.wait_entered()
        queued = asyncio.ensure_future(engine.score({**ROW, "id": "queued"}))
        await asyncio.sleep(0)  # submitted to the executor
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        fake.gate.set()
        assert (await running)["id"] == "running"
        assert (await engine.score({**ROW, "id": "after"}))["id"] == "after"
    finally:
        engine.close()
    assert [row["id"] for _, row in fake.calls] == ["running", "after"]


@pytest.mark.parametrize("outcome", [None, RuntimeError("failed after its caller left")])
async def test_a_running_call_whose_caller_left_holds_the_caller_until_it_returns(
    fake, outcome
) -> None:
    engine = Engine(fake)
    try:
        fake.gate = threading.Event()
        fake.raise_ = outcome
        leaving = asyncio.ensure_future(engine.score(ROW))
        await fake.wait_entered()
        leaving.cancel()
        await asyncio.sleep(0.3)
        assert (
            not leaving.done()
        )  # cancelled, yet still waiting for the scorer to give the thread back
        fake.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await leaving
    finally:
        engine.close()
    # That the abandoned call's failure is read, not logged at garbage collection, is shown
    # through the server by test_overload's client-that-leaves-while-scoring test.


async def test_close_drops_queued_calls_without_waiting_for_the_running_one(fake) -> None:
    engine = Engine(fake)
    fake.gate = threading.Event()
    running = asyncio.ensure_future(engine.score({**ROW, "id": "running"}))
    await fake.wait_entered()
    queued = asyncio.ensure_future(engine.score({**ROW, "id": "queued"}))
    await asyncio.sleep(0)
    began = time.monotonic()
    engine.close()
    assert time.monotonic() - began < 5.0  # the running call holds the gate for up to 10 s
    fake.gate.set()
    assert (await running)["id"] == "running"
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert [row["id"] for _, row in fake.calls] == ["running"]
