"""INV-7: a boundary-safe state prefix for SemIf's shared scorer.

Upstream's `shared._state_prefix` tokenises the evidence on its own and drops one
trailing token, assuming the JSON that follows can merge with at most that token.
An object state whose last value ends in `)`, `;` or `}` re-tokenises two tokens
back, so `score_shared` refused it. The wrapper keeps only the tokens upstream's
prefix shares with a real full prompt for the same state: every row still scores
the same token sequence, only the prefill/suffix split moves.

`score_shared` looks `_state_prefix` up in its module's globals on each call, so
assigning the module global is the whole fix; `check_hook` refuses to start when
that is no longer true, and `prove` shows after warm-up that the fix is in effect.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

StatePrefix = Callable[[Any, Any], list[int]]
EncodePrompt = Callable[[Any, dict[str, Any], int], tuple[list[int], list[int], str]]

HOOK = "_state_prefix"
# Marks the wrappers this module made, so a reload unwraps only its own.
_MARK = "_semif_serve_inv7"
# Upstream refuses this state on Qwen3.5: `)"}` merges two tokens back before `, "criterion"`.
PROOF_STATE = {"person_said": "ok :)"}


class PrefixHookError(RuntimeError):
    """The INV-7 fix is not, or cannot be, in effect (startup refuses)."""


def _two_options() -> list[dict[str, str]]:
    return [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}]


def probe_row(state: Any) -> dict[str, Any]:
    """A real row for `state`: the state as evidence, then a placeholder criterion."""
    return {
        "id": "prefix-probe",
        "state": state,
        "question": "prefix boundary placeholder",
        "options": _two_options(),
    }


def common_length(left: list[int], right: list[int]) -> int:
    """Length of the longest common token-prefix of two id lists."""
    count = 0
    for a, b in zip(left, right):
        if a != b:
            break
        count += 1
    return count


def make_wrapper(original: StatePrefix, encode_prompt: EncodePrompt) -> StatePrefix:
    """Wrap upstream's `_state_prefix` so it never reaches past the real prompt."""

    def boundary_safe_prefix(tokenizer: Any, state: Any) -> list[int]:
        boundary_safe_prefix.calls += 1  # type: ignore[attr-defined]  # a counter kept on the wrapper itself
        upstream = original(tokenizer, state)
        # No limit here: the real rows are checked against max_tokens by score_shared itself.
        full, _, _ = encode_prompt(tokenizer, probe_row(state), sys.maxsize)
        return upstream[: common_length(upstream, full)]

    boundary_safe_prefix.__wrapped__ = original  # type: ignore[attr-defined]  # functools' name for the wrapped
    boundary_safe_prefix.calls = 0  # type: ignore[attr-defined]  # the counter, on the function
    setattr(boundary_safe_prefix, _MARK, True)
    return boundary_safe_prefix


def original_of(hook: Any) -> Any:
    """Upstream's function behind `hook`, whether or not a wrapper of ours is installed."""
    return hook.__wrapped__ if getattr(hook, _MARK, False) else hook


def check_hook(shared: ModuleType) -> None:
    """Refuse unless `score_shared` resolves a callable `_state_prefix` from `shared`'s globals.

    A SemIf bump that binds the hook early (default argument, closure) or moves
    `score_shared` to another module would make patching the global a silent no-op.
    """
    hook = getattr(shared, HOOK, None)
    if not callable(hook):
        raise PrefixHookError(
            f"{shared.__name__}.{HOOK} is missing or not callable; INV-7 cannot be installed"
        )
    score_shared = getattr(shared, "score_shared", None)
    code = getattr(score_shared, "__code__", None)
    if code is None or getattr(score_shared, "__globals__", None) is not vars(shared):
        raise PrefixHookError(
            f"{shared.__name__}.score_shared does not resolve its globals from {shared.__name__}"
        )
    # A LOAD_GLOBAL name is one of co_names that is looked up in __globals__ at call time
    # (co_names alone would also match an attribute such as `obj._state_prefix`).
    global_loads = {ins.argval for ins in dis.get_instructions(code) if ins.opname == "LOAD_GLOBAL"}
    if HOOK not in global_loads:
        raise PrefixHookError(
            f"{shared.__name__}.score_shared does not look up {HOOK} as a module global"
        )


def install(shared: ModuleType, encode_prompt: EncodePrompt) -> StatePrefix:
    """Assign the wrapper as `shared._state_prefix`, always around upstream's original."""
    wrapper = make_wrapper(original_of(getattr(shared, HOOK)), encode_prompt)
    setattr(shared, HOOK, wrapper)
    return wrapper


def prove(
    shared: ModuleType,
    model: Any,
    tokenizer: Any,
    metadata: dict[str, Any],
    max_tokens: int,
    warm_state: Any,
) -> None:
    """After warm-up: show the installed wrapper is correct and that score_shared calls it."""
    wrapper = getattr(shared, HOOK)
    if not getattr(wrapper, _MARK, False):
        raise PrefixHookError(f"{shared.__name__}.{HOOK} is not the INV-7 wrapper after install")
    # A wrapper rendering the wrong prompt would silently drop all sharing.
    if wrapper(tokenizer, warm_state) != wrapper.__wrapped__(tokenizer, warm_state):
        raise PrefixHookError(
            "INV-7 wrapper does not return upstream's prefix for the warm-up state"
        )
    row = {
        "id": "inv7-proof",
        "state": PROOF_STATE,
        "question": "Did the person say ok?",
        "options": _two_options(),
    }
    before = wrapper.calls
    try:
        shared.score_shared(model, tokenizer, [row], metadata, max_tokens)
    except ValueError as error:
        raise PrefixHookError(
            f"INV-7 proof state {PROOF_STATE} is refused by score_shared: {error}"
        ) from error
    # A hook bound before the patch would score without ever calling the wrapper.
    if wrapper.calls == before:
        raise PrefixHookError("score_shared did not call the installed INV-7 wrapper")
