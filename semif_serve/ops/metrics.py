"""Prometheus metrics, written with prometheus_client (never a hand-rolled exposition).

Rules: the only module that imports prometheus_client. Names follow Prometheus
conventions: `semif_` prefix, base units (seconds, bytes), `_total` on counters.
Labels have bounded values only: a route is one of the known paths or `other`,
never the raw target; a code is a row of errors.STATUS; a caller is a name of the
tokens file (at most 64) or `-`, never a token; a workload (extension) a name of the
calibration file. No request content, id,
peer or header ever becomes a label or a value.

Every family is one row of FAMILIES, in exposition order: a gauge that shows state the server
keeps is a row naming its reading, and operations.py passes that reading to Metrics by name.

Theory: one registry per server (tests run several in one process). Per-request
work is a few increments on label children bound once and cached, all those one
request (route, status, code) or one scorer call (kind) moves found with one
dict lookup. Every refusal code, scorer kind and orderings method is exported at 0 from the start,
so the first `scoring_failed` or out-of-memory refusal is an increase a rule's
`increase()` can see, not a series that appears already at 1. Gauges that mirror
state the server already keeps (in progress, open connections, CUDA memory) are
read when scraped, so they cost nothing per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..decisions.methods import ORDERINGS
from ..engine.worker import AUDIT, KINDS
from ..errors import STATUS

# Sub-millisecond HTTP answers up to multi-second scorer calls on a loaded card.
DURATION_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
CONTENT_TYPE = CONTENT_TYPE_LATEST.encode()
# Engine health key -> metric name (present only on CUDA).
CUDA_MEMORY = {
    "memory_reserved_bytes": (
        "semif_cuda_memory_reserved_bytes",
        "CUDA memory reserved by the caching allocator.",
    ),
    "memory_allocated_bytes": (
        "semif_cuda_memory_allocated_bytes",
        "CUDA memory allocated to tensors.",
    ),
    "max_memory_reserved_bytes": (
        "semif_cuda_memory_peak_reserved_bytes",
        "Peak CUDA memory reserved since start.",
    ),
}
INFO_KEYS = ("scorer", "semif_commit", "model", "revision", "device")
# Actual wait minus the wait-budget estimate: both signs, from a tenth of a second to a minute.
ERROR_BUCKETS = (
    -60.0,
    -30.0,
    -10.0,
    -5.0,
    -2.5,
    -1.0,
    -0.5,
    -0.25,
    -0.1,
    0.0,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


Kind = Literal[
    "counter",
    "histogram",
    "gauge",
    "info",
    "counter read at scrape",
    "gauge read at scrape",
    "cuda memory",
]
INSTRUMENTS: dict[str, Any] = {
    "counter": Counter,
    "histogram": Histogram,
    "gauge": Gauge,
    "info": Info,
}
READ_AT_SCRAPE: dict[str, type[CounterMetricFamily | GaugeMetricFamily]] = {
    "counter read at scrape": CounterMetricFamily,
    "gauge read at scrape": GaugeMetricFamily,
}
# A family's reading: a number (set once), a mapping (an info's labels), a callable (read at each
# scrape), or None (the family is off).
Reading = Any


@dataclass(frozen=True)
class Family:
    """One row of FAMILIES. `reads` names the Metrics argument that feeds it; a family whose
    reading (or the reading `only_with` names) is None is not declared at all."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    reads: str | None = None
    only_with: str | None = None
    key: str | None = (
        None  # read at scrape from one reading's mapping of families: this family's key
    )


# Every family, in exposition order; the methods of Metrics move the instruments among them.
FAMILIES = (
    Family("semif_http_requests", "counter", "HTTP requests answered, by route, status and caller (- for none).", ("route", "status", "caller")),
    Family("semif_http_request_duration_seconds", "histogram", "From request head to response written.", ("route",), DURATION_BUCKETS),
    Family("semif_scorer_queue_seconds", "histogram", "Time a scorer call waited for the engine thread.", ("kind",), DURATION_BUCKETS),
    Family("semif_scorer_call_duration_seconds", "histogram", "Duration of one scorer call.", ("kind",), DURATION_BUCKETS),
    Family("semif_rows_scored", "counter", "Rows the scorer was given (after order expansion)."),
    Family("semif_refusals", "counter", "Error responses, by error code and caller (- for none).", ("code", "caller")),
    Family("semif_out_of_memory_events", "counter", "Scorer calls that ran out of accelerator memory."),
    Family("semif_decisions", "counter", "Decisions answered, by orderings method (none, rotations, all, prior, adaptive) and caller.", ("method", "caller")),
    # Extension: by workload, a name of the calibration file (bounded like it).
    Family("semif_escalations", "counter", 'Decisions of orderings "adaptive" that escalated to a later scorer call (their half turn, then the rest where it disagreed), by workload.', ("workload",)),
    Family("semif_requests_in_progress", "gauge", "POSTs holding an admission slot (queued or scoring).", reads="in_progress"),
    Family("semif_max_queue", "gauge", "SEMIF_MAX_QUEUE: the admission limit.", reads="max_queue"),
    Family("semif_open_connections", "gauge", "Client connections open now.", reads="open_connections"),
    # A turn each at the engine: every caller that queued a call keeps its series, at 0 when empty.
    Family("semif_engine_queued_calls", "gauge read at scrape", "Scorer calls waiting for the engine's worker (the running one not counted), by caller: each caller's queue, served one call a turn.", ("caller",), reads="queued_by_caller"),
    Family("semif_engine_background_queued_calls", "gauge", "Background calls waiting for the engine's worker: they run only when no caller's call waits.", reads="background_queued"),
    # The drain, seen only through SEMIF_METRICS_PORT (the client port closes at SIGTERM): a drain
    # past the grace means the process did not leave when it should have (an alert).
    Family("semif_drain_elapsed_seconds", "gauge", "Seconds since SIGTERM began the drain; 0 while serving.", reads="drain_seconds"),
    Family("semif_shutdown_grace_seconds", "gauge", "SEMIF_SHUTDOWN_GRACE_S: the longest a drain waits for requests.", reads="shutdown_grace"),
    Family("semif_build", "info", "What this process serves.", reads="build"),
    Family("semif_cuda_memory_*", "cuda memory", "CUDA_MEMORY's gauges, each only while the engine reports it.", reads="facts"),
    Family("semif_reloads", "counter", "SIGHUP reloads by file (tokens, calibration) and outcome (ok; invalid: the old one kept).", ("file", "outcome")),
    Family("semif_calibration", "info", "The SEMIF_CALIBRATION file served: its sha256 (empty without one) and when it was loaded (unix seconds)."),
    # Only with SEMIF_MAX_WAIT_S: without it, the exposition is as before.
    Family("semif_busy_refusals", "counter read at scrape", "429 busy by reason: queue (SEMIF_MAX_QUEUE, before the body), caller (SEMIF_MAX_QUEUE_PER_CALLER, before the body) or wait (SEMIF_MAX_WAIT_S, after it).", ("reason",), reads="busy_refusals"),
    Family("semif_wait_estimate_error_seconds", "histogram", "Actual wait (admitted to its scorer call begun) minus the SEMIF_MAX_WAIT_S estimate; positive: the estimate was low.", buckets=ERROR_BUCKETS, only_with="busy_refusals"),
    # Only with SEMIF_AUDIT_RATE above 0 (service/audits.py, decisions/live_prior.py): without it, as before.
    Family("semif_audits", "counter read at scrape", "Decisions drawn for audit, by workload, option count and outcome: done, dropped (the pending bound or a drain), skipped (over SEMIF_AUDIT_MAX_OPTIONS, or drawn during a drain), failed (the audit call failed).", ("workload", "n", "outcome"), reads="audits", key="outcomes"),
    Family("semif_audit_agreements", "counter read at scrape", "Audits whose served one-row top was the rotations' top.", ("workload", "n"), reads="audits", key="agreements"),
    Family("semif_prior_drift", "gauge read at scrape", "Largest |live - served| / SE of the prior over positions, over the last audits (decisions/live_prior.py); only once the window holds a prior's minimum of decisions.", ("workload", "n"), reads="audits", key="drift"),
    Family("semif_prior_drift_threshold", "gauge read at scrape", "The drift above which the live prior differs from the served one (Bonferroni over n positions at 1%).", ("workload", "n"), reads="audits", key="drift_threshold"),
    Family("semif_audits_pending", "gauge read at scrape", "Audits waiting for idle capacity, by workload.", ("workload",), reads="audits", key="pending"),
    Family("semif_audit_last_seconds", "gauge read at scrape", "When the workload's last audit was done (unix seconds).", ("workload",), reads="audits", key="last"),
    Family("semif_audit_rows_scored", "counter", "Rows scored by audit calls (kind audit), apart from semif_rows_scored.", only_with="audits"),
)  # fmt: skip
# Declared by Metrics.calls_over_budget, once the server has built its wait budget.
CALL_OVER_BUDGET = Family("semif_wait_budget_call_over", "gauge read at scrape", "1 while one scorer call of this kind (its recent mean) takes longer than the SEMIF_MAX_WAIT_S budget: any request behind one is refused busy; raise the budget.", ("kind",))  # fmt: skip


def _keyed(reading: Callable[[], Mapping[str, Any]], key: str) -> Callable[[], Mapping[Any, float]]:
    """One family's samples out of a reading that holds several families' (the audits')."""
    return lambda: reading()[key]


class _CudaMemory(Collector):
    """Reads the engine's memory facts at scrape time; yields nothing off CUDA."""

    def __init__(self, facts: Callable[[], dict[str, Any]]) -> None:
        self._facts = facts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        facts = self._facts()
        for key, (name, documentation) in CUDA_MEMORY.items():
            if isinstance(facts.get(key), (int, float)):
                yield GaugeMetricFamily(name, documentation, value=facts[key])


class _ReadAtScrape(Collector):
    """One family, its samples read at scrape time from a callable, keyed by their label values (one
    label: the value itself): the counts admission keeps (429 `busy` by reason), the wait budget's
    per-kind flags, what audits counted (extensions)."""

    def __init__(
        self,
        family: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        samples: Callable[[], Mapping[Any, float]],
    ) -> None:
        self._family, self._name, self._documentation = family, name, documentation
        self._labels, self._samples = labels, samples

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self._family(self._name, self._documentation, labels=self._labels)
        for values, sample in self._samples().items():
            family.add_metric((values,) if isinstance(values, str) else values, sample)
        yield family


class Metrics:
    """Every semif_ metric of one server, in its own registry, declared by FAMILIES."""

    def __init__(self, facts: Callable[[], dict[str, Any]], **readings: Reading) -> None:
        """`facts` is the engine's health (the build info, read once; CUDA memory, read at each
        scrape). `readings` feed the families that name them in `reads`: each must be given, as
        None where its family is off."""
        unknown = readings.keys() - {family.reads for family in FAMILIES}
        if unknown:
            raise TypeError(f"no metric family reads {sorted(unknown)}")
        info = facts()
        readings |= {
            "facts": facts,
            "build": {key: "" if info.get(key) is None else str(info[key]) for key in INFO_KEYS},
        }
        self.registry = CollectorRegistry(auto_describe=True)
        self._family = {
            family.name: self._declare(family, readings[family.reads] if family.reads else None)
            for family in FAMILIES
            if not (switch := family.only_with or family.reads) or readings[switch] is not None
        }
        self._per_request: dict[tuple[str, int, str | None, str], tuple[Any, Any, Any]] = {}
        self._per_method: dict[tuple[str, str], Any] = {}
        self._per_call: dict[str, tuple[Any, Any]] = {}
        for file in ("tokens", "calibration"):
            for outcome in ("ok", "invalid"):
                self._family["semif_reloads"].labels(file, outcome)
        # Every refusal code and orderings method at 0 from the start, for the unauthenticated `-` only: a
        # named caller's series appear with its first request, so /metrics never lists the callers.
        for code in STATUS:
            self._family["semif_refusals"].labels(code, "-")
        for method in ORDERINGS:
            self._per_method[(method, "-")] = self._family["semif_decisions"].labels(method, "-")
        for kind in KINDS:
            self._bind_call(kind)

    def _declare(self, family: Family, reading: Reading) -> Any:
        """Register one family: an instrument the methods below move (returned), or one whose
        value is read from `reading` (a number set once, or a callable read at each scrape)."""
        if family.kind == "cuda memory":
            self.registry.register(_CudaMemory(reading))
        elif family.kind in READ_AT_SCRAPE:
            scraped = READ_AT_SCRAPE[family.kind]
            samples = reading if family.key is None else _keyed(reading, family.key)
            collector = _ReadAtScrape(scraped, family.name, family.help, family.labels, samples)
            self.registry.register(collector)
        else:
            metric = INSTRUMENTS[family.kind](
                family.name,
                family.help,
                family.labels,
                registry=self.registry,
                **({"buckets": family.buckets} if family.buckets else {}),
            )
            if family.kind == "info" and reading is not None:
                metric.info(reading)
            elif callable(reading):
                metric.set_function(reading)
            elif reading is not None:
                metric.set(reading)
            return metric
        return None

    def request(
        self, route: str, status: int, code: str | None, seconds: float, caller: str = "-"
    ) -> None:
        children = self._per_request.get((route, status, code, caller))
        if (
            children is None
        ):  # labels() is the costly part of an increment: bound once per combination
            children = self._per_request[(route, status, code, caller)] = (
                self._family["semif_http_requests"].labels(route, str(status), caller),
                self._family["semif_http_request_duration_seconds"].labels(route),
                None if code is None else self._family["semif_refusals"].labels(code, caller),
            )
        requests, duration, refusals = children
        requests.inc()
        duration.observe(seconds)
        if refusals is not None:
            refusals.inc()

    def decisions(self, methods: tuple[str, ...], caller: str = "-") -> None:
        """One answered request's decisions, each under its orderings method (an empty tuple: none)."""
        for method in methods:
            try:  # indexed, not .get: one call fewer per decision, and a miss happens once per label
                child = self._per_method[(method, caller)]
            except KeyError:
                child = self._per_method[(method, caller)] = self._family["semif_decisions"].labels(
                    method, caller
                )
            child.inc()

    def escalations(self, workloads: tuple[str, ...]) -> None:
        """One answered request's escalated decisions, each under its workload (an empty tuple: none)."""
        for workload in workloads:
            self._family["semif_escalations"].labels(workload).inc()

    def scorer_call(
        self, kind: str, rows: int, queued: float, scoring: float, out_of_memory: bool
    ) -> None:
        children = self._per_call.get(kind) or self._bind_call(kind)
        children[0].observe(queued)
        children[1].observe(scoring)
        # An audit's rows are no request's: counted apart (a family that exists only with audits on).
        self._family["semif_audit_rows_scored" if kind == AUDIT else "semif_rows_scored"].inc(rows)
        if out_of_memory:
            self._family["semif_out_of_memory_events"].inc()

    def wait_error(self, predicted: float, actual: float) -> None:
        """One admitted request's call ended: how far its wait was from the estimate (registered only with a budget)."""
        self._family["semif_wait_estimate_error_seconds"].observe(actual - predicted)

    def reloaded(self, file: str, outcome: str) -> None:
        self._family["semif_reloads"].labels(file, outcome).inc()

    def calibration(self, sha256: str | None, loaded_at: float) -> None:
        """The calibration now served (at start and after each reload)."""
        self._family["semif_calibration"].info(
            {"sha256": sha256 or "", "loaded_at": f"{loaded_at:.3f}"}
        )

    def calls_over_budget(self, over: Callable[[], dict[str, bool]]) -> None:
        """With SEMIF_MAX_WAIT_S: export, per kind, whether one call alone exceeds the budget."""
        self._declare(
            CALL_OVER_BUDGET,
            lambda: {kind: 1.0 if alone else 0.0 for kind, alone in over().items()},
        )

    def _bind_call(self, kind: str) -> tuple[Any, Any]:
        """The queue and call histograms of one kind, bound once."""
        children = self._per_call[kind] = (
            self._family["semif_scorer_queue_seconds"].labels(kind),
            self._family["semif_scorer_call_duration_seconds"].labels(kind),
        )
        return children

    def render(self) -> bytes:
        return generate_latest(self.registry)
