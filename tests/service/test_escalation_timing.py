"""The access log's one record of an adaptive request's calls (service/escalation.py `timing`): rows,
time queued and time scoring summed over every call, the first call's kind, the last call's outcome."""

from __future__ import annotations

from semif_serve.engine.worker import CallTiming
from semif_serve.service.escalation import Calls, FollowUp, timing


def later(call: CallTiming) -> FollowUp:
    return FollowUp([], None, call)


FIRST = CallTiming("shared", 3, submitted=10.0, started=10.5, ended=12.0)  # 0.5 queued, 1.5 scoring


def test_every_calls_rows_and_seconds_are_summed_from_the_first_submission() -> None:
    second = CallTiming("shared", 2, submitted=12.1, started=13.1, ended=15.1)  # 1.0, 2.0
    third = CallTiming("shared", 1, submitted=15.2, started=15.45, ended=19.45, outcome="failed")
    summed = timing(FIRST, Calls([], None, None, (later(second), later(third))))
    assert (summed.kind, summed.rows, summed.submitted, summed.outcome) == (
        "shared",
        3 + 2 + 1,
        10.0,
        "failed",  # the last call's: a later call's failure is the request's
    )
    assert summed.queued is not None and abs(summed.queued - (0.5 + 1.0 + 0.25)) < 1e-9
    assert summed.scoring is not None and abs(summed.scoring - (1.5 + 2.0 + 4.0)) < 1e-9


def test_a_later_call_that_never_started_adds_its_rows_and_no_time() -> None:
    never = CallTiming("shared", 2, submitted=12.1, outcome="failed")
    summed = timing(FIRST, Calls([], None, None, (later(never),)))
    assert (summed.rows, summed.queued, summed.scoring) == (5, 0.5, 1.5)


def test_one_call_or_a_first_call_that_never_ran_is_the_first_calls_record() -> None:
    assert timing(FIRST, Calls([], None)) is FIRST
    unstarted = CallTiming("shared", 3, submitted=10.0)
    second = CallTiming("shared", 2, submitted=12.1, started=13.1, ended=15.1)
    assert timing(unstarted, Calls([], None, None, (later(second),))) is unstarted
    unended = CallTiming("shared", 3, submitted=10.0, started=10.5)
    assert timing(unended, Calls([], None, None, (later(second),))) is unended
