"""What the engine reports to the operations layer about each scorer call (engine.CallTiming).

Observers (metrics, access log) read `kind`, `rows` and `outcome` off the CallTiming
the engine fills; these tests pin each field for load, direct and shared calls and
each failure class, in process, with the fake scorer behind the real Engine.
"""

from __future__ import annotations

from typing import Any

import pytest

from semif_serve.engine.scorer import OutOfMemory
from semif_serve.engine.worker import CallTiming, Engine
from tests.request_bodies import ROW


async def observed(fake: Any, call: str, *args: Any) -> CallTiming:
    """Run one engine call and return the one CallTiming its observers saw."""
    seen: list[CallTiming] = []
    engine = Engine(fake)
    engine.observers.append(seen.append)
    try:
        try:
            await getattr(engine, call)(*args)
        except Exception:  # the failure tests read the outcome, the error is pinned elsewhere
            pass
    finally:
        engine.close()
    assert len(seen) == 1
    timing = seen[0]
    assert timing.started is not None and timing.ended is not None
    assert timing.submitted <= timing.started <= timing.ended
    return timing


@pytest.mark.parametrize(
    "call,args,kind,rows",
    [
        ("start", (), "load", 0),
        ("score", (ROW,), "direct", 1),
        ("score_shared", ([ROW, ROW, ROW],), "shared", 3),
    ],
    ids=["load", "direct", "shared"],
)
async def test_each_call_reports_its_kind_rows_and_ok(
    fake, call: str, args: tuple, kind: str, rows: int
) -> None:
    timing = await observed(fake, call, *args)
    assert (timing.kind, timing.rows, timing.outcome) == (kind, rows, "ok")


@pytest.mark.parametrize(
    "error,outcome",
    [
        (ValueError("too long"), "refused"),
        (OutOfMemory("no room"), "out_of_memory"),
        (RuntimeError("broken"), "failed"),
    ],
    ids=["refused", "out_of_memory", "failed"],
)
@pytest.mark.parametrize(
    "call,args", [("score", (ROW,)), ("score_shared", ([ROW],))], ids=["direct", "shared"]
)
async def test_a_failed_call_reports_its_class(
    fake, call: str, args: tuple, error: Exception, outcome: str
) -> None:
    fake.raise_ = error
    timing = await observed(fake, call, *args)
    assert timing.outcome == outcome


async def test_a_timing_the_caller_passes_is_the_one_filled(fake) -> None:
    mine = CallTiming("shared", 7)
    engine = Engine(fake)
    try:
        await engine.score_shared([ROW], mine)
    finally:
        engine.close()
    assert (mine.kind, mine.rows, mine.outcome) == ("shared", 7, "ok") and mine.ended is not None
