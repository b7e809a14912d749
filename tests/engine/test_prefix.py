"""INV-7: the boundary-safe shared prefix, against upstream's own prompt functions.

The tokenizer is fake (its merge reaches two tokens back); `_state_prefix` and
`encode_prompt` are fastjev's real ones, so the wrapper is checked against the
prompts upstream actually renders.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastjev._runtime import direct as fastjev_direct
from fastjev._runtime import shared as fastjev_shared

from semif_serve.engine import prefix
from semif_serve.engine.prefix import PROOF_STATE, PrefixHookError
from semif_serve.engine.torch_scorer import TorchScorer
from tests.fakes import (
    NEVER_CALLS,
    SHARED_SOURCE,
    FakeLoader,
    FakeTorch,
    MergingTokenizer,
    compiled_module,
    fake_package,
    settings,
    wrong_system_prompt,
)

BOUNDARY_STATES = [PROOF_STATE, {"note": "see (above)"}, {"seen": ["x"], "call": "f(a)"}]
ORDINARY_STATES = ["ok :)", {"person_said": "hello"}, ["a", "b"], "The service is starting"]


def rows_for(state: Any) -> list[dict[str, Any]]:
    """Real rows over one state, with criteria and option counts that differ."""
    return [
        {
            "id": f"r{n}",
            "state": state,
            "question": question,
            "options": [{"id": f"o{k}", "description": f"choice {k}"} for k in range(count)],
        }
        for n, (question, count) in enumerate(
            [("Is it ok?", 2), ("Which one) fits?", 3), ("}", 16)]
        )
    ]


def full_ids(tokenizer: MergingTokenizer, row: dict[str, Any]) -> list[int]:
    return fastjev_direct.encode_prompt(tokenizer, row, 1 << 20)[0]


def wrapped(tokenizer: MergingTokenizer, state: Any) -> list[int]:
    hook = prefix.make_wrapper(fastjev_shared._state_prefix, fastjev_direct.encode_prompt)
    return hook(tokenizer, state)


# -- the wrapper ---------------------------------------------------------------


@pytest.mark.parametrize("state", BOUNDARY_STATES, ids=repr)
def test_the_fake_tokenizer_reproduces_upstreams_boundary_refusal(state: Any) -> None:
    tokenizer = MergingTokenizer()
    upstream = fastjev_shared._state_prefix(tokenizer, state)
    assert any(full_ids(tokenizer, row)[: len(upstream)] != upstream for row in rows_for(state))


@pytest.mark.parametrize("state", BOUNDARY_STATES, ids=repr)
def test_wrapped_prefix_prefixes_every_row_and_gives_up_exactly_the_mismatched_token(
    state: Any,
) -> None:
    tokenizer = MergingTokenizer()
    upstream = fastjev_shared._state_prefix(tokenizer, state)
    result = wrapped(tokenizer, state)
    assert result == upstream[:-1]
    for row in rows_for(state):
        ids = full_ids(tokenizer, row)
        assert ids[: len(result)] == result and len(ids) > len(result)
        assert (
            ids[len(result)] != upstream[len(result)]
        )  # the token given up is the one that differs


@pytest.mark.parametrize("state", ORDINARY_STATES, ids=repr)
def test_an_ordinary_state_keeps_the_whole_upstream_prefix(state: Any) -> None:
    tokenizer = MergingTokenizer()
    upstream = fastjev_shared._state_prefix(tokenizer, state)
    assert wrapped(tokenizer, state) == upstream
    assert all(full_ids(tokenizer, row)[: len(upstream)] == upstream for row in rows_for(state))


def test_score_shared_refuses_the_proof_state_alone_and_answers_it_through_the_wrapper() -> None:
    shared = compiled_module("fake_scorer.shared", SHARED_SOURCE)
    loader = FakeLoader([])
    rows = rows_for(PROOF_STATE)
    with pytest.raises(ValueError, match="does not match"):
        shared.score_shared(loader.model, loader.tokenizer, rows, {})
    prefix.install(shared, fastjev_direct.encode_prompt)
    results, timing = shared.score_shared(loader.model, loader.tokenizer, rows, {})
    assert [r["id"] for r in results] == ["r0", "r1", "r2"]
    assert (
        timing["prefix_tokens"]
        == len(fastjev_shared._state_prefix(loader.tokenizer, PROOF_STATE)) - 1
    )


def test_installing_many_times_leaves_one_wrapper_around_the_original() -> None:
    shared = compiled_module("fake_scorer.shared", SHARED_SOURCE)
    original = shared._state_prefix
    for _ in range(4):
        prefix.install(shared, fastjev_direct.encode_prompt)
    hook = shared._state_prefix
    assert hook is not original and hook.__wrapped__ is original
    assert prefix.original_of(hook) is original


# -- the pre-load check ----------------------------------------------------------


def test_upstreams_own_shared_module_passes_the_check() -> None:
    prefix.check_hook(fastjev_shared)


DEFAULT_ARGUMENT = SHARED_SOURCE.replace(
    "max_tokens=4096):", "max_tokens=4096, _state_prefix=_state_prefix):"
)
CLOSURE = (
    SHARED_SOURCE.replace(
        "def score_shared(", "def _bind(_state_prefix):\n  def score_shared("
    ).replace("\n    ", "\n      ")
    + "\n  return score_shared\nscore_shared = _bind(_state_prefix)\n"
)


def gone(source: str) -> Any:
    module = compiled_module("fake_scorer.shared", source)
    del module._state_prefix
    return module


def not_callable(source: str) -> Any:
    module = compiled_module("fake_scorer.shared", source)
    module._state_prefix = "not a function"
    return module


def elsewhere(source: str) -> Any:
    module = compiled_module("fake_scorer.shared", source)
    module.score_shared = compiled_module("fake_scorer.moved", source).score_shared
    return module


BROKEN_HOOKS = {
    "gone": lambda: gone(SHARED_SOURCE),
    "not callable": lambda: not_callable(SHARED_SOURCE),
    "default argument": lambda: compiled_module("fake_scorer.shared", DEFAULT_ARGUMENT),
    "closure": lambda: compiled_module("fake_scorer.shared", CLOSURE),
    "globals elsewhere": lambda: elsewhere(SHARED_SOURCE),
}


@pytest.mark.parametrize("name", BROKEN_HOOKS)
def test_check_refuses_a_hook_that_patching_cannot_reach(name: str) -> None:
    with pytest.raises(PrefixHookError):
        prefix.check_hook(BROKEN_HOOKS[name]())


def test_the_broken_variants_really_score_without_the_module_global() -> None:
    # Guards the fixtures: each early binding still scores, ignoring the patched global.
    for source in (DEFAULT_ARGUMENT, CLOSURE):
        shared = compiled_module("fake_scorer.shared", source)
        shared._state_prefix = None
        loader = FakeLoader([])
        results, _ = shared.score_shared(loader.model, loader.tokenizer, rows_for("plain"), {})
        assert len(results) == 3


# -- load(): the same guarantees where startup applies them ------------------------


def cpu_scorer(package: Any, log: list[Any]) -> tuple[TorchScorer, FakeLoader]:
    loader = FakeLoader(log)
    scorer = TorchScorer(
        settings(device="cpu"),
        torch=FakeTorch(log, available=False),
        package=package,
        loader=loader,
    )
    return scorer, loader


def test_load_installs_one_wrapper_however_many_times_it_runs() -> None:
    package = fake_package()
    original = package.shared._state_prefix
    for _ in range(3):
        cpu_scorer(package, [])[0].load()
    assert package.shared._state_prefix.__wrapped__ is original


@pytest.mark.parametrize("name", BROKEN_HOOKS)
def test_load_refuses_before_the_weights_when_the_hook_is_unreachable(name: str) -> None:
    package = dataclasses.replace(fake_package(), shared=BROKEN_HOOKS[name]())
    log: list[Any] = []
    scorer, _ = cpu_scorer(package, log)
    with pytest.raises(PrefixHookError):
        scorer.load()
    assert "load" not in log


def test_load_refuses_a_wrapper_that_renders_the_wrong_prompt() -> None:
    package = fake_package()
    package.direct.encode_prompt = wrong_system_prompt
    scorer, _ = cpu_scorer(package, [])
    with pytest.raises(PrefixHookError, match="upstream's prefix"):
        scorer.load()


def test_load_refuses_when_score_shared_never_calls_the_wrapper() -> None:
    scorer, _ = cpu_scorer(fake_package(NEVER_CALLS), [])
    with pytest.raises(PrefixHookError, match="did not call"):
        scorer.load()


def test_load_proves_the_boundary_state_scores_through_score_shared() -> None:
    scorer, loader = cpu_scorer(fake_package(), [])
    scorer.load()
    assert any(row["state"] == PROOF_STATE for row in loader.model.rows)
