"""The orderings methods a decision may carry, and what each asks of the server: the one table that
validation, configuration, the calibration file, averaging and the views consult (a method is one entry).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from . import prior as position_prior

Orders = Callable[[int], list[tuple[int, ...]]]


@dataclass(frozen=True)
class Method:
    """One orderings method: the rows it scores and what a request and the calibration file must hold for it."""

    orders: Orders  # index orders over n options, identity first: one engine row each
    averaged: bool = True  # its view is `combined` over those rows; else the scorer's native result
    # The view divides out the workload's position prior fitted for n: the request needs a workload
    # holding one, and the calibration file's temperature for the method needs its priors.
    needs_prior: bool = False
    # Under a workload, a temperature fitted for the method is required; else it is optional
    # (the view is calibrated only where one is fitted).
    temperature_required: bool = True


def _caller(n: int) -> list[tuple[int, ...]]:
    return [tuple(range(n))]


def _rotations(n: int) -> list[tuple[int, ...]]:
    """The n cyclic shifts, shift k = (k, k+1, ..., k+n-1) mod n."""
    return [tuple((k + i) % n for i in range(n)) for k in range(n)]


def _all(n: int) -> list[tuple[int, ...]]:
    return list(itertools.permutations(range(n)))  # lexicographic: identity first


TABLE: Mapping[str, Method] = MappingProxyType(
    {
        "none": Method(_caller, averaged=False),
        "rotations": Method(_rotations),
        "all": Method(_all),
        position_prior.METHOD: Method(_caller, needs_prior=True, temperature_required=False),
    }
)
ORDERINGS: tuple[str, ...] = tuple(TABLE)  # every value a decision's `orderings` may take
