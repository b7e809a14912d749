"""Orderings "adaptive" (extension): the prior's one row; a second ordering where it is unsure; every
rotation only where the two disagree.

Rules:
1. Stages. An adaptive decision over n options scores its rotations in up to three engine calls of
   its request (`stages`): the caller's order (rotation 0); the half turn (rotation n//2); the rest.
   Each call carries every decision of the request that reached its stage, and is made only once the
   previous call's results are read. A request none of whose decisions goes on makes one call.
2. After the first row: the margin is the top minus the runner-up of the prior's debiased,
   uncalibrated probabilities. Below the workload's threshold for n the decision escalates (it goes
   on to the half turn); otherwise the prior's one-row answer stands.
3. After the half turn: where its own debiased top (the prior divided out position by position, ties
   to the earliest in the caller's order) is not the first row's, the decision scores the rest. Where
   they agree the one-row answer stands, confirmed. Over two options the half turn is the last
   rotation: nothing is left.
4. The answer: where all n rotations were scored, averaging's combination of them; otherwise the
   prior's one-row answer. Its view is that method's (`basis`: "rotations" or "prior", with that
   method's temperature where the workload has one), labelled "adaptive" with its escalation, and
   `orderings` holds every row scored, in rotation order, each untouched (INV-1).
Why staged: on the reading model's three public fit splits it reached 0.97 agreement with the
rotations at fewer rows than the margin alone, or any other one-row signal (bench/RESULTS.md).
Pure: no I/O. The service makes the calls (service/escalation.py); the request model has refused
a decision whose workload holds no prior or no threshold for its n before anything is scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import averaging
from . import prior as position_prior
from .calibration_file import FittedPrior, Table
from .methods import Method
from .numerics import log_softmax
from .numerics import margin as margin  # the one-row answer's sureness, shared with audits
from .request_model import NONE_ESCALATED, DecideRequest, Decision, Escalated
from .views import Averaged, Escalation


def stages(n: int) -> tuple[tuple[int, ...], ...]:
    """The rotations over n options each stage scores (Rule 1): the caller's order, the half turn,
    the rest (none left over two options)."""
    half = n // 2
    rest = tuple(k for k in range(1, n) if k != half)
    return ((0,), (half,), rest) if rest else ((0,), (half,))


def _entry(decision: Decision, workload: str | None, table: Table) -> tuple[FittedPrior, float]:
    """The workload's prior for the decision's n, and its threshold (the request model checked both)."""
    if workload is None:
        raise ValueError(f"decision {decision.row['id']!r} is adaptive without a workload")
    entry = table.priors[workload][len(decision.row["options"])]
    if entry.threshold is None:
        raise ValueError(f"decision {decision.row['id']!r} has a prior without a threshold")
    return entry, entry.threshold


def debiased_top(result: Mapping[str, Any], prior: Sequence[float], order: Sequence[str]) -> str:
    """One row's answer with the prior divided out by position: its top option id, an exact tie going
    to the earliest in the caller's `order`, whatever order the row was scored in."""
    scores = position_prior.debias(log_softmax(result["option_logits"]), prior)
    by_id: dict[str, float] = dict(zip(result["option_ids"], scores))
    return max(order, key=by_id.__getitem__)


def goes_on(
    row: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    prior: Sequence[float],
    threshold: float,
) -> bool:
    """Whether a decision scored so far (`results`, in stage order) scores its next stage, where it has
    one: after the first row where its margin is below `threshold` (Rule 2), after the half turn
    where the two rows' debiased tops differ (Rule 3)."""
    if len(results) == 1:
        debiased = averaging.combine(row, Method.PRIOR, results, prior=prior)
        return margin(debiased.combined.probabilities) < threshold
    return not confirms(results[0], results[1], prior)


def confirms(first: Mapping[str, Any], half: Mapping[str, Any], prior: Sequence[float]) -> bool:
    """Whether the half turn's debiased top is the first row's (`first`: the caller's order), so that
    an escalated decision keeps the one-row answer at two rows (Rule 3; over two options it has
    scored every rotation anyway)."""
    order = list(first["option_ids"])
    return debiased_top(first, prior, order) == debiased_top(half, prior, order)


def confirmed(rotations: Sequence[Mapping[str, Any]], prior: Sequence[float]) -> bool:
    """`confirms` over a decision's n rotations' results in rotation order (an audit's, or a bench
    run's): whether its half turn would keep the first row's top."""
    return confirms(rotations[0], rotations[stages(len(rotations))[1][0]], prior)


@dataclass(frozen=True)
class Progress:
    """A request part way through its calls: every call's `results` so far (as `request.planned` reads
    them with `escalated`), the decisions past their first row (`escalated`: index -> rows scored),
    and the last stage scored."""

    results: Sequence[Mapping[str, Any]]
    escalated: Escalated = field(default_factory=lambda: NONE_ESCALATED)
    stage: int = 0

    def going_on(self, request: DecideRequest, table: Table) -> frozenset[int]:
        """The decisions that score their next stage (Rules 2 and 3): past the first, only those that
        scored the last one."""
        going = set()
        for index, (decision, rows) in enumerate(
            request.planned(len(self.results), self.escalated)
        ):
            reached = self.stage == 0 or index in self.escalated
            if (
                decision.method.rules.escalates
                and reached
                and self.stage + 1 < len(stages(len(decision.row["options"])))
            ):
                entry, threshold = _entry(decision, request.workload, table)
                if goes_on(decision.row, self.results[rows], entry.prior, threshold):
                    going.add(index)
        return frozenset(going)

    def next_rows(self, request: DecideRequest, going: frozenset[int]) -> list[dict[str, Any]]:
        """The next call's rows: each going decision's rotations of the next stage, in the request's order."""
        rows: list[dict[str, Any]] = []
        for index in sorted(going):
            row = request.decisions[index].row
            expanded = averaging.expand(row, Method.ROTATIONS)
            rows.extend(expanded[k] for k in stages(len(row["options"]))[self.stage + 1])
        return rows

    def reserve(self, request: DecideRequest, going: frozenset[int]) -> int:
        """The rows the stages after the next may still add for the going decisions: what the estimates
        count ahead with the next call until it ends."""
        return sum(
            len(stage)
            for index in going
            for stage in stages(len(request.decisions[index].row["options"]))[self.stage + 2 :]
        )

    def then(
        self, request: DecideRequest, going: frozenset[int], more: Sequence[Mapping[str, Any]]
    ) -> Progress:
        """With the next call's results `more` (`next_rows`'s) added after each going decision's rows."""
        stage = self.stage + 1
        rest = iter(more)
        results: list[Mapping[str, Any]] = []
        escalated = dict(self.escalated)
        for index, (decision, rows) in enumerate(
            request.planned(len(self.results), self.escalated)
        ):
            results.extend(self.results[rows])
            if index in going:
                added = len(stages(len(decision.row["options"]))[stage])
                results.extend(next(rest) for _ in range(added))
                escalated[index] = rows.stop - rows.start + added
        if next(rest, None) is not None:
            raise RuntimeError("the next call returned more results than its rows")
        return Progress(results, escalated, stage)


def in_rotation_order(
    decision: Decision, results: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """A decision's results, scored in stage order, put in rotation order (Rule 4)."""
    order = [k for stage in stages(len(decision.row["options"])) for k in stage][: len(results)]
    return [result for _, result in sorted(zip(order, results), key=lambda pair: pair[0])]


def _complete(decision: Decision, results: Sequence[Mapping[str, Any]]) -> bool:
    """Every rotation scored."""
    return len(results) == len(decision.row["options"])


def basis(
    decision: Decision, ordered: Sequence[Mapping[str, Any]]
) -> tuple[Decision, Sequence[Mapping[str, Any]]]:
    """The method its answer reduces to (Rule 4), with the rows that answer reads (`ordered`: the rows
    scored, `in_rotation_order`): "rotations" over every rotation where all were scored, else "prior"
    over the caller's-order row."""
    if _complete(decision, ordered):
        return Decision(decision.row, Method.ROTATIONS), ordered
    return Decision(decision.row, Method.PRIOR), ordered[:1]


def labelled(
    view: Averaged,
    decision: Decision,
    ordered: Sequence[Mapping[str, Any]],
    workload: str | None,
    table: Table,
) -> Averaged:
    """Its basis method's view as the adaptive decision's: method "adaptive", its escalation, and every
    row scored (`ordered`, in rotation order)."""
    _, threshold = _entry(decision, workload, table)
    combined = dataclasses.replace(
        view.combined, method=decision.method, escalation=Escalation(threshold, len(ordered))
    )
    return dataclasses.replace(view, combined=combined, results=list(ordered))
