"""Each orderings method holds its rules: its rows, its option cap and one check of what it needs."""

from __future__ import annotations

import pytest

from semif_serve.decisions import request_model
from semif_serve.decisions.methods import BY_NAME, ORDERINGS, Fit, Method, Need, named

FITTED = Fit(frozenset({"none", "rotations"}), frozenset({3}))


def test_a_method_is_its_wire_name() -> None:
    assert ORDERINGS == tuple(method.value for method in Method)
    for name, method in BY_NAME.items():
        assert method == name and hash(method) == hash(name) and f"{method!r}" == repr(name)
    with pytest.raises(ValueError, match="orderings must be one of .*got 'pairs'"):
        named("pairs")


def test_a_decision_carries_its_method() -> None:
    body = (
        b'{"id": "d", "state": "s", "question": "q?", "options": [{"id": "a", "description": "A"},'
    )
    body += b' {"id": "b", "description": "B"}], "orderings": "rotations"}'
    limits = request_model.Limits(8, frozenset())
    (decision,) = request_model.parse_decide(body, limits).decisions
    assert decision.method is Method.ROTATIONS and decision.row_count == 2


@pytest.mark.parametrize(
    ("method", "fit", "n", "lack"),
    [
        (Method.NONE, None, 3, None),  # no workload, no calibration applies
        (Method.ROTATIONS, None, 3, None),
        (Method.PRIOR, None, 3, Need.WORKLOAD),
        (Method.NONE, FITTED, 3, None),
        (Method.ALL, FITTED, 3, Need.TEMPERATURE),
        (Method.PRIOR, FITTED, 3, None),  # its temperature is optional
        (Method.PRIOR, FITTED, 4, Need.PRIOR),
        (Method.PRIOR, FITTED, None, None),  # some option count has a prior
        (Method.PRIOR, Fit(frozenset({"prior"})), None, Need.PRIOR),
    ],
)
def test_lacks_names_the_first_need_the_workload_misses(
    method: Method, fit: Fit | None, n: int | None, lack: Need | None
) -> None:
    assert method.lacks(fit, n) is lack


def test_the_option_cap_is_the_methods_own() -> None:
    assert [len(method.orders(4)) for method in Method] == [1, 4, 24, 1, 4]
    with pytest.raises(ValueError, match="orderings 'all' allows at most 4 options, got 5"):
        Method.ALL.orders(5)
    assert len(Method.ROTATIONS.orders(16)) == 16
