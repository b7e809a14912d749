"""Typed views of what semif-serve answers: results, the combined and calibrated views, timing, health.

Rules: this module only *reads* the server's JSON into frozen dataclasses; it never
computes, rounds or renames a number (INV-1 reaches the caller unchanged). Every key
the server sends that a type does not name is kept in `extra`, so `to_json()` gives
back exactly the object that came over the wire. It knows nothing of HTTP.

Theory: each type lists its keys as dataclass fields. Fields without a default are
required and always written back (even when JSON null); fields defaulting to None are
optional and written back only when present. `from_json` on a `/decide` answer picks
`Averaged` when the body carries `combined`, else `Result`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

Json = dict[str, Any]
T = TypeVar("T", bound="_Typed")


@dataclass(frozen=True)
class _Typed:
    """Shared reading and writing; subclasses only declare their fields."""

    extra: Json = field(default_factory=dict, kw_only=True, repr=False)
    # Fields holding nested typed values, and how to read them.
    _NESTED: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
        if not isinstance(data, Mapping):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        required = {f.name for f in _required(cls)}
        missing = sorted(required - set(data))
        if missing:
            raise TypeError(f"{cls.__name__}: the server's answer lacks {', '.join(missing)}")
        # An optional key sent as null stays in `extra`, so writing it back keeps the null.
        typed = names - {
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in required and data.get(f.name) is None
        }
        values = {
            key: _read(cls._NESTED.get(key), value) for key, value in data.items() if key in typed
        }
        return cls(**values, extra={key: value for key, value in data.items() if key not in typed})

    def to_json(self) -> Json:
        """The object as the server sent it: required keys, present optional keys, then the rest."""
        required = {f.name for f in _required(type(self))}
        out: Json = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.name != "extra" and (item.name in required or value is not None):
                out[item.name] = _write(value)
        return {**out, **self.extra}


def _required(cls: type) -> list[dataclasses.Field[Any]]:
    return [
        f
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def _read(reader: Any, value: Any) -> Any:
    if reader is None or value is None:
        return value
    if isinstance(reader, list):  # [Type]: a list of typed objects
        return [reader[0].from_json(item) for item in value]
    return reader.from_json(value)


def _write(value: Any) -> Any:
    if isinstance(value, _Typed):
        return value.to_json()
    if isinstance(value, list):
        return [_write(item) for item in value]
    return value


@dataclass(frozen=True)
class Calibrated(_Typed):
    """The calibrated view for a named workload; the argmax never changes.

    On a plain result: softmax(option_logits / T), and `method` is absent. On a combined
    view: softmax(mean per-option log-softmax / T) with the ordering `method` whose T it used.
    """

    workload: str
    temperature: float
    probabilities: list[float]
    method: str | None = None


@dataclass(frozen=True)
class Result(_Typed):
    """SemIf's result for one row, unchanged, plus `calibrated` when a workload was named."""

    id: str
    option_ids: list[str]
    probabilities: list[float]
    option_logits: list[float]
    input_tokens: int
    prompt_sha256: str
    prompt_version: str
    model: Json
    readout: str
    probability_status: str
    forward_seconds: float | None = None
    total_seconds: float | None = None
    calibrated: Calibrated | None = None

    _NESTED: ClassVar[Mapping[str, Any]] = {"calibrated": Calibrated}

    def probability(self, option_id: str) -> float:
        """The native probability of one option, looked up by id (never by position)."""
        return self.probabilities[self.option_ids.index(option_id)]


@dataclass(frozen=True)
class Combined(_Typed):
    """The order-averaged view: probabilities in the caller's order, top, agreement, spread.

    For method "prior" (one row, a position prior divided out): probabilities are the
    debiased view, agreement 1.0, each spread [p, p], and `prior` the prior over positions.
    For method "adaptive": `rows` scored (1; where the prior's margin fell below the workload's
    `threshold` and the decision `escalated`, 2 if its half turn confirmed the first row's top,
    else all n rotations); the view is the prior's one-row one, or the rotations' over all n."""

    method: str
    orderings: int
    probabilities: list[float]
    top: str
    agreement: float
    spread: dict[str, list[float]]
    calibrated: Calibrated | None = None
    prior: list[float] | None = None
    rows: int | None = None
    escalated: bool | None = None
    threshold: float | None = None

    _NESTED: ClassVar[Mapping[str, Any]] = {"calibrated": Calibrated}


@dataclass(frozen=True)
class Averaged(_Typed):
    """A decision asked with orderings: the combined view and SemIf's result per ordering."""

    id: str
    option_ids: list[str]
    combined: Combined
    orderings: list[Result]

    _NESTED: ClassVar[Mapping[str, Any]] = {"combined": Combined, "orderings": [Result]}


Decided = Result | Averaged


def decided(data: Mapping[str, Any]) -> Decided:
    """One decision's answer: averaged when it carries `combined`, else a plain result."""
    return (
        Averaged.from_json(data)
        if isinstance(data, Mapping) and "combined" in data
        else Result.from_json(data)
    )


@dataclass(frozen=True)
class Timing(_Typed):
    """score_shared's timing dict, unchanged; the keys both scorers report are typed."""

    total_seconds: float
    batch_size: int | None = None
    prefix_tokens: int | None = None
    encode_seconds: float | None = None
    prefill_seconds: float | None = None
    replicate_seconds: float | None = None
    suffix_forward_seconds: float | None = None
    true_suffix_tokens: int | None = None
    padded_suffix_tokens: int | None = None


@dataclass(frozen=True)
class Shared:
    """The answer to /decide/shared: one result per decision in request order, and the timing."""

    results: list[Decided]
    timing: Timing

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Shared:
        if (
            not isinstance(data, Mapping)
            or not isinstance(data.get("results"), list)
            or "timing" not in data
        ):
            raise TypeError("Shared: the server's answer lacks results or timing")
        return cls([decided(item) for item in data["results"]], Timing.from_json(data["timing"]))

    def to_json(self) -> Json:
        return {
            "results": [item.to_json() for item in self.results],
            "timing": self.timing.to_json(),
        }


@dataclass(frozen=True)
class Health(_Typed):
    """GET /health: `status` is "ok", or "draining" once the server began shutting down."""

    status: str
    semif_commit: str
    model: str
    vram_cap_gib: float | None
    max_tokens: int
    max_decisions: int
    workloads: list[str]
    max_queue: int | None = None
    in_progress: int | None = None
    scorer: str | None = None
