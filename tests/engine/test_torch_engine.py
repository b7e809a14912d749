"""TorchScorer against a fake torch: fail-closed startup, the VRAM cap, the exception
policy and the memory release (INV-1, INV-3, INV-4). No card, no model.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from semif_serve.engine.scorer import OutOfMemory, ScoringFailed
from semif_serve.engine.torch_scorer import (
    CUDA_KERNEL_ADVICE,
    RELEASE_SLACK_BYTES,
    CudaKernelAdvice,
    TorchScorer,
)
from tests.fakes import (
    GIB,
    MIB,
    FakeLoader,
    FakeOutOfMemoryError,
    FakeTensor,
    FakeTorch,
    fake_package,
    settings,
)

ROW = {
    "id": "q1",
    "state": {"k": "v"},
    "question": "Is it?",
    "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
}
BASELINE = 3 * GIB


class Rig:
    """A TorchScorer wired to a fake torch, a fake package and a fake loader, sharing one log."""

    def __init__(self, *, cuda: dict[str, Any] | None = None, **overrides: Any) -> None:
        self.log: list[Any] = []
        self.torch = FakeTorch(self.log, **(cuda or {}))
        self.loader = FakeLoader(self.log)
        self.scorer = TorchScorer(
            settings(**overrides), torch=self.torch, package=fake_package(), loader=self.loader
        )

    def load(self) -> None:
        """Load with a warm-up that leaves BASELINE reserved, then clear the log."""

        def warm_up(row: dict[str, Any]) -> Any:
            self.torch.cuda.reserved = BASELINE
            return fake_result_of(row)

        self.loader.model.behaviour = warm_up
        self.scorer.load()
        self.log.clear()

    def fails_with(self, make_error: Callable[[], BaseException], *, allocate: bool = True) -> None:
        """Make the next scorer call hold a tensor in its frame, then raise a fresh error,
        as torch does: nothing but the traceback refers to the exception."""

        def failing(row: dict[str, Any]) -> Any:
            tensor = FakeTensor(self.log) if allocate else None  # noqa: F841 - held by the frame
            raise make_error()

        self.loader.model.behaviour = failing


def fake_result_of(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "option_ids": [o["id"] for o in row["options"]],
        "probabilities": [0.5, 0.5],
    }


@pytest.fixture
def rig() -> Rig:
    loaded = Rig()
    loaded.load()
    return loaded


def assert_unchained(error: BaseException) -> None:
    assert error.__cause__ is None
    assert error.__suppress_context__ or error.__context__ is None
    assert (
        error.__context__ is None
    )  # nothing, not even a suppressed context, keeps the old traceback


# -- startup: INV-3 and INV-4 ----------------------------------------------------------


def test_no_cuda_refuses_and_never_falls_back_to_cpu() -> None:
    rig = Rig(cuda={"available": False})
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        rig.scorer.load()
    assert "load" not in rig.log


def test_a_card_whose_arch_is_not_in_the_build_refuses() -> None:
    rig = Rig(cuda={"capability": (12, 0), "arch_list": ("sm_80", "sm_90")})
    with pytest.raises(RuntimeError, match="sm_120"):
        rig.scorer.load()
    assert "load" not in rig.log


def test_a_card_in_the_arch_list_loads_on_cuda_in_bf16() -> None:
    rig = Rig(cuda={"capability": (9, 0)})
    rig.load()
    facts = rig.scorer.health()
    assert (facts["device"], facts["dtype"]) == ("cuda:0", "bfloat16")


def test_cpu_runs_only_when_set_explicitly_and_touches_no_cuda() -> None:
    rig = Rig(cuda={"available": False}, device="cpu")
    rig.scorer.load()
    assert rig.log == ["load"]
    facts = rig.scorer.health()
    assert (facts["device"], facts["dtype"]) == ("cpu", "float32")
    assert "memory_reserved_bytes" not in facts


def test_the_cap_is_set_before_the_model_loads() -> None:
    rig = Rig(cuda={"total_memory": 140 * GIB}, vram_cap_gib=20.0)
    rig.scorer.load()
    cap = next(event for event in rig.log if event[0] == "cap")
    assert cap == ("cap", 20 / 140, "cuda:0")
    assert rig.log.index(cap) < rig.log.index("load")


def test_a_cap_larger_than_the_card_refuses() -> None:
    rig = Rig(cuda={"total_memory": 16 * GIB}, vram_cap_gib=16.5)
    with pytest.raises(RuntimeError, match="exceeds"):
        rig.scorer.load()
    assert "load" not in rig.log


def test_a_cap_with_device_cpu_refuses() -> None:
    rig = Rig(device="cpu", vram_cap_gib=4.0)
    with pytest.raises(RuntimeError, match="only to a CUDA device"):
        rig.scorer.load()


def test_a_cuda_index_that_is_not_visible_refuses() -> None:
    rig = Rig(device="cuda:1")
    with pytest.raises(RuntimeError, match="no visible CUDA device"):
        rig.scorer.load()


# -- INV-1: pass-through ---------------------------------------------------------------


def test_score_returns_the_scorers_result_unchanged(rig: Rig) -> None:
    result = {"id": "q1", "probabilities": [0.25, 0.75], "option_logits": [1.0, 2.1]}
    rig.loader.model.behaviour = lambda row: result
    assert rig.scorer.score(ROW) is result


def test_score_shared_returns_results_and_timing_unchanged(rig: Rig) -> None:
    results, timing = rig.scorer.score_shared([ROW, {**ROW, "id": "q2"}])
    assert [r["id"] for r in results] == ["q1", "q2"]
    assert timing == {"prefix_tokens": timing["prefix_tokens"]} and timing["prefix_tokens"] > 0


# -- INV-4: the exception policy -------------------------------------------------------


def test_an_oom_becomes_an_unchained_out_of_memory_released_after_the_tensors_are_freed(
    rig: Rig,
) -> None:
    rig.fails_with(lambda: FakeOutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    with pytest.raises(OutOfMemory) as caught:
        rig.scorer.score(ROW)
    assert str(caught.value) == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert_unchained(caught.value)
    assert rig.log == ["freed", "empty_cache"]


def test_the_shared_scorer_follows_the_same_policy(rig: Rig) -> None:
    rig.fails_with(lambda: FakeOutOfMemoryError("CUDA out of memory"))
    with pytest.raises(OutOfMemory) as caught:
        rig.scorer.score_shared([ROW])
    assert_unchained(caught.value)
    assert rig.log == ["freed", "empty_cache"]


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: out of memory",
        "cuBLAS error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle): Out Of Memory",
        "cuDNN error: CUDNN_STATUS_NOT_INITIALIZED (OUT OF MEMORY)",
    ],
)
def test_a_runtime_error_that_says_out_of_memory_is_an_oom(rig: Rig, message: str) -> None:
    rig.fails_with(lambda: RuntimeError(message))
    with pytest.raises(OutOfMemory, match="(?i)out of memory") as caught:
        rig.scorer.score(ROW)
    assert_unchained(caught.value)
    assert rig.log == ["freed", "empty_cache"]


@pytest.mark.parametrize("message", ["", "  "])
def test_an_oom_without_a_message_is_reported_as_cuda_out_of_memory(rig: Rig, message: str) -> None:
    rig.fails_with(lambda: FakeOutOfMemoryError(message))
    with pytest.raises(OutOfMemory) as caught:
        rig.scorer.score(ROW)
    assert str(caught.value) == "CUDA out of memory"


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """Only an explicit gc.collect() may collect cycles while the test runs."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "error_type", [RuntimeError, MemoryError, KeyError, TypeError], ids=lambda t: t.__name__
)
def test_any_other_failure_is_logged_collected_released_and_reported_unchained(
    rig: Rig, error_type: type[Exception], caplog: pytest.LogCaptureFixture, no_automatic_gc: None
) -> None:
    raised: list[Exception] = []

    def cyclic(row: dict[str, Any]) -> Any:
        # A tensor in a reference cycle outlives its frame until gc.collect() runs.
        cycle: list[Any] = [FakeTensor(rig.log)]
        cycle.append(cycle)
        raised.append(error_type("CUDA error: device-side assert triggered"))
        raise raised[0]

    rig.loader.model.behaviour = cyclic
    with caplog.at_level(logging.ERROR, logger="semif_serve.engine"):
        with pytest.raises(ScoringFailed) as caught:
            rig.scorer.score(ROW)
    assert_unchained(caught.value)
    assert "Traceback" not in str(caught.value) and error_type.__name__ in str(caught.value)
    assert rig.log == ["freed", "empty_cache"]
    [record] = [
        r for r in caplog.records if r.name == "semif_serve.engine" and r.levelno == logging.ERROR
    ]
    assert record.exc_info is not None and record.exc_info[1] is raised[0]
    assert "in cyclic" in caplog.text  # the logged traceback reaches the failing frame


def test_tensors_are_freed_before_the_release_even_while_the_original_exception_is_kept(
    rig: Rig,
) -> None:
    kept = FakeOutOfMemoryError("CUDA out of memory")  # a log handler or debugger may hold it
    rig.fails_with(lambda: kept)
    with pytest.raises(OutOfMemory):
        rig.scorer.score(ROW)
    assert rig.log == ["freed", "empty_cache"]


def test_a_value_error_passes_through_untouched(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    refusal = ValueError("Row q1: 5000 input tokens exceed limit 4096; no truncation allowed")
    rig.fails_with(lambda: refusal, allocate=False)
    with caplog.at_level(logging.DEBUG, logger="semif_serve.engine"):
        with pytest.raises(ValueError) as caught:
            rig.scorer.score(ROW)
    assert caught.value is refusal
    assert rig.log == []
    assert not [r for r in caplog.records if r.name == "semif_serve.engine"]


def test_the_scorers_own_validation_error_passes_through(rig: Rig) -> None:
    with pytest.raises(ValueError, match="options must contain 2-16 entries"):
        rig.scorer.score({**ROW, "options": ROW["options"][:1]})


# -- INV-4: release after every call ------------------------------------------------------


def reserves(rig: Rig, after_call: int, error: BaseException | None = None) -> None:
    def call(row: dict[str, Any]) -> Any:
        rig.torch.cuda.reserved = after_call
        if error is not None:
            raise error
        return fake_result_of(row)

    rig.loader.model.behaviour = call


def test_the_baseline_is_what_the_warm_up_left_reserved(rig: Rig) -> None:
    reserves(rig, BASELINE + RELEASE_SLACK_BYTES)
    rig.scorer.score(ROW)
    assert rig.log == []  # a baseline taken before the warm-up (0) would have released here


def test_at_the_slack_boundary_memory_is_left_alone(rig: Rig) -> None:
    assert RELEASE_SLACK_BYTES == 512 * MIB
    reserves(rig, BASELINE + 512 * MIB)
    rig.scorer.score(ROW)
    assert rig.log == []


def test_one_byte_over_the_slack_is_released(rig: Rig) -> None:
    reserves(rig, BASELINE + 512 * MIB + 1)
    rig.scorer.score(ROW)
    assert rig.log == ["empty_cache"]


def test_the_release_also_follows_shared_calls_and_failed_calls(rig: Rig) -> None:
    reserves(rig, BASELINE + GIB)
    rig.scorer.score_shared([ROW])
    reserves(rig, BASELINE + GIB, ValueError("refused"))
    with pytest.raises(ValueError):
        rig.scorer.score(ROW)
    assert rig.log == ["empty_cache", "empty_cache"]


# -- health -------------------------------------------------------------------------------


def test_health_reports_the_facts_and_the_card_memory(rig: Rig) -> None:
    rig.torch.cuda.reserved, rig.torch.cuda.allocated, rig.torch.cuda.peak_reserved = (
        5 * GIB,
        4 * GIB,
        7 * GIB,
    )
    assert rig.scorer.health() == {
        "scorer": "fake",
        "semif_commit": "fake-commit",
        "model": "Qwen/Qwen3.5-4B",
        "revision": "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a",
        "device": "cuda:0",
        "dtype": "bfloat16",
        "prompt_version": None,  # the fake package defines no PROMPT_VERSION
        "memory_reserved_bytes": 5 * GIB,
        "memory_allocated_bytes": 4 * GIB,
        "max_memory_reserved_bytes": 7 * GIB,
        "vram_cap_gib": None,
    }


def test_health_answers_while_a_scorer_call_is_running(rig: Rig) -> None:
    started, release = threading.Event(), threading.Event()

    def blocking(row: dict[str, Any]) -> Any:
        started.set()
        release.wait(5)
        return fake_result_of(row)

    rig.loader.model.behaviour = blocking
    worker = threading.Thread(target=rig.scorer.score, args=(ROW,))
    worker.start()
    try:
        assert started.wait(5)
        assert rig.scorer.health()["device"] == "cuda:0"
        assert not release.is_set() and worker.is_alive()
    finally:
        release.set()
        worker.join(5)


def test_only_the_advice_to_install_a_cuda_kernel_is_dropped() -> None:
    """transformers' wording (hub_kernels); the real load's log is tests/ops/test_json_logs_model.py's."""
    advice = (
        "`{fn}` is falling back to its reference PyTorch implementation because `{package}` is not "
        "installed. This is correct but much slower; install `{package}` for the optimized kernel."
    )

    def kept(message: str) -> bool:
        record = logging.LogRecord(
            CudaKernelAdvice.LOGGER, logging.WARNING, __file__, 1, message, None, None
        )
        return bool(CUDA_KERNEL_ADVICE.filter(record))

    assert not kept(advice.format(fn="causal_conv1d_fn", package="causal_conv1d"))
    assert not kept(advice.format(fn="chunk_gated_delta_rule", package="flash-linear-attention"))
    assert kept(advice.format(fn="rms_norm", package="liger-kernel"))  # another kernel's: kept
    assert kept("causal_conv1d raised while loading")  # about the package, but no such advice
