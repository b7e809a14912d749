"""What audits learn about a workload's position prior from its own traffic, per (workload, n).

Rules:
1. Pure arithmetic on SemIf results and plain numbers: no I/O, no asyncio, no clock. The per-decision
   prior is decisions/prior.py's, the answers are averaging.py's; nothing here re-derives either.
2. A `Tally` holds only sums and counts that replicas can add (`as_json`, `summed`), never a row: the
   audited decision is gone once it is counted.
3. A tally belongs to one served prior: an audit under another (a reload changed it) starts it over,
   since agreement and margins were read against the prior that was served.

Theory of operation. An audit is one decision served from one row in the caller's order with the
prior divided out, scored afterwards under its other n-1 cyclic rotations. With all n rotations:

    decision prior   = prior.decision_prior(the n results)             (PriDe's estimate, unlabelled)
    served top       = the top of the one-row answer actually served     (averaging, method "prior")
    rotations' top   = the top of the n rows averaged                    (averaging, method "rotations")
    agreement        = served top == rotations' top                      (the label-free quality signal)
    margin           = top − runner-up of the served answer's probabilities
    confirmed        = the half turn's debiased top is the served top   (adaptive.confirms: escalated,
                       the decision would keep the served answer at two rows)

The live prior is the mean of the decision priors (sums / count, as prior.workload_prior) and its
standard error per position sqrt(var / count), from the sums of squares. Margins are kept as counts in
MARGIN_BINS equal bins over [0, 1], apart for agreeing and disagreeing decisions, and for those of the
disagreeing that the half turn would confirm (escalated, they keep their wrong top): that is what an
escalation threshold is fitted from (`fitted_threshold`), and what replicas can add.

Drift compares the last DRIFT_WINDOW decision priors with the served prior, position by position:

    drift = max over i of |mean_i − served_i| / (sd_i / sqrt(k))          (k decisions in the window)

It exists once the window holds prior.MIN_DECISIONS (the fewest a prior is fitted from). Testing n
positions at once, the threshold is Bonferroni's: the two-sided normal quantile at DRIFT_ALPHA / n
(`drift_threshold`: 2.81 for n=2, 3.02 for n=4, 3.23 for n=8). The served prior's own fitting error
is not in the denominator (the file keeps only its mean), so a prior fitted on few decisions drifts
sooner: the alert also waits (deploy/prometheus, `SemifPriorDrift`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from . import adaptive, averaging
from . import prior as position_prior
from .numerics import margin

DRIFT_WINDOW = 200  # the last audits drift is measured over, per (workload, n)
DRIFT_ALPHA = 0.01  # the family-wise chance that drift crosses its threshold on a prior that fits
MARGIN_BINS = 100  # margins counted in bins of 0.01: a threshold is fitted to that resolution
SE_FLOOR = 1e-9  # a window whose priors do not vary at all still gives a finite drift


@dataclass(frozen=True)
class Audited:
    """One audited decision: its prior over positions, whether the served top was the rotations'
    top, the served answer's margin, and whether its half turn would confirm the served top."""

    prior: list[float]
    agreed: bool
    margin: float
    confirmed: bool = False


def audited(
    row: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    served: Sequence[float],
) -> Audited:
    """One decision from its n rotations' results (the caller's order first, as
    averaging.expand(row, "rotations") orders them) and the prior it was served with."""
    one_row = averaging.combine(row, position_prior.METHOD, results[:1], prior=served).combined
    rotations = averaging.combine(row, "rotations", results).combined
    return Audited(
        position_prior.decision_prior(results),
        one_row.top == rotations.top,
        margin(one_row.probabilities),
        adaptive.confirmed(results, served),
    )


def drift_threshold(n: int) -> float:
    """The drift above which the live prior differs from the served one at family-wise DRIFT_ALPHA
    over n positions (Bonferroni, two-sided)."""
    return NormalDist().inv_cdf(1 - DRIFT_ALPHA / (2 * n))


def margin_bin(value: float) -> int:
    """The bin of a margin in [0, 1]: bin k holds [k/MARGIN_BINS, (k+1)/MARGIN_BINS), the last one 1.0 too."""
    return min(max(int(value * MARGIN_BINS), 0), MARGIN_BINS - 1)


def fitted_threshold(
    disagreeing: Sequence[int], confirmed: Sequence[int], total: int, target: float
) -> float:
    """The lowest bin edge t at which escalating every decision with margin < t leaves at most
    (1 − target) of `total` decisions answered with another top than the rotations': the
    disagreeing at margin ≥ t, answered by one row, and the confirmed below t, whose half turn kept
    it. What orderings "adaptive" escalates below; 1.0 where no edge reaches the target."""
    allowed = (1 - target) * total
    left = sum(disagreeing)
    for edge, (wrong, kept) in enumerate(zip(disagreeing, confirmed, strict=True)):
        if left <= allowed:
            return edge / MARGIN_BINS
        left += kept - wrong
    return 1.0


def _standard_errors(count: int, sums: Sequence[float], squares: Sequence[float]) -> list[float]:
    """Per position, the standard error of the mean from count, sum and sum of squares (sample variance)."""
    if count < 2:
        return [math.inf] * len(sums)
    return [
        math.sqrt(max(square - total * total / count, 0.0) / (count - 1) / count)
        for total, square in zip(sums, squares)
    ]


@dataclass
class Tally:
    """One (workload, n)'s audits against one served prior (Rule 3)."""

    served: tuple[float, ...]
    count: int = 0
    sums: list[float] = field(default_factory=list)
    squares: list[float] = field(default_factory=list)
    agreements: int = 0
    agreeing: list[int] = field(default_factory=lambda: [0] * MARGIN_BINS)
    disagreeing: list[int] = field(default_factory=lambda: [0] * MARGIN_BINS)
    confirmed: list[int] = field(default_factory=lambda: [0] * MARGIN_BINS)  # of the disagreeing
    window: deque[list[float]] = field(default_factory=lambda: deque(maxlen=DRIFT_WINDOW))

    def __post_init__(self) -> None:
        n = len(self.served)
        self.sums = self.sums or [0.0] * n
        self.squares = self.squares or [0.0] * n

    def add(self, audit: Audited) -> None:
        self.count += 1
        for position, value in enumerate(audit.prior):
            self.sums[position] += value
            self.squares[position] += value * value
        self.agreements += audit.agreed
        (self.agreeing if audit.agreed else self.disagreeing)[margin_bin(audit.margin)] += 1
        if audit.confirmed and not audit.agreed:
            self.confirmed[margin_bin(audit.margin)] += 1
        self.window.append(audit.prior)

    def live(self) -> list[float] | None:
        """The live prior: the mean of every audited decision's prior (None before the first)."""
        return [total / self.count for total in self.sums] if self.count else None

    def standard_errors(self) -> list[float]:
        """Per position, the live prior's standard error (infinite before the second audit)."""
        return _standard_errors(self.count, self.sums, self.squares)

    def drift(self) -> float | None:
        """The largest |window mean − served| / SE over positions; None while the window holds fewer
        than prior.MIN_DECISIONS."""
        k = len(self.window)
        if k < position_prior.MIN_DECISIONS:
            return None
        sums = [math.fsum(column) for column in zip(*self.window)]
        squares = [math.fsum(v * v for v in column) for column in zip(*self.window)]
        errors = _standard_errors(k, sums, squares)
        return max(
            abs(total / k - served) / max(error, SE_FLOOR)
            for total, served, error in zip(sums, self.served, errors)
        )

    def as_json(self) -> dict[str, Any]:
        """What /v1/audit shows of it: the live prior and its standard errors beside the served one,
        agreement, drift, and the sums replicas add (`summed`)."""
        drift = self.drift()
        return {
            "audits": self.count,
            "served_prior": list(self.served),
            "live_prior": self.live(),
            "standard_errors": _finite(self.standard_errors()),
            "sums": list(self.sums),
            "squares": list(self.squares),
            "agreements": self.agreements,
            "agreement": self.agreements / self.count if self.count else None,
            "margins": {
                "agreeing": list(self.agreeing),
                "disagreeing": list(self.disagreeing),
                "confirmed": list(self.confirmed),
            },
            "drift": drift,
            "drift_threshold": drift_threshold(len(self.served)),
            "drift_window": len(self.window),
        }


def _finite(values: list[float]) -> list[float | None]:
    """JSON has no infinity: a standard error not yet known is null."""
    return [value if math.isfinite(value) else None for value in values]


@dataclass(frozen=True)
class Summed:
    """Replicas' tallies of one (workload, n) added: what the export refits from."""

    audits: int
    sums: tuple[float, ...]
    agreements: int
    disagreeing: tuple[int, ...]
    confirmed: tuple[int, ...]

    def live(self) -> list[float]:
        return [total / self.audits for total in self.sums]


def summed(tallies: Sequence[Mapping[str, Any]]) -> Summed:
    """Tallies of one (workload, n) from several replicas (`Tally.as_json`), added; all over one n."""
    if len({len(tally["sums"]) for tally in tallies}) != 1 or any(
        len(tally["margins"].get(key, [0] * MARGIN_BINS)) != MARGIN_BINS
        for tally in tallies
        for key in ("disagreeing", "confirmed")
    ):
        raise ValueError("tallies over different option counts or margin bins cannot be added")
    return Summed(
        sum(int(tally["audits"]) for tally in tallies),
        tuple(math.fsum(column) for column in zip(*(tally["sums"] for tally in tallies))),
        sum(int(tally["agreements"]) for tally in tallies),
        _added(tallies, "disagreeing"),
        _added(tallies, "confirmed"),
    )


def _added(tallies: Sequence[Mapping[str, Any]], key: str) -> tuple[int, ...]:
    """One kind of margin bins, added over tallies; a tally without it (a server of the margin rule,
    whose escalated decisions all took the rotations' answer) counts none there."""
    return tuple(
        sum(column)
        for column in zip(*(tally["margins"].get(key, [0] * MARGIN_BINS) for tally in tallies))
    )
