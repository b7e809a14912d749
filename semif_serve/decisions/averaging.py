"""Order averaging: score a decision under several option orders and combine.

SemIf reads option-letter logits, so a model that favours a position (say, "A")
biases every answer. Scoring each ordering and averaging log-probabilities per
option id cancels any additive position bias exactly, because every option sits
in every position equally often ("rotations": once; "all": (n-1)! times).

Pure arithmetic and expansion: no I/O, no torch. The request model validates
`orderings`, refuses "all" above MAX_ALL_OPTIONS with a 422, checks id
collisions and the row cap; this module only refuses what it cannot compute
(ValueError).

*Extension:* a method may need a position prior (its `Method` says so): one
ordering, the caller's, with the prior fitted per workload divided out of it
(decisions/prior.py holds that arithmetic). It reads more than the scores (METHODS keeps
those that do not; ORDERINGS is every value a decision may carry), but it is expanded
and combined like them, so its result keeps the averaged shape.

A function here takes a method as a `Method` or its wire name (a `Method` is one); every rule
it applies is the method's own (decisions/methods.py).

Tie rule (copied into the contract): `top` is the option with the highest
combined probability, an exact tie going to the option earliest in the
caller's order; each ordering's own top (for `agreement`) is the argmax of its
native `probabilities`, an exact tie likewise going to the option earliest in
the caller's order, never the ordering's, so a tie-break cannot reintroduce
position bias.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import prior as position_prior
from .methods import BY_NAME, ORDERINGS, named
from .methods import MAX_ALL_OPTIONS as MAX_ALL_OPTIONS
from .methods import MAX_OPTIONS as MAX_OPTIONS
from .numerics import log_softmax, softmax
from .views import Averaged, CalibratedView, Combined, DividedPrior

METHODS: tuple[str, ...] = tuple(name for name in ORDERINGS if not BY_NAME[name].needs_prior)


def permutations(n: int, method: str) -> list[tuple[int, ...]]:
    """Index orders, identity first, as the method writes them ('rotations': the n cyclic shifts;
    'all': every permutation, n!; the rest: [identity]); above its option cap it raises."""
    if n < 1:
        raise ValueError(f"a decision needs at least one option, got {n}")
    return named(method).orders(n)


def row_count(n: int, method: str) -> int:
    """The rows a decision over n options expands to under `method`: what the row cap counts, the
    engine call scores and each decision's slice of the results holds."""
    return len(permutations(n, method))


def expand(row: Mapping[str, Any], method: str) -> list[dict[str, Any]]:
    """One SemIf row per ordering, id f"{row['id']}#o{k}", options reordered.

    Every other key (state, question, ...) is copied as it is, so each row
    differs from the caller's only in id and option order; option objects are
    shared, not copied.
    """
    options = list(row["options"])
    return [
        {**row, "id": f"{row['id']}#o{k}", "options": [options[i] for i in order]}
        for k, order in enumerate(permutations(len(options), method))
    ]


def _first_max(option_ids: Sequence[str], score: Mapping[str, float]) -> str:
    """The highest-scoring option id, an exact tie going to the earliest in option_ids."""
    return max(option_ids, key=score.__getitem__)  # max keeps the first of equal keys


def _by_id(
    option_ids: Sequence[str], result: Mapping[str, Any]
) -> tuple[dict[str, float], dict[str, float]]:
    """(log-probs, native probabilities) of one result, keyed by option id, not position.

    The result's own `option_ids` say which option each logit belongs to; a
    result that does not cover exactly the decision's options cannot be averaged.
    """
    ids, logits, native = result["option_ids"], result["option_logits"], result["probabilities"]
    if sorted(ids) != sorted(option_ids) or not len(ids) == len(logits) == len(native):
        raise ValueError(
            f"result {result.get('id')!r} does not score exactly the options {list(option_ids)}"
        )
    if not all(math.isfinite(value) for value in [*logits, *native]):
        raise ValueError(f"result {result.get('id')!r} has a non-finite logit or probability")
    return dict(zip(ids, log_softmax(logits))), dict(zip(ids, native))


def _scored(
    row: Mapping[str, Any], method: str, results: Sequence[Mapping[str, Any]]
) -> tuple[list[str], list[tuple[dict[str, float], dict[str, float]]]]:
    """The caller's option ids and each ordering's (log-probs, native) by id, all checked."""
    option_ids = [option["id"] for option in row["options"]]
    if len(set(option_ids)) != len(option_ids):
        raise ValueError(f"decision {row['id']!r} repeats an option id: {option_ids}")
    expected = row_count(len(option_ids), method)
    if len(results) != expected:
        raise ValueError(
            f"{method!r} over {len(option_ids)} options needs {expected} results, got {len(results)}"
        )
    return option_ids, [_by_id(option_ids, result) for result in results]


def _mean(
    option_ids: Sequence[str], scored: Sequence[tuple[dict[str, float], dict[str, float]]]
) -> list[float]:
    return [math.fsum(logp[oid] for logp, _ in scored) / len(scored) for oid in option_ids]


def _debiased(
    option_ids: Sequence[str],
    results: Sequence[Mapping[str, Any]],
    scored: Sequence[tuple[dict[str, float], dict[str, float]]],
    prior: Sequence[float],
) -> list[float]:
    """log p − log prior, for a method that needs the prior: the prior is over positions, so the one result
    must hold the options in the caller's order (position i is option i)."""
    if list(results[0]["option_ids"]) != list(option_ids):
        raise ValueError(
            f"result {results[0].get('id')!r} does not score the options {list(option_ids)} in order"
        )
    return position_prior.debias(_mean(option_ids, scored), prior)


def mean_log_probabilities(
    row: Mapping[str, Any], method: str, results: Sequence[Mapping[str, Any]]
) -> list[float]:
    """Per option id, the mean of each ordering's log-softmax, in the caller's order.

    `combined.probabilities` is its softmax; a calibrated view tempers it. Kept in log
    space, so an option whose probability underflows to 0 still has a finite score.
    """
    option_ids, scored = _scored(row, method, results)
    return _mean(option_ids, scored)


def combine(
    row: Mapping[str, Any],
    method: str,
    results: Sequence[Mapping[str, Any]],
    temper: Callable[[list[float]], CalibratedView] | None = None,
    prior: Sequence[float] | None = None,
) -> Averaged:
    """The averaged result for one decision from its expanded rows' results, in expansion order.

    probabilities: per option id, the mean of each ordering's log-softmax,
    renormalised, in the caller's order. top: the highest combined probability,
    an exact tie going to the option earliest in the caller's order.
    agreement: the fraction of orderings whose own top (argmax of its native
    probabilities, ties likewise by the caller's order) is `top`. spread: each
    option's [min, max] native probability across orderings. `results` holds
    the result objects themselves (INV-1: never rewritten, never copied).
    `temper`, when given, turns the mean log-probabilities into `combined.calibrated`
    (the results are checked and scored once for both views).

    A method that needs a prior (given `prior`, the workload's prior over positions): the one result's
    log-probabilities less log prior, position by position, are what probabilities and
    `temper` read; `agreement` is 1.0 (one ordering), each spread [p, p], and
    `combined.prior` the prior divided out.
    """
    if named(method).needs_prior != (prior is not None):
        raise ValueError(
            f"orderings {position_prior.METHOD!r} needs a position prior, and only it takes one (got {method!r})"
        )
    option_ids, scored = _scored(row, method, results)
    scores = (
        _mean(option_ids, scored)
        if prior is None
        else _debiased(option_ids, results, scored, prior)
    )
    probabilities = softmax(scores)
    top = _first_max(option_ids, dict(zip(option_ids, probabilities)))
    tops = [_first_max(option_ids, native) for _, native in scored]
    spread = {
        oid: [min(nat[oid] for _, nat in scored), max(nat[oid] for _, nat in scored)]
        for oid in option_ids
    }
    combined = Combined(
        method,
        len(scored),
        probabilities,
        top,
        1.0 if prior is not None else tops.count(top) / len(scored),
        spread,
        None if prior is None else DividedPrior(tuple(prior)),
        None if temper is None else temper(scores),
    )
    return Averaged(row["id"], option_ids, combined, list(results))
