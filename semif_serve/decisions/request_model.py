"""The request model: JSON bodies in, validated decisions out, before any scoring.

Everything the scorer would refuse for its shape is refused here first with a
422 naming the field, so a bad request never reaches the engine thread.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import ApiError, excerpt
from . import averaging
from .methods import BY_NAME, MAX_OPTIONS, ORDERINGS, Fit, Method, Need

EXPANDED_ID = re.compile(r"#o\d+")
DECIDE_KEYS = {"id", "state", "question", "options", "workload", "orderings"}
SHARED_KEYS = {"state", "decisions", "workload"}
DECISION_KEYS = {"id", "question", "options", "orderings"}
OPTION_KEYS = {"id", "description"}


@dataclass(frozen=True)
class Decision:
    """One SemIf row and its orderings method (the request's `orderings` value). Its counts are
    worked out once, on first use, and kept: the row cap, the plan and the views each read them."""

    row: dict[str, Any]
    method: Method

    @functools.cached_property
    def averaged(self) -> bool:
        return self.method.rules.averaged

    @functools.cached_property
    def row_count(self) -> int:
        """The engine rows it may expand to, one per ordering: an escalating method's worst case."""
        return averaging.row_count(len(self.row["options"]), self.method)

    @functools.cached_property
    def first_count(self) -> int:
        """The rows it sends in the request's first engine call."""
        return self.method.first_call(len(self.row["options"])) if self.averaged else 1

    def rows(self) -> list[dict[str, Any]]:
        """The rows it sends in the first engine call: itself, or one per ordering (an escalating
        method: its first ordering)."""
        if not self.averaged:
            return [self.row]
        return averaging.expand(self.row, self.method)[: self.first_count]


# Extension: the decisions of a request that scored more than their first call's rows (orderings
# "adaptive"), each index with the rows it scored in all; empty where none did.
Escalated = Mapping[int, int]
NONE_ESCALATED: Escalated = MappingProxyType({})


@dataclass(frozen=True)
class DecideRequest:
    """A validated /decide or /decide/shared body, and the engine call it makes: each decision owns
    a slice of that call's rows, in order (`slices`). *Extension:* a decision of an escalating method
    may add its other rows in later calls (decisions/adaptive.py); `planned` then gives each its
    rows of all of them."""

    decisions: tuple[Decision, ...]
    workload: str | None
    shared: bool
    slices: tuple[slice, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "slices", _slices([decision.first_count for decision in self.decisions])
        )

    @property
    def averaged(self) -> bool:
        return any(decision.averaged for decision in self.decisions)

    @property
    def row_count(self) -> int:
        """Every row the request may score, an escalating decision at its worst case: what the row
        cap and the wait budget count."""
        return sum(decision.row_count for decision in self.decisions)

    @property
    def kind(self) -> str:
        """The engine call: direct for a plain /decide, else shared over all rows."""
        return "shared" if self.shared or self.averaged else "direct"

    def rows(self) -> list[dict[str, Any]]:
        """The first engine call's rows, each decision's slice in turn."""
        return [row for decision in self.decisions for row in decision.rows()]

    def planned(
        self, results: int, escalated: Escalated = NONE_ESCALATED
    ) -> Iterator[tuple[Decision, slice]]:
        """Each decision with its slice of `results` (their count, checked against the rows): its first
        call's rows, or where it escalated (its index in `escalated`) the rows it scored, in order."""
        counts = [
            escalated.get(index, decision.first_count)
            for index, decision in enumerate(self.decisions)
        ]
        if results != sum(counts):
            raise RuntimeError(f"scorer returned {results} results for {sum(counts)} rows")
        return zip(self.decisions, _slices(counts))


def _slices(counts: list[int]) -> tuple[slice, ...]:
    """Consecutive slices of these lengths."""
    ends = list(itertools.accumulate(counts))
    return tuple(map(slice, [0, *ends[:-1]], ends))


@dataclass(frozen=True)
class Limits:
    """What the request model enforces from the settings."""

    max_decisions: int
    workloads: frozenset[str]
    # workload -> the orderings methods it has a temperature for; a workload absent
    # here has only "none" (the contract's plain {workload: T} table).
    methods: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Extension: workload -> the option counts it has a position prior for.
    priors: Mapping[str, frozenset[int]] = field(default_factory=dict)
    # Extension: workload -> the option counts whose prior has an escalation threshold.
    thresholds: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def fit(self, workload: str) -> Fit:
        """What the calibration holds for `workload`, as a method checks it."""
        return Fit(
            self.methods.get(workload, frozenset({"none"})),
            self.priors.get(workload, frozenset()),
            self.thresholds.get(workload, frozenset()),
        )


def invalid(message: str, param: str | None = None) -> ApiError:
    """A 422; `param` is the JSON path to blame, where a caller names one (System One's envelope does)."""
    return ApiError("invalid_request", message, param=param)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    """A JSON number as a double; one that overflows to infinity is refused like NaN."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {excerpt(text, 40)} overflows a double")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {excerpt(key, 40)!r}")
        result[key] = value
    return result


def parse_json(
    body: bytes, pairs_hook: Callable[[list[tuple[str, Any]]], Any] = _unique_keys
) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity (nor a number that overflows to it), no duplicate keys,
    no lone surrogate, bounded nesting. `pairs_hook` builds each object: the default refuses a
    duplicate key at once; a caller that names the offending path passes one that records it."""
    try:
        text = body.decode("utf-8")
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=pairs_hook,
        )
    except UnicodeDecodeError:
        raise invalid("body is not UTF-8") from None
    except RecursionError:
        raise invalid("body is nested too deeply") from None
    except ValueError as error:
        raise invalid(f"body is not valid JSON: {excerpt(str(error), 120)}") from None
    if (
        "\\u" in text
    ):  # only an escape like \ud800 can decode to a lone surrogate, which no UTF-8 carries
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise invalid("body holds a lone surrogate escape (\\ud800-\\udfff)") from None
    return value


def _object(value: Any, where: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{where} must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise invalid(
            f"{where} has unknown field(s): {', '.join(excerpt(key, 40) for key in unknown[:5])}"
        )
    missing = sorted(required - set(value))
    if missing:
        raise invalid(f"{where} is missing field(s): {', '.join(missing)}")
    return value


def _nonempty_string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(f"{where} must be a nonempty string")
    return value


def checked_state(value: Any, param: str | None = None) -> Any:
    if not isinstance(value, (str, dict, list)) or not value:
        raise invalid("state must be a nonempty string, object or array", param)
    return value


def _options(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_OPTIONS:
        raise invalid(f"{where}.options must be an array of 2..{MAX_OPTIONS} options")
    options = []
    for index, item in enumerate(value):
        option = _object(item, f"{where}.options[{index}]", OPTION_KEYS, OPTION_KEYS)
        if not isinstance(option["id"], str) or not isinstance(option["description"], str):
            raise invalid(f"{where}.options[{index}] needs string id and description")
        options.append({"id": option["id"], "description": option["description"]})
    if len({option["id"] for option in options}) != len(options):
        raise invalid(f"{where}.options ids must be unique")
    return options


def checked_orderings(
    value: Any, options: list[dict[str, str]], field: str, param: str | None = None
) -> Method:
    """`value` as the orderings method for these options; `field` names where it came from in the message."""
    if not isinstance(value, str) or value not in BY_NAME:
        raise invalid(f"{field} must be one of {', '.join(ORDERINGS)}", param)
    method = BY_NAME[value]
    if len(options) > method.rules.max_options:
        raise invalid(
            f'{field} "{value}" allows at most {method.rules.max_options} options, got {len(options)}',
            param,
        )
    return method


def _decision(item: Mapping[str, Any], state: Any, where: str) -> Decision:
    options = _options(item["options"], where)
    row = {
        "id": _nonempty_string(item["id"], f"{where}.id"),
        "state": state,
        "question": _nonempty_string(item["question"], f"{where}.question"),
        "options": options,
    }
    return Decision(
        row=row,
        method=checked_orderings(item.get("orderings", "none"), options, f"{where}.orderings"),
    )


def checked_workload(value: Any, limits: Limits, param: str | None = None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in limits.workloads:
        raise invalid(
            f"unknown workload {excerpt(value, 60)!r}; known: {', '.join(sorted(limits.workloads)) or 'none'}",
            param,
        )
    return value


def check_request(request: DecideRequest, limits: Limits, param: str | None = None) -> None:
    """Every expanded row counts toward the cap, each decision's method finds what it needs, and
    expanded ids must stay unambiguous."""
    rows = request.row_count
    if rows > limits.max_decisions:
        raise invalid(
            f"the request expands to {rows} rows; at most {limits.max_decisions} are allowed", param
        )
    check_fit(request.workload, request.decisions, limits, param)
    ids = [d.row["id"] for d in request.decisions]
    if len(set(ids)) != len(ids):
        raise invalid("decision ids must be unique", param)
    if request.averaged:
        clashing = [i for i in ids if EXPANDED_ID.search(i)]
        if clashing:
            raise invalid(
                f"decision id {excerpt(clashing[0], 60)!r} contains '#o<digits>', reserved for orderings",
                param,
            )


def check_fit(
    workload: str | None, decisions: tuple[Decision, ...], limits: Limits, param: str | None = None
) -> None:
    """Each decision's method asked whether the workload holds what it needs for the decision's n.
    A workload calibrates a decision only with a temperature fitted for its method, where the method
    requires one; a method that debiases by the prior needs the workload to hold one for n: a prior
    is fitted per workload and per n, and a decision that cannot be debiased is refused, never
    answered undebiased."""
    fit = limits.fit(workload) if workload is not None else None
    for decision in decisions:
        n = len(decision.row["options"])
        lack = decision.method.lacks(fit, n)
        if lack is not None:
            raise invalid(_lacking(lack, workload, fit, decision, n), param)


def _lacking(lack: Need, workload: str | None, fit: Fit | None, decision: Decision, n: int) -> str:
    """The refusal naming what the decision's method lacks."""
    name, method = excerpt(decision.row["id"], 60), decision.method
    if workload is None or fit is None:
        return (
            f'decision {name!r} has orderings "{method}" over {n} options, which needs a workload '
            "naming the prior; the request names no workload"
        )
    if lack is Need.THRESHOLD:
        return (
            f"workload {excerpt(workload, 60)!r} has no threshold for {n} options (decision {name!r}), "
            f'which orderings "{method}" needs beside the prior; it has thresholds for: '
            f"{', '.join(str(count) for count in sorted(fit.thresholds)) or 'no option count'}"
        )
    if lack is Need.TEMPERATURE:
        return (
            f"workload {excerpt(workload, 60)!r} has no temperature for method {method!r} "
            f"(decision {name!r}); it has: {', '.join(sorted(fit.temperatures)) or 'none at all'}"
        )
    return (
        f"workload {excerpt(workload, 60)!r} has no prior for {n} options (decision {name!r}); "
        f"it has priors for: {', '.join(str(count) for count in sorted(fit.priors)) or 'no option count'}"
    )


def parse_decide(body: bytes, limits: Limits) -> DecideRequest:
    """A /decide body: one SemIf row, optional workload and orderings."""
    data = _object(parse_json(body), "body", DECIDE_KEYS, {"id", "state", "question", "options"})
    decision = _decision(data, checked_state(data["state"]), "body")
    request = DecideRequest(
        (decision,), checked_workload(data.get("workload"), limits), shared=False
    )
    check_request(request, limits)
    return request


def parse_shared(body: bytes, limits: Limits) -> DecideRequest:
    """A /decide/shared body: one state and 1..max decisions over it."""
    data = _object(parse_json(body), "body", SHARED_KEYS, {"state", "decisions"})
    state = checked_state(data["state"])
    items = data["decisions"]
    if not isinstance(items, list) or not 1 <= len(items) <= limits.max_decisions:
        raise invalid(f"decisions must be an array of 1..{limits.max_decisions} entries")
    decisions = tuple(
        _decision(
            _object(item, f"decisions[{i}]", DECISION_KEYS, {"id", "question", "options"}),
            state,
            f"decisions[{i}]",
        )
        for i, item in enumerate(items)
    )
    request = DecideRequest(decisions, checked_workload(data.get("workload"), limits), shared=True)
    check_request(request, limits)
    return request
