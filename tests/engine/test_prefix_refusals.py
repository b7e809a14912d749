"""INV-7: every way startup refuses when the fix is not, or cannot be, in effect.

test_prefix.py covers the wrapper and the pre-load check's early bindings. Here
are the remaining refusal paths, each through `TorchScorer.load()` where startup
applies it: `score_shared` missing or not a function (checked before the weights
load), the installed hook no longer ours after loading, and the proof state
refused by `score_shared`. Each refusal is a PrefixHookError with its own reason,
so disabling any one guard turns its test red (another exception, or none).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from semif_serve.engine import prefix
from semif_serve.engine.prefix import PROOF_STATE, PrefixHookError
from semif_serve.engine.torch_scorer import TorchScorer
from tests.fakes import (
    NEVER_CALLS,
    SHARED_SOURCE,
    FakeLoader,
    FakeTorch,
    compiled_module,
    fake_package,
    settings,
    wrong_system_prompt,
)


def scorer_for(package: Any, loader: FakeLoader | None = None) -> tuple[TorchScorer, list[Any]]:
    log: list[Any] = []
    loader = loader if loader is not None else FakeLoader(log)
    loader.log = log
    return TorchScorer(
        settings(device="cpu"),
        torch=FakeTorch(log, available=False),
        package=package,
        loader=loader,
    ), log


def shared_module(source: str = SHARED_SOURCE) -> Any:
    return compiled_module("fake_scorer.shared", source)


def without_score_shared() -> Any:
    module = shared_module()
    del module.score_shared
    return module


def builtin_score_shared() -> Any:
    module = shared_module()
    module.score_shared = len  # callable, but no code object whose globals could be checked
    return module


class GlobalsWithoutCode:
    """Claims the module's globals but has no code object to inspect."""

    def __init__(self, module: Any) -> None:
        self.__globals__ = vars(module)

    def __call__(self, *args: Any) -> Any:
        raise AssertionError("never called")


def globals_without_code() -> Any:
    module = shared_module()
    module.score_shared = GlobalsWithoutCode(module)
    return module


def with_other_globals() -> Any:
    module = shared_module()
    module.score_shared = type(module.score_shared)(
        module.score_shared.__code__, dict(vars(module))
    )
    return module


@pytest.mark.parametrize(
    "make,reason",
    [
        (without_score_shared, "score_shared does not resolve its globals from fake_scorer.shared"),
        (builtin_score_shared, "score_shared does not resolve its globals from fake_scorer.shared"),
        (with_other_globals, "score_shared does not resolve its globals from fake_scorer.shared"),
        (globals_without_code, "score_shared does not resolve its globals from fake_scorer.shared"),
    ],
    ids=["missing", "no code object", "a copy of the globals", "globals without code"],
)
def test_load_refuses_before_the_weights_when_score_shared_cannot_be_checked(
    make, reason: str
) -> None:
    scorer, log = scorer_for(dataclasses.replace(fake_package(), shared=make()))
    with pytest.raises(PrefixHookError) as refused:
        scorer.load()
    assert str(refused.value) == f"fake_scorer.shared.{reason}"
    assert "load" not in log


def test_the_check_names_a_missing_hook_and_an_unreachable_one_exactly() -> None:
    module = shared_module()
    del module._state_prefix
    with pytest.raises(PrefixHookError) as missing:
        prefix.check_hook(module)
    assert (
        str(missing.value)
        == "fake_scorer.shared._state_prefix is missing or not callable; INV-7 cannot be installed"
    )
    early = shared_module(
        SHARED_SOURCE.replace("max_tokens=4096):", "max_tokens=4096, _state_prefix=_state_prefix):")
    )
    with pytest.raises(PrefixHookError) as bound:
        prefix.check_hook(early)
    assert (
        str(bound.value)
        == "fake_scorer.shared.score_shared does not look up _state_prefix as a module global"
    )


# An attribute access of the same name is not a global look-up: co_names alone would be fooled.
ATTRIBUTE_ONLY = """
import types
from fastjev._runtime.shared import _state_prefix

_holder = types.SimpleNamespace(_state_prefix=_state_prefix)


def score_shared(model, tokenizer, rows, metadata, max_tokens=4096):
    _holder._state_prefix(tokenizer, rows[0]["state"])
    return [model(row) for row in rows], {}
"""


def test_the_check_refuses_an_attribute_of_the_same_name() -> None:
    with pytest.raises(PrefixHookError, match="does not look up _state_prefix as a module global"):
        prefix.check_hook(shared_module(ATTRIBUTE_ONLY))


class ReloadingLoader(FakeLoader):
    """Loading the weights re-imports the shared module: upstream's own hook is back in place."""

    def __init__(self, shared: Any) -> None:
        super().__init__([])
        self.shared = shared

    def __call__(self, *args: Any) -> Any:
        self.shared._state_prefix = prefix.original_of(self.shared._state_prefix)
        return super().__call__(*args)


def test_load_refuses_when_the_installed_hook_is_no_longer_ours() -> None:
    package = fake_package()
    scorer, log = scorer_for(package, ReloadingLoader(package.shared))
    with pytest.raises(PrefixHookError) as refused:
        scorer.load()
    assert (
        str(refused.value)
        == "fake_scorer.shared._state_prefix is not the INV-7 wrapper after install"
    )
    assert "load" in log  # refused after the weights, by the proof


# Upstream's check, plus a refusal of the proof state however its prefix is cut.
REFUSES_PROOF_STATE = SHARED_SOURCE.replace(
    "    encoded = [",
    "    if any(row['state'] == {'person_said': 'ok :)'} for row in rows):\n"
    "        _state_prefix(tokenizer, rows[0]['state'])\n"
    "        raise ValueError('The fixed state prefix does not match every full prompt')\n"
    "    encoded = [",
)


def test_load_refuses_when_score_shared_refuses_the_proof_state() -> None:
    scorer, log = scorer_for(fake_package(REFUSES_PROOF_STATE))
    with pytest.raises(PrefixHookError) as refused:
        scorer.load()
    assert str(refused.value) == (
        f"INV-7 proof state {PROOF_STATE} is refused by score_shared: "
        "The fixed state prefix does not match every full prompt"
    )
    assert isinstance(refused.value.__cause__, ValueError)
    assert "load" in log


def test_the_proof_passes_and_calls_the_wrapper_once_per_proof() -> None:
    package = fake_package()
    scorer, _ = scorer_for(package)
    scorer.load()
    hook = package.shared._state_prefix
    calls = hook.calls
    loader = FakeLoader([])
    prefix.prove(package.shared, loader.model, loader.tokenizer, {}, 4096, "warm")
    # one call comparing the wrapper with upstream for the warm state, one from inside score_shared
    assert hook.calls == calls + 2
    assert loader.model.rows and loader.model.rows[-1]["state"] == PROOF_STATE


class CodeWithoutGlobals:
    """Carries score_shared's code object but no globals to resolve it from."""

    def __init__(self, function: Any) -> None:
        self.__code__ = function.__code__

    def __call__(self, *args: Any) -> Any:
        raise AssertionError("never called")


def test_the_check_refuses_code_without_globals_as_a_refusal_not_a_crash() -> None:
    module = shared_module()
    module.score_shared = CodeWithoutGlobals(module.score_shared)
    with pytest.raises(PrefixHookError, match="does not resolve its globals"):
        prefix.check_hook(module)


def test_the_other_proof_refusals_name_their_reason_exactly() -> None:
    never_calls, _ = scorer_for(fake_package(NEVER_CALLS))
    with pytest.raises(PrefixHookError) as refused:
        never_calls.load()
    assert str(refused.value) == "score_shared did not call the installed INV-7 wrapper"
    package = fake_package()
    package.direct.encode_prompt = wrong_system_prompt
    wrong, _ = scorer_for(package)
    with pytest.raises(PrefixHookError) as refused:
        wrong.load()
    assert (
        str(refused.value)
        == "INV-7 wrapper does not return upstream's prefix for the warm-up state"
    )


# Records each call's arguments, so the proof's own call can be checked.
RECORDING = SHARED_SOURCE.replace(
    "def score_shared(model, tokenizer, rows, metadata, max_tokens=4096):\n",
    "CALLS = []\n\n\ndef score_shared(model, tokenizer, rows, metadata, max_tokens=4096):\n"
    "    CALLS.append((rows, metadata, max_tokens))\n",
)


def test_the_proof_scores_the_contracts_row_with_the_loaded_metadata_and_limit() -> None:
    package = fake_package(RECORDING)
    log: list[Any] = []
    scorer = TorchScorer(
        settings(device="cpu", max_tokens=1234),
        torch=FakeTorch(log, available=False),
        package=package,
        loader=FakeLoader(log),
    )
    scorer.load()
    rows, metadata, max_tokens = package.shared.CALLS[-1]
    assert rows == [
        {
            "id": "inv7-proof",
            "state": PROOF_STATE,
            "question": "Did the person say ok?",
            "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
        }
    ]
    assert (
        metadata == {"source": "Qwen/Qwen3.5-4B", "device": "cpu", "dtype": "float32"}
        and max_tokens == 1234
    )


def test_the_probe_row_is_the_state_then_a_placeholder_criterion() -> None:
    assert prefix.probe_row({"k": "v"}) == {
        "id": "prefix-probe",
        "state": {"k": "v"},
        "question": "prefix boundary placeholder",
        "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
    }
    seen: list[dict[str, Any]] = []
    hook = prefix.make_wrapper(
        lambda tokenizer, state: [1, 2],
        lambda tokenizer, row, limit: (seen.append(row) or [1, 2, 3], [], ""),
    )
    assert hook.calls == 0
    assert hook(None, "s") == [1, 2] and hook.calls == 1 and seen == [prefix.probe_row("s")]
