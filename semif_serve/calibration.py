"""Calibrated views: per-workload, per-method temperatures applied beside SemIf's native scores.

Rules: this module owns the calibration file (both its forms), the binding of a
fitted file to the model it was fitted on, and the arithmetic of the calibrated
views. It knows nothing of HTTP, the engine or torch; the request model refuses
a workload or method the table lacks before scoring, and service.py only asks
this module for views.

Theory of operation. `SEMIF_CALIBRATION` names a JSON file in one of two forms:

* plain (the contract's): `{workload: T}`; T is the temperature of method `none`
  (decisions scored in the caller's order only);
* bound (an extension, issue 10): `{"model", "revision", "prompt_version",
  "fitted": {...}, "workloads": {name: {"none"|"rotations"|"all": T}}}`. A
  temperature fitted on one model's logits means nothing on another's, so the
  file names what it was fitted on, and startup refuses it unless the model,
  revision and prompt version loaded are exactly those (`check_binding`).

Every T is a finite number, not a bool, in [T_MIN, T_MAX]. Temperature scaling
divides every score of a decision by the same T > 0, which cannot reorder them,
so the argmax never changes (a T above 1 can at most round a near-tie into an
exact tie); the native `probabilities` stay untouched (INV-1): a calibrated view
is an extra key, never a rewrite. For an order-averaged decision the view tempers
the mean per-option log-softmax that `combined.probabilities` renormalises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, Sequence

from .averaging import METHODS
from .numerics import softmax

T_MIN, T_MAX = 0.05, 20.0
VARIABLE = "SEMIF_CALIBRATION"
PLAIN_METHOD = "none"
BINDING_KEYS = ("model", "revision", "prompt_version")
BOUND_KEYS = frozenset({*BINDING_KEYS, "fitted", "workloads"})


class BindingMismatch(ValueError):
    """A bound calibration file names another model, revision or prompt version (startup refuses)."""


@dataclass(frozen=True)
class Binding:
    """What a bound file was fitted on."""

    model: str
    revision: str
    prompt_version: str


@dataclass(frozen=True)
class Table(Mapping[str, Mapping[str, float]]):
    """workload -> {method: T}, with the binding and fit summary of a bound file (None for plain)."""

    temperatures: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    binding: Binding | None = None
    fitted: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        frozen = {name: MappingProxyType(dict(methods)) for name, methods in self.temperatures.items()}
        object.__setattr__(self, "temperatures", MappingProxyType(frozen))

    def __getitem__(self, workload: str) -> Mapping[str, float]:
        return self.temperatures[workload]

    def __iter__(self) -> Iterator[str]:
        return iter(self.temperatures)

    def __len__(self) -> int:
        return len(self.temperatures)

    def methods(self) -> dict[str, frozenset[str]]:
        """workload -> the methods it holds a temperature for (what the request model checks)."""
        return {name: frozenset(methods) for name, methods in self.temperatures.items()}

    def describe(self) -> dict[str, Any]:
        """The /health view: every workload with its methods, and the file's binding."""
        return {
            "binding": None if self.binding is None else asdict(self.binding),
            "fitted": None if self.fitted is None else dict(self.fitted),
            "workloads": {name: dict(methods) for name, methods in sorted(self.temperatures.items())},
        }


def _temperature(where: str, value: Any) -> float:
    # bool is an int subclass, and a tiny T overflowed to NaN once (S8).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{VARIABLE}: {where} needs a number, got {value!r}")
    # Range first: math.isfinite on a JSON integer too big for a float raises
    # OverflowError, not the ValueError naming the variable; NaN fails the range too.
    if not (T_MIN <= value <= T_MAX and math.isfinite(value)):
        raise ValueError(f"{VARIABLE}: {where} temperature {value!r} is not in [{T_MIN}, {T_MAX}]")
    return float(value)


def _read(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as error:
        raise ValueError(f"{VARIABLE}: cannot read {path!r}: {error.strerror}") from None
    except ValueError as error:
        raise ValueError(f"{VARIABLE}: {path!r} is not valid JSON: {error}") from None


def _plain(table: Any, path: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ValueError(f"{VARIABLE}: {path!r} must hold a JSON object {{workload: temperature}}")
    return {str(name): _temperature(f"workload {name!r}", value) for name, value in table.items()}


def is_bound(document: Any) -> bool:
    """The bound form carries an object under "workloads"; a plain file maps names to numbers."""
    return isinstance(document, dict) and isinstance(document.get("workloads"), dict)


def _nonempty(document: Mapping[str, Any], key: str) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{VARIABLE}: a bound file needs {key!r} as a nonempty string, got {value!r}")
    return value


def _methods(name: str, methods: Any) -> dict[str, float]:
    if not isinstance(methods, dict) or not methods:
        raise ValueError(f"{VARIABLE}: workload {name!r} needs an object {{method: temperature}} with at least one method")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"{VARIABLE}: workload {name!r} names unknown method(s) {unknown}; methods are {', '.join(METHODS)}")
    return {method: _temperature(f"workload {name!r} method {method!r}", value) for method, value in methods.items()}


def _fitted(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{VARIABLE}: 'fitted' must be an object, got {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)  # /health renders it; a NaN there would break the response
    except ValueError:
        raise ValueError(f"{VARIABLE}: 'fitted' holds a non-finite number") from None
    return value


def bound(document: dict[str, Any]) -> Table:
    """The bound form, validated: binding strings, known methods, every T in range."""
    unknown = sorted(set(document) - BOUND_KEYS)
    if unknown:
        raise ValueError(f"{VARIABLE}: a bound file has unknown key(s) {unknown}; keys are {', '.join(sorted(BOUND_KEYS))}")
    binding = Binding(*(_nonempty(document, key) for key in BINDING_KEYS))
    workloads = {str(name): _methods(name, methods) for name, methods in document["workloads"].items()}
    return Table(workloads, binding, _fitted(document.get("fitted")))


def plain(temperatures: Mapping[str, float]) -> Table:
    """The plain form as a table: each T is its workload's `none` temperature."""
    return Table({name: {PLAIN_METHOD: _temperature(f"workload {name!r}", value)} for name, value in temperatures.items()})


def load(path: str) -> Table:
    """Read either form from `path`; raise ValueError naming the variable and what is wrong."""
    document = _read(path)
    return bound(document) if is_bound(document) else plain(_plain(document, path))


def as_table(value: Table | Mapping[str, float]) -> Table:
    """A Table as it is, or a plain `{workload: T}` mapping validated into one."""
    return value if isinstance(value, Table) else plain(value)


def check_binding(table: Table, model: str, revision: str, prompt_version: str | None) -> None:
    """Refuse a bound table unless it was fitted on exactly the model, revision and prompt loaded.

    model and revision are SEMIF_MODEL and SEMIF_REVISION (the torch engine loads exactly
    that snapshot); prompt_version is the scorer package's, from its health facts.
    """
    if table.binding is None:
        return
    loaded = {
        "model": (model, "SEMIF_MODEL"),
        "revision": (revision, "SEMIF_REVISION"),
        "prompt_version": (prompt_version, "the scorer's prompt_version"),
    }
    for key, (actual, source) in loaded.items():
        expected = getattr(table.binding, key)
        if expected != actual:
            raise BindingMismatch(f"{VARIABLE} is bound to {key} {expected!r}, but {source} is {actual!r}")


def tempered_softmax(logits: Sequence[float], temperature: float) -> list[float]:
    """softmax(logits / T); max-shifted, so extreme logits stay finite."""
    return softmax([value / temperature for value in logits])


def calibrated_view(result: Mapping[str, Any], workload: str, temperature: float) -> dict[str, Any]:
    """The `calibrated` key for one SemIf result."""
    return {
        "workload": workload,
        "temperature": temperature,
        "probabilities": tempered_softmax(result["option_logits"], temperature),
    }


def combined_view(workload: str, method: str, temperature: float, mean_log_probabilities: Sequence[float]) -> dict[str, Any]:
    """`combined.calibrated` for an averaged decision: softmax(mean per-option log-softmax / T)."""
    return {
        "workload": workload,
        "method": method,
        "temperature": temperature,
        "probabilities": tempered_softmax(mean_log_probabilities, temperature),
    }
