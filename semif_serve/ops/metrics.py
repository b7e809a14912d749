"""Prometheus metrics, written with prometheus_client (never a hand-rolled exposition).

Rules: the only module that imports prometheus_client. Names follow Prometheus
conventions: `semif_` prefix, base units (seconds, bytes), `_total` on counters.
Labels have bounded values only: a route is one of the known paths or `other`,
never the raw target; a code is a row of errors.STATUS; a caller is a name of the
tokens file (at most 64) or `-`, never a token. No request content, id,
peer or header ever becomes a label or a value.

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
from typing import Any

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
from ..engine.worker import KINDS
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
    """One family with one label, its samples read at scrape time from a callable: the counts
    admission keeps (429 `busy` by reason), the wait budget's per-kind flags (extensions)."""

    def __init__(
        self,
        family: type[CounterMetricFamily | GaugeMetricFamily],
        name: str,
        documentation: str,
        label: str,
        samples: Callable[[], Mapping[str, float]],
    ) -> None:
        self._family, self._name, self._documentation = family, name, documentation
        self._label, self._samples = label, samples

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        family = self._family(self._name, self._documentation, labels=(self._label,))
        for value, sample in self._samples().items():
            family.add_metric((value,), sample)
        yield family


class Metrics:
    """Every semif_ metric of one server, in its own registry."""

    def __init__(
        self,
        max_queue: int,
        in_progress: Callable[[], int],
        open_connections: Callable[[], int],
        facts: Callable[[], dict[str, Any]],
        drain_seconds: Callable[[], float],
        shutdown_grace: float,
        busy_refusals: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "semif_http_requests",
            "HTTP requests answered, by route, status and caller (- for none).",
            ("route", "status", "caller"),
            registry=registry,
        )
        self._duration = Histogram(
            "semif_http_request_duration_seconds",
            "From request head to response written.",
            ("route",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._queued = Histogram(
            "semif_scorer_queue_seconds",
            "Time a scorer call waited for the engine thread.",
            ("kind",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._scoring = Histogram(
            "semif_scorer_call_duration_seconds",
            "Duration of one scorer call.",
            ("kind",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._rows = Counter(
            "semif_rows_scored",
            "Rows the scorer was given (after order expansion).",
            registry=registry,
        )
        self._refusals = Counter(
            "semif_refusals",
            "Error responses, by error code and caller (- for none).",
            ("code", "caller"),
            registry=registry,
        )
        self._oom = Counter(
            "semif_out_of_memory_events",
            "Scorer calls that ran out of accelerator memory.",
            registry=registry,
        )
        self._decisions = Counter(
            "semif_decisions",
            "Decisions answered, by orderings method (none, rotations, all, prior, adaptive) and caller.",
            ("method", "caller"),
            registry=registry,
        )
        self._per_method: dict[tuple[str, str], Any] = {}
        # Extension: by workload, a name of the calibration file (bounded like it).
        self._escalations = Counter(
            "semif_escalations",
            'Decisions of orderings "adaptive" that escalated to a second scorer call over their '
            "other rotations, by workload.",
            ("workload",),
            registry=registry,
        )
        Gauge(
            "semif_requests_in_progress",
            "POSTs holding an admission slot (queued or scoring).",
            registry=registry,
        ).set_function(in_progress)
        Gauge("semif_max_queue", "SEMIF_MAX_QUEUE: the admission limit.", registry=registry).set(
            max_queue
        )
        Gauge(
            "semif_open_connections", "Client connections open now.", registry=registry
        ).set_function(open_connections)
        # The drain, seen only through SEMIF_METRICS_PORT (the client port closes at SIGTERM): a
        # drain past the grace means the process did not leave when it should have (an alert).
        Gauge(
            "semif_drain_elapsed_seconds",
            "Seconds since SIGTERM began the drain; 0 while serving.",
            registry=registry,
        ).set_function(drain_seconds)
        Gauge(
            "semif_shutdown_grace_seconds",
            "SEMIF_SHUTDOWN_GRACE_S: the longest a drain waits for requests.",
            registry=registry,
        ).set(shutdown_grace)
        info = facts()
        Info("semif_build", "What this process serves.", registry=registry).info(
            {key: "" if info.get(key) is None else str(info[key]) for key in INFO_KEYS}
        )
        registry.register(_CudaMemory(facts))
        self._reloads = Counter(
            "semif_reloads",
            "SIGHUP reloads by file (tokens, calibration) and outcome (ok; invalid: the old one kept).",
            ("file", "outcome"),
            registry=registry,
        )
        for file in ("tokens", "calibration"):
            for outcome in ("ok", "invalid"):
                self._reloads.labels(file, outcome)
        self._calibration = Info(
            "semif_calibration",
            "The SEMIF_CALIBRATION file served: its sha256 (empty without one) and when it was "
            "loaded (unix seconds).",
            registry=registry,
        )
        self._wait_error: Any = None
        if (
            busy_refusals is not None
        ):  # only with SEMIF_MAX_WAIT_S: without it, the exposition is as before
            registry.register(
                _ReadAtScrape(
                    CounterMetricFamily,
                    "semif_busy_refusals",
                    "429 busy by reason: queue (SEMIF_MAX_QUEUE, before the body), caller "
                    "(SEMIF_MAX_QUEUE_PER_CALLER, before the body) or wait (SEMIF_MAX_WAIT_S, "
                    "after it).",
                    "reason",
                    busy_refusals,
                )
            )
            self._wait_error = Histogram(
                "semif_wait_estimate_error_seconds",
                "Actual wait (admitted to its scorer call begun) minus the "
                "SEMIF_MAX_WAIT_S estimate; positive: the estimate was low.",
                buckets=ERROR_BUCKETS,
                registry=registry,
            )
        self._per_request: dict[tuple[str, int, str | None, str], tuple[Any, Any, Any]] = {}
        self._per_call: dict[str, tuple[Any, Any]] = {}
        # Every refusal code and orderings method at 0 from the start, for the unauthenticated `-` only: a
        # named caller's series appear with its first request, so /metrics never lists the callers.
        for code in STATUS:
            self._refusals.labels(code, "-")
        for method in ORDERINGS:
            self._per_method[(method, "-")] = self._decisions.labels(method, "-")
        for kind in KINDS:
            self._bind_call(kind)

    def request(
        self, route: str, status: int, code: str | None, seconds: float, caller: str = "-"
    ) -> None:
        children = self._per_request.get((route, status, code, caller))
        if (
            children is None
        ):  # labels() is the costly part of an increment: bound once per combination
            children = self._per_request[(route, status, code, caller)] = (
                self._requests.labels(route, str(status), caller),
                self._duration.labels(route),
                None if code is None else self._refusals.labels(code, caller),
            )
        requests, duration, refusals = children
        requests.inc()
        duration.observe(seconds)
        if refusals is not None:
            refusals.inc()

    def decisions(self, methods: tuple[str, ...], caller: str = "-") -> None:
        """One answered request's decisions, each under its orderings method (an empty tuple: none)."""
        for method in methods:
            child = self._per_method.get((method, caller))
            if child is None:
                child = self._per_method[(method, caller)] = self._decisions.labels(method, caller)
            child.inc()

    def escalations(self, workloads: tuple[str, ...]) -> None:
        """One answered request's escalated decisions, each under its workload (an empty tuple: none)."""
        for workload in workloads:
            self._escalations.labels(workload).inc()

    def scorer_call(
        self, kind: str, rows: int, queued: float, scoring: float, out_of_memory: bool
    ) -> None:
        children = self._per_call.get(kind) or self._bind_call(kind)
        children[0].observe(queued)
        children[1].observe(scoring)
        self._rows.inc(rows)
        if out_of_memory:
            self._oom.inc()

    def wait_error(self, predicted: float, actual: float) -> None:
        """One admitted request's call ended: how far its wait was from the estimate (registered only with a budget)."""
        self._wait_error.observe(actual - predicted)

    def reloaded(self, file: str, outcome: str) -> None:
        self._reloads.labels(file, outcome).inc()

    def calibration(self, sha256: str | None, loaded_at: float) -> None:
        """The calibration now served (at start and after each reload)."""
        self._calibration.info({"sha256": sha256 or "", "loaded_at": f"{loaded_at:.3f}"})

    def calls_over_budget(self, over: Callable[[], dict[str, bool]]) -> None:
        """With SEMIF_MAX_WAIT_S: export, per kind, whether one call alone exceeds the budget."""
        self.registry.register(
            _ReadAtScrape(
                GaugeMetricFamily,
                "semif_wait_budget_call_over",
                "1 while one scorer call of this kind (its recent mean) takes longer than the "
                "SEMIF_MAX_WAIT_S budget: any request behind one is refused busy; raise the budget.",
                "kind",
                lambda: {kind: 1.0 if alone else 0.0 for kind, alone in over().items()},
            )
        )

    def _bind_call(self, kind: str) -> tuple[Any, Any]:
        """The queue and call histograms of one kind, bound once."""
        children = self._per_call[kind] = (self._queued.labels(kind), self._scoring.labels(kind))
        return children

    def render(self) -> bytes:
        return generate_latest(self.registry)
