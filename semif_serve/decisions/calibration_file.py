"""The calibration file (SEMIF_CALIBRATION) read into a `Table`, and a fitted file's binding to its model.

Rules: this module owns the file (both its forms) and the binding, and alone reads it (`read`:
the server at startup, service/reload.py on SIGHUP; the settings hold its path only);
calibration.py applies a table's temperatures. It knows nothing of HTTP, the engine or torch; the request model refuses
a workload or method the table lacks before scoring.

Theory of operation. `SEMIF_CALIBRATION` names a JSON file in one of two forms:

* plain (the contract's): `{workload: T}`; T is the temperature of method `none`
  (decisions scored in the caller's order only);
* bound (an extension): `{"model", "revision", "prompt_version",
  "fitted": {...}, "workloads": {name: {"none"|"rotations"|"all": T}}}`. A
  temperature fitted on one model's logits means nothing on another's, so the
  file names what it was fitted on, and startup refuses it unless the model,
  revision and prompt version loaded are exactly those (`check_binding`).
  *Extension:* and the dtype served: an optional `"dtype"` (float32 or
  bfloat16; absent means float32, so every earlier file loads as it did), since
  bfloat16 logits are not float32's.

*Extension:* the bound form may also hold `"priors": {workload: {"<n>":
{"prior": [p_0..p_{n-1}], "decisions": k}}}`, PriDe's position prior per workload and
option count (decisions/prior.py fits and applies it), under the same binding. A workload may have
priors and no temperatures, so a bound file needs "workloads" or "priors" (or both); a
workload's temperature for method "prior" needs its priors. Every file that loaded before
loads unchanged: a plain file's values are numbers, so neither key can hold an object there.
Each prior is refused at startup unless it has n entries, all finite and > 0, summing to 1
within prior.SUM_TOLERANCE; n is a decimal 2..16 without leading zeros. *Extension:* an entry
may hold `"threshold": t`, orderings "adaptive"'s escalation threshold for that (workload, n),
fitted with the prior (a new prior means a new threshold): a finite number in [0, 1], not a
bool. A prior without one serves "prior", not "adaptive".

Every T is a finite number, not a bool, in [T_MIN, T_MAX]. Temperature scaling
divides every score of a decision by the same T > 0, which cannot reorder them,
so the argmax never changes (a T above 1 can at most round a near-tie into an
exact tie); the native `probabilities` stay untouched (INV-1): a calibrated view
is an extra key, never a rewrite. For an order-averaged decision the view tempers
the mean per-option log-softmax that `combined.probabilities` renormalises.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from . import prior as position_prior
from .methods import BY_NAME, MAX_OPTIONS, Fit

T_MIN, T_MAX = 0.05, 20.0
VARIABLE = "SEMIF_CALIBRATION"
PLAIN_METHOD = "none"
BINDING_KEYS = ("model", "revision", "prompt_version")
DTYPES = ("float32", "bfloat16")
DEFAULT_DTYPE = (
    "float32"  # what a bound file without "dtype" was fitted in: the CPU's only dtype then
)
BOUND_KEYS = frozenset({*BINDING_KEYS, "dtype", "fitted", "workloads", "priors"})
PRIOR_KEYS = frozenset({"prior", "decisions"})
THRESHOLD_KEY = (
    "threshold"  # optional beside them: the escalation threshold of orderings "adaptive"
)
# The methods a temperature may be fitted for: a workload's method keys in the bound form.
ORDERINGS: tuple[str, ...] = tuple(
    name for name, method in BY_NAME.items() if method.rules.tempered
)
EMPTY: Mapping[str, float] = MappingProxyType({})


class Refused(ValueError):
    """The calibration file cannot be served: startup exits 2 (as a bad setting), a reload keeps the old table."""


class BindingMismatch(Refused):
    """A bound calibration file names another model, revision, prompt version or dtype (startup refuses)."""


@dataclass(frozen=True)
class Binding:
    """What a bound file was fitted on."""

    model: str
    revision: str
    prompt_version: str
    dtype: str = DEFAULT_DTYPE


@dataclass(frozen=True)
class FittedPrior:
    """One fitted (workload, n): the prior over n positions, how many decisions it came from and
    (extension) the escalation threshold fitted with it, if any."""

    prior: tuple[float, ...]
    decisions: int
    threshold: float | None = None


@dataclass(frozen=True)
class Table(Mapping[str, Mapping[str, float]]):
    """workload -> {method: T}, with the binding and fit summary of a bound file (None for plain),
    and (extension) workload -> {n: FittedPrior}. Every workload either names is a key; one with
    priors only maps to no temperatures."""

    temperatures: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    binding: Binding | None = None
    fitted: Mapping[str, Any] | None = None
    priors: Mapping[str, Mapping[int, FittedPrior]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = {
            name: MappingProxyType(dict(methods)) for name, methods in self.temperatures.items()
        }
        object.__setattr__(self, "temperatures", MappingProxyType(frozen))
        priors = {name: MappingProxyType(dict(counts)) for name, counts in self.priors.items()}
        object.__setattr__(self, "priors", MappingProxyType(priors))

    def __getitem__(self, workload: str) -> Mapping[str, float]:
        if workload in self.temperatures:
            return self.temperatures[workload]
        if workload in self.priors:
            return EMPTY
        raise KeyError(workload)

    def __iter__(self) -> Iterator[str]:
        yield from self.temperatures
        yield from (name for name in self.priors if name not in self.temperatures)

    def __len__(self) -> int:
        return len(self.temperatures.keys() | self.priors.keys())

    def methods(self) -> dict[str, frozenset[str]]:
        """workload -> the methods it holds a temperature for (what the request model checks)."""
        return {name: frozenset(self[name]) for name in self}

    def prior_counts(self) -> dict[str, frozenset[int]]:
        """workload -> the option counts it holds a prior for (what the request model checks)."""
        return {name: frozenset(counts) for name, counts in self.priors.items()}

    def threshold_counts(self) -> dict[str, frozenset[int]]:
        """workload -> the option counts whose prior has a threshold (what the request model checks)."""
        return {
            name: frozenset(n for n, entry in counts.items() if entry.threshold is not None)
            for name, counts in self.priors.items()
        }

    def fit(self, workload: str) -> Fit:
        """What the table holds for `workload` (one it holds), as a method checks it."""
        return Fit(
            frozenset(self[workload]),
            frozenset(self.priors.get(workload, {})),
            self.threshold_counts().get(workload, frozenset()),
        )

    def describe(self) -> dict[str, Any]:
        """The /health view: every workload with its methods, the option counts with a prior (and
        where any is fitted, each (workload, n)'s escalation threshold), and the file's binding."""
        described = {
            "binding": None if self.binding is None else asdict(self.binding),
            "fitted": None if self.fitted is None else dict(self.fitted),
            "workloads": {
                name: dict(methods) for name, methods in sorted(self.temperatures.items())
            },
            "priors": {name: sorted(counts) for name, counts in sorted(self.priors.items())},
        }
        thresholds = {
            name: {
                str(n): entry.threshold
                for n, entry in sorted(counts.items())
                if entry.threshold is not None
            }
            for name, counts in sorted(self.priors.items())
        }
        fitted = {name: entries for name, entries in thresholds.items() if entries}
        # Extension: only where the file holds a threshold, so a file without one shows as before.
        return {**described, "thresholds": fitted} if fitted else described


def _temperature(where: str, value: Any) -> float:
    # bool is an int subclass, and a tiny T overflowed to NaN once (S8).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{VARIABLE}: {where} needs a number, got {value!r}")
    # Range first: math.isfinite on a JSON integer too big for a float raises
    # OverflowError, not the ValueError naming the variable; NaN fails the range too.
    if not (T_MIN <= value <= T_MAX and math.isfinite(value)):
        raise ValueError(f"{VARIABLE}: {where} temperature {value!r} is not in [{T_MIN}, {T_MAX}]")
    return float(value)


def _bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise ValueError(f"{VARIABLE}: cannot read {path!r}: {error.strerror}") from None


def _document(data: bytes, path: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as error:
        raise ValueError(f"{VARIABLE}: {path!r} is not valid JSON: {error}") from None


def _plain(table: Any, path: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ValueError(f"{VARIABLE}: {path!r} must hold a JSON object {{workload: temperature}}")
    return {str(name): _temperature(f"workload {name!r}", value) for name, value in table.items()}


def is_bound(document: Any) -> bool:
    """The bound form carries an object under "workloads" or "priors"; a plain file maps names to numbers."""
    return isinstance(document, dict) and any(
        isinstance(document.get(key), dict) for key in ("workloads", "priors")
    )


def _nonempty(document: Mapping[str, Any], key: str) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(
            f"{VARIABLE}: a bound file needs {key!r} as a nonempty string, got {value!r}"
        )
    return value


def _dtype(document: Mapping[str, Any]) -> str:
    value = document.get("dtype", DEFAULT_DTYPE)
    if value not in DTYPES:
        raise ValueError(
            f"{VARIABLE}: a bound file's 'dtype' must be one of {', '.join(DTYPES)}, got {value!r}"
        )
    return str(value)


def _methods(name: str, methods: Any) -> dict[str, float]:
    if not isinstance(methods, dict) or not methods:
        raise ValueError(
            f"{VARIABLE}: workload {name!r} needs an object {{method: temperature}} with at least one method"
        )
    unknown = sorted(set(methods) - set(ORDERINGS))
    if unknown:
        raise ValueError(
            f"{VARIABLE}: workload {name!r} names unknown method(s) {unknown}; methods are {', '.join(ORDERINGS)}"
        )
    return {
        method: _temperature(f"workload {name!r} method {method!r}", value)
        for method, value in methods.items()
    }


def _fitted(value: Any) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{VARIABLE}: 'fitted' must be an object, got {type(value).__name__}")
    try:
        json.dumps(
            value, allow_nan=False
        )  # /health renders it; a NaN there would break the response
    except ValueError:
        raise ValueError(f"{VARIABLE}: 'fitted' holds a non-finite number") from None
    return value


def _object(document: Mapping[str, Any], key: str, shape: str) -> dict[str, Any]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(
            f"{VARIABLE}: {key!r} must be an object {shape}, got {type(value).__name__}"
        )
    return value


def _option_count(name: str, key: str) -> int:
    """An entry's key: n as a decimal without sign or leading zero, 2..MAX_OPTIONS (one spelling per n;
    no request can ask a prior for more options than SemIf has letters)."""
    if not (
        key.isascii() and key.isdigit() and not key.startswith("0") and 2 <= int(key) <= MAX_OPTIONS
    ):
        raise ValueError(
            f"{VARIABLE}: priors {name!r} entry {key!r} must be an option count 2..{MAX_OPTIONS} "
            "written as a plain decimal"
        )
    return int(key)


def _prior(name: str, key: str, value: Any) -> tuple[int, FittedPrior]:
    """One entry `"<n>": {prior, decisions}`, as (n, FittedPrior)."""
    n = _option_count(name, key)
    where = f"{VARIABLE}: priors {name!r} entry {key!r}"
    if not isinstance(value, dict) or not PRIOR_KEYS <= set(value) <= {*PRIOR_KEYS, THRESHOLD_KEY}:
        raise ValueError(
            f"{where} must be an object with the keys decisions, prior and optionally threshold"
        )
    decisions = value["decisions"]
    if isinstance(decisions, bool) or not isinstance(decisions, int) or decisions < 1:
        raise ValueError(f"{where}: decisions must be an integer >= 1, got {decisions!r}")
    try:
        prior = position_prior.checked(value["prior"], n)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    return n, FittedPrior(prior, decisions, _threshold(where, value))


def _threshold(where: str, entry: Mapping[str, Any]) -> float | None:
    """An entry's optional escalation threshold: a finite number in [0, 1], not a bool (a margin of
    probabilities lies there; anything else was not fitted by `bench prior`). Absent: None."""
    if THRESHOLD_KEY not in entry:
        return None
    value = entry[THRESHOLD_KEY]
    # Range first, and for a number only: a JSON integer too big for a float fails it without
    # math.isfinite's OverflowError, and NaN fails both comparisons.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{where}: threshold must be a number in [0, 1], got {value!r}")
    return float(value)


def _priors(document: Mapping[str, Any]) -> dict[str, dict[int, FittedPrior]]:
    """The optional "priors" object: every workload with at least one option count, each entry checked."""
    priors = {}
    for name, entries in _object(document, "priors", "{workload: {n: {prior, decisions}}}").items():
        if not isinstance(entries, dict) or not entries:
            raise ValueError(
                f"{VARIABLE}: priors {name!r} needs an object {{n: {{prior, decisions}}}} with at least one entry"
            )
        priors[str(name)] = dict(_prior(name, key, value) for key, value in entries.items())
    return priors


def bound(document: dict[str, Any]) -> Table:
    """The bound form, validated: binding strings, known methods, every T in range, every prior sound."""
    unknown = sorted(set(document) - BOUND_KEYS)
    if unknown:
        raise ValueError(
            f"{VARIABLE}: a bound file has unknown key(s) {unknown}; keys are {', '.join(sorted(BOUND_KEYS))}"
        )
    model, revision, prompt_version = (_nonempty(document, key) for key in BINDING_KEYS)
    binding = Binding(model, revision, prompt_version, _dtype(document))
    workloads = {
        str(name): _methods(name, methods)
        for name, methods in _object(
            document, "workloads", "{workload: {method: temperature}}"
        ).items()
    }
    table = Table(workloads, binding, _fitted(document.get("fitted")), _priors(document))
    for name, methods in workloads.items():
        for method in map(BY_NAME.__getitem__, methods):
            if method.lacks(table.fit(name), None) is not None:
                raise ValueError(
                    f"{VARIABLE}: workload {name!r} has a temperature for method {method!r} "
                    "but no entry under 'priors'"
                )
    return table


def document(table: Table, binding: Binding) -> dict[str, Any]:
    """`table` as the bound form `bound` reads back, bound to `binding` (the dtype written only where it
    is not the default, so a file without one reads as it did): what an export starts from."""
    written: dict[str, Any] = {
        key: value
        for key, value in asdict(binding).items()
        if key != "dtype" or value != DEFAULT_DTYPE
    }
    if table.fitted is not None:
        written["fitted"] = dict(table.fitted)
    written["workloads"] = {name: dict(methods) for name, methods in table.temperatures.items()}
    written["priors"] = {
        name: {
            str(n): {
                key: list(value) if isinstance(value, tuple) else value
                for key, value in asdict(entry).items()
                if value is not None
            }
            for n, entry in counts.items()
        }
        for name, counts in table.priors.items()
    }
    return written


def plain(temperatures: Mapping[str, float]) -> Table:
    """The plain form as a table: each T is its workload's `none` temperature."""
    return Table(
        {
            name: {PLAIN_METHOD: _temperature(f"workload {name!r}", value)}
            for name, value in temperatures.items()
        }
    )


@dataclass(frozen=True)
class Loaded:
    """The calibration served: its table and its file's sha256 (None without a file), which
    /health and the metrics report so an operator sees which file a replica serves."""

    table: Table = field(default_factory=Table)
    sha256: str | None = None


def read(path: str | None) -> Loaded:
    """SEMIF_CALIBRATION's table and digest, both from one read of the file's bytes (so the digest
    is of exactly what is served); no path, no table. Startup calls it before the model loads
    (a refusal exits 2), a reload on SIGHUP (a refusal keeps the old table); raise Refused naming
    the variable, the file and what is wrong."""
    if path is None:
        return Loaded()
    try:
        data = _bytes(path)
        document = _document(data, path)
        table = bound(document) if is_bound(document) else plain(_plain(document, path))
    except ValueError as error:
        raise Refused(str(error)) from None
    return Loaded(table, hashlib.sha256(data).hexdigest())


def load(path: str) -> Table:
    """Read either form from `path`; raise Refused (a ValueError) naming the variable and what is wrong."""
    return read(path).table


def as_table(value: Table | Mapping[str, float]) -> Table:
    """A Table as it is, or a plain `{workload: T}` mapping validated into one."""
    return value if isinstance(value, Table) else plain(value)


def check_binding(
    table: Table,
    model: str,
    revision: str,
    prompt_version: str | None,
    dtype: str | None,
) -> None:
    """Refuse a bound table unless it was fitted on exactly the model, revision, prompt and dtype loaded.

    model and revision are SEMIF_MODEL and SEMIF_REVISION (the torch engine loads exactly
    that snapshot); prompt_version and dtype are the scorer's, from its health facts, at startup
    and on reload alike (no default: a caller that forgot the dtype would compare against
    float32). A scorer with no weights (the stub) reports no dtype, and then there is none to compare.
    """
    if table.binding is None:
        return
    loaded = {
        "model": (model, "SEMIF_MODEL"),
        "revision": (revision, "SEMIF_REVISION"),
        "prompt_version": (prompt_version, "the scorer's prompt_version"),
    }
    if dtype is not None:
        loaded["dtype"] = (dtype, "the served dtype (SEMIF_CPU_DTYPE on the CPU)")
    for key, (actual, source) in loaded.items():
        expected = getattr(table.binding, key)
        if expected != actual:
            raise BindingMismatch(
                f"{VARIABLE} is bound to {key} {expected!r}, but {source} is {actual!r}"
            )
