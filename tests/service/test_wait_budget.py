"""The wait estimator and the budget check (SEMIF_MAX_WAIT_S), in process with a fake clock over the
engine's queues (`Turns`, filled by hand): the rows that run before a caller's call times the recent
per-row time of each kind, cold start admitting, a refusal that names the budget with the estimate as
its Retry-After, and the (predicted, actual) pairs the error histogram receives."""

from __future__ import annotations

import logging

import pytest

from semif_serve.engine.dispatcher import Call, Turns
from semif_serve.engine.recent import RecentCalls
from semif_serve.engine.worker import CallTiming, Engine
from semif_serve.http.exchange import retry_after
from semif_serve.service.body_pipeline import Pipeline, busy
from semif_serve.service.wait_budget import OverBudget, WaitBudget, WaitEstimator
from tests.fake_scorer import FakeScorer


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Queued(WaitEstimator):
    """An estimator over queues of its own: an admitted request's call joins them, as in the service."""

    def __init__(self, clock: Clock, recent: RecentCalls | None = None) -> None:
        self.turns = Turns()
        super().__init__(self.turns.ahead, clock, recent)

    def queue(self, kind: str, rows: int, caller: str = "-") -> None:
        self.turns.put(Call(caller, kind, rows))

    def rows_ahead(self) -> int:
        return self.turns.ahead("-").total()


def estimator(**per_row: float) -> tuple[Queued, Clock]:
    clock = Clock()
    made = Queued(clock)
    for kind, seconds in per_row.items():
        made.recent.observe(kind, 4, 4 * seconds)
    return made, clock


def admitted(budget: WaitBudget, kind: str, rows: int) -> None:
    """Admitted by the budget, then queued (what the service does next, in the same step)."""
    budget.admit(kind, rows, "-")
    assert isinstance(budget.estimator, Queued)
    budget.estimator.queue(kind, rows)


def test_per_row_time_is_recent_total_seconds_over_total_rows_of_its_kind() -> None:
    made, _ = estimator()
    assert made.recent.per_row("direct") is None and made.recent.per_row("shared") is None
    made.recent.observe("shared", 20, 1.0)
    made.recent.observe("shared", 1, 0.05)
    assert made.recent.per_row("shared") == pytest.approx(1.05 / 21)
    assert made.recent.per_row("direct") is None  # kinds never mix


def test_a_call_without_rows_or_of_an_unknown_kind_is_not_measured() -> None:
    made, _ = estimator()
    made.recent.observe(
        "direct", 0, 5.0
    )  # no rows: no per-row time to learn (and no division by 0)
    made.recent.observe("shared", -1, 5.0)
    made.recent.observe("neither", 3, 5.0)  # not a kind: ignored, not a KeyError
    assert made.recent.per_row("direct") is None and made.recent.per_row("shared") is None
    made.recent.observe("direct", 1, 0.25)
    made.recent.observe("direct", 0, 5.0)  # nor does it dilute a measured kind
    assert made.recent.per_row("direct") == 0.25


def test_the_window_keeps_only_recent_calls() -> None:
    made = Queued(Clock(), RecentCalls(window=2))
    for seconds in (9.0, 1.0, 1.0):
        made.recent.observe("direct", 1, seconds)
    assert made.recent.per_row("direct") == 1.0


def test_estimate_is_the_rows_ahead_times_each_kinds_per_row_time_never_its_own() -> None:
    made, _ = estimator(direct=0.3, shared=0.05)
    assert (
        made.estimate("direct", 1, "-").seconds == 0
    )  # nothing ahead: no wait, whatever its own cost
    assert made.estimate("shared", 64, "-").seconds == 0
    made.queue("shared", 21)
    made.queue("direct", 1)
    estimate = made.estimate("direct", 1, "-")
    assert estimate.rows_ahead == 22
    assert estimate.seconds == pytest.approx(21 * 0.05 + 0.3)
    assert made.estimate("shared", 21, "-").seconds == pytest.approx(21 * 0.05 + 0.3)


def test_an_idle_server_admits_a_request_that_alone_costs_more_than_the_budget() -> None:
    """The defect: one call over the budget once refused every request, even with nothing ahead."""
    made, _ = estimator(direct=1.5, shared=1.5)
    budget = WaitBudget(1.0, made)
    for kind in ("direct", "shared"):
        entered = budget.admit(kind, 64, "-")
        assert entered.estimate.seconds == 0
        made.leave(entered, None)
    assert budget.refused == 0


def test_cold_start_prices_an_unmeasured_kind_at_zero_so_it_is_admitted() -> None:
    made, _ = estimator(direct=0.3)
    budget = WaitBudget(1.0, made)
    admitted(
        budget, "shared", 64
    )  # no shared call measured yet: admitted, never priced as 64 direct rows
    admitted(budget, "shared", 64)
    assert made.rows_ahead() == 128 and budget.refused == 0
    made.recent.observe("shared", 64, 0.64)  # measured now: 128 ahead at 10 ms each
    with pytest.raises(OverBudget):
        budget.admit("shared", 1, "-")


def test_over_budget_is_busy_naming_the_budget_with_the_drain_of_the_rows_ahead_as_retry_after() -> (
    None
):
    made, _ = estimator(direct=0.4)
    budget = WaitBudget(2.0, made)
    for _ in range(6):
        admitted(budget, "direct", 1)  # the sixth: 5 ahead = 2.0 s, not over the budget
    with pytest.raises(OverBudget) as refused:
        budget.admit("direct", 1, "-")
    error = busy(refused.value)
    assert error.code == "busy" and error.status == 429
    assert error.message == (
        "estimated wait 2.40 s (6 rows ahead) exceeds the SEMIF_MAX_WAIT_S budget of 2 s; retry later"
    )
    assert error.headers == ((b"retry-after", b"3"),)
    assert made.rows_ahead() == 6 and budget.refused == 1  # the refused one never joined
    with pytest.raises(
        OverBudget
    ) as large:  # its own rows change neither the estimate nor Retry-After
        budget.admit("direct", 60, "-")
    assert busy(large.value).message == error.message and busy(large.value).headers == error.headers


def test_one_call_over_the_budget_is_told_once_per_crossing_and_held_for_the_gauge() -> None:
    made, _ = estimator()
    budget = WaitBudget(1.0, made)

    def observe(kind: str, rows: int, seconds: float) -> bool:
        made.recent.observe(kind, rows, seconds)
        return budget.crossed(kind)

    assert budget.over == {"direct": False, "shared": False}
    assert observe("direct", 1, 0.5) is False
    assert observe("direct", 1, 2.0) is True  # mean 1.25 s a call: over, said once
    assert observe("direct", 1, 1.5) is False and budget.over["direct"]
    assert budget.over["shared"] is False  # kinds apart
    assert observe("shared", 64, 1.0) is False  # 1.0 s is not over 1 s
    for _ in range(8):
        observe("direct", 1, 0.1)
    assert budget.over["direct"] is False  # back within: the next crossing is said again
    assert observe("direct", 1, 30.0) is True
    assert observe("neither", 1, 30.0) is False


def test_retry_after_rounds_up_and_clamps_to_the_contracts_range() -> None:
    assert [retry_after(s) for s in (0.01, 1.0, 1.01, 59.5, 60.0, 61.0, 4000.0)] == [
        1,
        1,
        2,
        60,
        60,
        60,
        60,
    ]


def test_leaving_reports_predicted_against_actual_once() -> None:
    made, clock = estimator(direct=0.5)
    errors: list[tuple[float, float]] = []
    made.observers.append(lambda predicted, actual: errors.append((predicted, actual)))
    first = made.enter(made.estimate("direct", 1, "-"))
    made.queue("direct", 1)
    second = made.enter(made.estimate("direct", 1, "-"))
    assert (first.estimate.seconds, second.estimate.seconds) == (0, pytest.approx(0.5))
    clock.now += 0.7
    made.leave(second, clock.now - 0.1)  # its call began 0.6 s after admission
    made.leave(second, clock.now)  # twice: counted once
    made.leave(first, None)  # left before its call ran: not an error sample
    assert errors == [(pytest.approx(0.5), pytest.approx(0.6))]


def test_the_pipeline_logs_a_crossing_once_from_a_successful_call_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's observer of each call, in process: a call that failed, or that never ran, asks
    nothing of the budget; the first successful one past it is logged, once, naming the kind, its recent
    mean and the budget. A pipeline without a budget logs nothing."""
    made, _ = estimator()
    budget = WaitBudget(1.0, made)
    pipeline = Pipeline(Engine(FakeScorer()), budget, "m", "torch")
    # The window measured a slow call the pipeline was not told of.
    made.recent.observe("direct", 1, 2.5)
    caplog.set_level(logging.WARNING, logger="semif_serve.service")

    def said() -> list[tuple[str, int, str]]:
        return [(r.name, r.levelno, r.getMessage()) for r in caplog.records]

    Pipeline(Engine(FakeScorer()), None, "m", "torch").scorer_call(
        CallTiming("direct", 1, started=0.0, ended=2.5)
    )
    pipeline.scorer_call(CallTiming("direct", 1, started=0.0, ended=9.0, outcome="failed"))
    pipeline.scorer_call(CallTiming("direct", 1, started=None, ended=None))
    assert said() == [] and budget.over["direct"] is False
    for _ in range(2):
        pipeline.scorer_call(CallTiming("direct", 1, started=0.0, ended=2.5))
    assert said() == [
        (
            "semif_serve.service",
            logging.WARNING,
            "a direct scorer call now takes 2.50 s (recent mean), over the SEMIF_MAX_WAIT_S budget "
            "of 1 s: any request behind one such call is refused busy; raise SEMIF_MAX_WAIT_S",
        )
    ]
