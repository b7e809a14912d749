"""The client's typed results: read without touching a number, written back to the same JSON."""

from __future__ import annotations

import pytest

from semif_serve.client import Averaged, Result, Shared
from semif_serve.client.results import decided
from tests.client.replies import OK


def test_unknown_keys_and_null_optionals_survive_the_round_trip() -> None:
    sent = {
        **OK,
        "forward_seconds": None,
        "a_future_key": {"nested": [1, 2]},
        "extra": "a key named extra",
    }
    result = Result.from_json(sent)
    assert result.forward_seconds is None and result.extra["a_future_key"] == {"nested": [1, 2]}
    assert result.to_json() == sent and result.probability("b") == 0.75


def test_an_averaged_answer_reads_as_averaged_and_a_plain_one_as_result() -> None:
    averaged = {
        "id": "d",
        "option_ids": ["a", "b"],
        "orderings": [OK, OK],
        "combined": {
            "method": "rotations",
            "orderings": 2,
            "probabilities": [0.3, 0.7],
            "top": "b",
            "agreement": 1.0,
            "spread": {"a": [0.25, 0.25], "b": [0.75, 0.75]},
        },
    }
    typed = decided(averaged)
    assert (
        isinstance(typed, Averaged)
        and typed.combined.top == "b"
        and typed.orderings[0] == Result.from_json(OK)
    )
    assert typed.to_json() == averaged and isinstance(decided(OK), Result)
    shared = {
        "results": [OK, averaged],
        "timing": {"total_seconds": 0.5, "batch_size": 3, "new_counter": 7},
    }
    assert Shared.from_json(shared).to_json() == shared


def test_a_prior_answer_reads_as_averaged_with_its_prior() -> None:
    """Orderings "prior" keeps the averaged shape (agreement, spread) and adds combined.prior."""
    answer = {
        "id": "d",
        "option_ids": ["a", "b"],
        "orderings": [OK],
        "combined": {
            "method": "prior",
            "orderings": 1,
            "probabilities": [0.4, 0.6],
            "top": "b",
            "agreement": 1.0,
            "spread": {"a": [0.25, 0.25], "b": [0.75, 0.75]},
            "prior": [0.3, 0.7],
            "calibrated": {
                "workload": "w",
                "method": "prior",
                "temperature": 2.0,
                "probabilities": [0.45, 0.55],
            },
        },
    }
    typed = decided(answer)
    assert (
        isinstance(typed, Averaged)
        and typed.combined.prior == [0.3, 0.7]
        and typed.combined.agreement == 1.0
    )
    assert typed.combined.calibrated is not None and typed.combined.calibrated.method == "prior"
    assert typed.to_json() == answer


def test_an_adaptive_answer_reads_its_rows_escalation_and_threshold() -> None:
    second = {**OK, "id": "d#o1", "option_ids": ["b", "a"]}
    answer = {
        "id": "d",
        "option_ids": ["a", "b"],
        "orderings": [OK, second],
        "combined": {
            "method": "adaptive",
            "orderings": 2,
            "probabilities": [0.4, 0.6],
            "top": "b",
            "agreement": 0.5,
            "spread": {"a": [0.25, 0.5], "b": [0.5, 0.75]},
            "rows": 2,
            "escalated": True,
            "threshold": 0.19,
        },
    }
    typed = decided(answer)
    assert isinstance(typed, Averaged) and len(typed.orderings) == 2
    assert (typed.combined.rows, typed.combined.escalated, typed.combined.threshold) == (
        2,
        True,
        0.19,
    )
    assert typed.combined.extra == {} and typed.to_json() == answer


@pytest.mark.parametrize("bad", [[], "text", {k: v for k, v in OK.items() if k != "probabilities"}])
def test_an_answer_without_a_required_key_is_refused(bad) -> None:
    with pytest.raises(TypeError):
        Result.from_json(bad)
