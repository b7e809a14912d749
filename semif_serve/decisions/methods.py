"""The orderings methods a decision may carry, each the one object that holds its rules.

Rules:
1. A method is a `Method` member: its wire name and its `Rules`: the rows it scores for n options
   (`orders`), its option cap, whether its view is averaged, and what it needs of the request's
   workload in the calibration (`needs`, checked by `lacks`). Validation, configuration, the calibration file,
   averaging, the views and the client ask the method; none tests a method's name for a rule.
2. A new method is one member here plus its own code, nothing spread elsewhere.
3. A member is its wire name (a `str`), so it compares, hashes, renders and labels as that name.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

Orders = Callable[[int], list[tuple[int, ...]]]

MAX_OPTIONS = 16  # SemIf's letters A..P
MAX_ALL_OPTIONS = 4  # "all" scores n! rows: 24 at four options, 120 at five


class Need(enum.Enum):
    """What a method may need of the request's workload for n options (and, first, a workload)."""

    WORKLOAD = "workload"  # the method reads the workload's fit, and the request names none
    TEMPERATURE = "temperature"  # a temperature fitted for the method itself
    PRIOR = "prior"  # the position prior fitted for n
    THRESHOLD = "threshold"  # the escalation threshold fitted for n, beside the prior


@dataclass(frozen=True)
class Fit:
    """What the calibration holds for one workload: the methods it has a temperature for, and the
    option counts it has a position prior for."""

    temperatures: frozenset[str]
    priors: frozenset[int] = frozenset()
    thresholds: frozenset[int] = frozenset()  # the option counts whose prior has a threshold


def _caller(n: int) -> list[tuple[int, ...]]:
    return [tuple(range(n))]


def _rotations(n: int) -> list[tuple[int, ...]]:
    """The n cyclic shifts, shift k = (k, k+1, ..., k+n-1) mod n."""
    return [tuple((k + i) % n for i in range(n)) for k in range(n)]


def _all(n: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(n)))  # lexicographic: identity first


@dataclass(frozen=True)
class Rules:
    """A method's rules, as its member declares them (keywords, so each entry reads as what it sets)."""

    orders: Orders  # index orders over n options, identity first: one engine row each
    averaged: bool = True  # its view is `combined` over its rows; else the scorer's native result
    max_options: int = MAX_OPTIONS
    needs: tuple[Need, ...] = (Need.TEMPERATURE,)  # of the workload's fit, once a workload is named
    tempered: bool = True  # a temperature may be fitted for it (the calibration file's method keys)
    # The first engine call scores its first order alone; the rest only where that answer is
    # unsure, in later calls (decisions/adaptive.py). Its orders are its worst case.
    escalates: bool = False


class Method(enum.StrEnum):
    """One orderings method: the rows it scores and what a request and the calibration file must hold for it."""

    rules: Rules

    def __new__(cls, name: str, rules: Rules) -> Method:
        member = str.__new__(cls, name)
        member._value_ = name
        member.rules = rules
        return member

    NONE = "none", Rules(_caller, averaged=False)
    ROTATIONS = "rotations", Rules(_rotations)
    ALL = "all", Rules(_all, max_options=MAX_ALL_OPTIONS)
    # PriDe: one row in the caller's order, the workload's prior for n divided out; the workload
    # names the prior, and its temperature for the method is optional.
    PRIOR = "prior", Rules(_caller, needs=(Need.PRIOR,))
    # Extension: the prior's one row; where its margin is below the workload's threshold for n, the
    # half turn, and the other rotations where the two disagree (decisions/adaptive.py); its views
    # borrow the temperatures of "prior" and "rotations".
    ADAPTIVE = (
        "adaptive",
        Rules(_rotations, needs=(Need.PRIOR, Need.THRESHOLD), tempered=False, escalates=True),
    )

    def __repr__(self) -> str:
        return repr(self.value)  # messages quote a method as the name the caller sent

    @property
    def needs_prior(self) -> bool:
        """Its view divides out the workload's position prior fitted for n."""
        return Need.PRIOR in self.rules.needs

    def first_call(self, n: int) -> int:
        """The rows over n options it scores in the request's first engine call."""
        return 1 if self.rules.escalates else len(self.orders(n))

    def orders(self, n: int) -> list[tuple[int, ...]]:
        """The index orders it scores over n options, identity first: one engine row each. Above the
        method's option cap it raises rather than build them (16! would never finish); the request
        model's 422 comes first."""
        if n > self.rules.max_options:
            raise ValueError(
                f"orderings {self!r} allows at most {self.rules.max_options} options, got {n}"
            )
        return self.rules.orders(n)

    def lacks(self, fit: Fit | None, n: int | None) -> Need | None:
        """The first thing the method needs that the request's workload (its `fit` in the calibration;
        None: the request names no workload) does not hold for n options; None when it holds all.
        `n` None asks for any option count (the server's default method, checked before any request).
        Without a workload no calibration applies, so only a method that reads the workload's prior
        needs one."""
        if fit is None:
            return Need.WORKLOAD if self.needs_prior else None
        for need in self.rules.needs:
            if need is Need.TEMPERATURE and self.value not in fit.temperatures:
                return need
            if need is Need.PRIOR and not _holds(fit.priors, n):
                return need
            if need is Need.THRESHOLD and not _holds(fit.thresholds, n):
                return need
        return None


def _holds(counts: frozenset[int], n: int | None) -> bool:
    """Fitted for n options, or (n None) for some option count."""
    return n in counts if n is not None else bool(counts)


BY_NAME: Mapping[str, Method] = MappingProxyType({method.value: method for method in Method})
ORDERINGS: tuple[str, ...] = tuple(BY_NAME)  # every value a decision's `orderings` may take


def named(name: str) -> Method:
    """The method a name stands for (a `Method` is its own name); anything else is a ValueError."""
    if name not in BY_NAME:
        raise ValueError(f"orderings must be one of {ORDERINGS}, got {name!r}")
    return BY_NAME[name]
