"""The real scorer: SemIf's torch scorers over one model loaded once (INV-1..INV-5, INV-7).

Test seam: the constructor takes the `torch` module object (the real one by
default), the scorer package and the model loader. Every CUDA call goes through
that object, so the fail-closed checks, the VRAM cap and the memory release are
exercised against a fake torch without a card or a model.
"""

from __future__ import annotations

import gc
import importlib
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..config import Settings
from . import prefix, snapshot_verify
from .scorer import OutOfMemory, Row, ScoringFailed, SharedResult
from .scorer_package import ScorerPackage, resolve

log = logging.getLogger("semif_serve.engine")

GIB = 1 << 30
# Reserved memory above the post-warm-up baseline that a burst may keep (INV-4).
RELEASE_SLACK_BYTES = 512 << 20
QWEN3_5 = frozenset({"qwen3_5", "qwen3_5_text"})
# A string state ending in a letter: no JSON punctuation can merge into it, so the
# INV-7 wrapper must return upstream's prefix unchanged for it.
WARMUP_ROW: Row = {
    "id": "warm-up",
    "state": "The service is starting",
    "question": "Is the service starting?",
    "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
}

Loaded = tuple[Any, Any, dict[str, Any]]
ModelLoader = Callable[[Settings, str, str, ModuleType], Loaded]


class CudaKernelAdvice(logging.Filter):
    """Drops transformers' advice to install `causal_conv1d` or `flash-linear-attention` (Qwen3.5's
    linear-attention kernels), which are CUDA kernels: on the CPU it cannot apply, so it is noise
    in every start's log. Any other record passes; on CUDA the advice is not filtered."""

    PACKAGES = ("causal_conv1d", "flash-linear-attention")
    LOGGER = "transformers.integrations.hub_kernels"

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            "is falling back to its reference PyTorch implementation" in message
            and any(f"because `{name}` is not installed" in message for name in self.PACKAGES)
        )


CUDA_KERNEL_ADVICE = CudaKernelAdvice()


def _log_through_root(transformers: ModuleType) -> None:
    """transformers writes to stderr through a handler of its own and draws progress bars;
    both would break SEMIF_LOG_FORMAT=json's one JSON object per stderr line. Its records
    go to the process's one handler instead (ops/logs.py), and a bar is not a log line."""
    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.enable_propagation()
    transformers.utils.logging.disable_progress_bar()


def load_model(settings: Settings, device: str, dtype: str, torch: ModuleType) -> Loaded:
    """Load the pinned model from the local HF cache only, the way SemIf does (INV-5),
    once the snapshot has proved itself (never a half-loaded model)."""
    verified = snapshot_verify.verify(
        settings.model, settings.revision, hash_blobs=settings.verify_weights == "hash"
    )
    log.info(
        "verified %d snapshot file(s) in %s (%s, %.0f MB hashed) in %.2f s",
        verified.files,
        verified.snapshot,
        settings.verify_weights,
        verified.hashed_bytes / 1e6,
        verified.seconds,
    )
    import transformers

    _log_through_root(transformers)
    if device == "cpu":
        logging.getLogger(CudaKernelAdvice.LOGGER).addFilter(
            CUDA_KERNEL_ADVICE
        )  # added once, however many loads
    common = {"revision": settings.revision, "local_files_only": True, "trust_remote_code": False}
    config = transformers.AutoConfig.from_pretrained(settings.model, **common)
    tokenizer = transformers.AutoTokenizer.from_pretrained(settings.model, **common)
    cls: Any = transformers.AutoModelForCausalLM
    if config.model_type in QWEN3_5:
        cls = transformers.Qwen3_5ForCausalLM
        config = config.get_text_config()
    model, info = cls.from_pretrained(
        settings.model,
        config=config,
        dtype=getattr(torch, dtype),
        output_loading_info=True,
        **common,
    )
    if any(info.get(key) for key in ("missing_keys", "mismatched_keys", "error_msgs")):
        raise RuntimeError(
            f"checkpoint {settings.model}@{settings.revision} did not load completely: {info}"
        )
    # .to() rather than SemIf's device_map, which needs `accelerate`, a dependency this project lacks.
    model.to(device).eval()
    metadata = {
        "source": settings.model,
        "revision": settings.revision,
        "dtype": dtype,
        "device": device,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }
    return model, tokenizer, metadata


@dataclass(frozen=True)
class _Model:
    """Everything load() proved, published in one assignment so health() reads it safely."""

    model: Any
    tokenizer: Any
    metadata: dict[str, Any]
    device: str
    baseline_reserved: int


class TorchScorer:
    """engine.Scorer over SemIf's (or fastjev's) direct and shared torch scorers."""

    def __init__(
        self,
        settings: Settings,
        *,
        torch: ModuleType | None = None,
        package: ScorerPackage | None = None,
        loader: ModelLoader = load_model,
    ) -> None:
        self._settings = settings
        self._torch = torch if torch is not None else importlib.import_module("torch")
        self._package = package if package is not None else resolve(settings.scorer)
        self._loader = loader
        self._cuda = settings.device != "cpu"
        self._dtype = "bfloat16" if self._cuda else settings.cpu_dtype
        self._loaded: _Model | None = None

    # -- startup ---------------------------------------------------------------

    def load(self) -> None:
        """Fail closed unless the device, the cap, the INV-7 hook and a warm-up all hold."""
        device = self._select_device()
        self._cap_memory(device)
        shared = self._package.shared
        prefix.check_hook(shared)
        prefix.install(shared, self._package.direct.encode_prompt)
        model, tokenizer, metadata = self._loader(self._settings, device, self._dtype, self._torch)
        max_tokens = self._settings.max_tokens
        self._package.direct.score(model, tokenizer, WARMUP_ROW, metadata, max_tokens)
        shared.score_shared(model, tokenizer, [WARMUP_ROW], metadata, max_tokens)
        prefix.prove(shared, model, tokenizer, metadata, max_tokens, WARMUP_ROW["state"])
        baseline = self._torch.cuda.memory_reserved(device) if self._cuda else 0
        self._loaded = _Model(model, tokenizer, metadata, device, baseline)

    def _select_device(self) -> str:
        """INV-3: CUDA with a kernel for this card's sm_XY, or CPU only when set explicitly."""
        if not self._cuda:
            return "cpu"
        cuda = self._torch.cuda
        if not cuda.is_available():
            raise RuntimeError(
                f"SEMIF_DEVICE={self._settings.device} but CUDA is not available; refusing to start "
                "(set SEMIF_DEVICE=cpu explicitly to run on CPU)"
            )
        index = self._device_index()
        major, minor = cuda.get_device_capability(index)
        arch = f"sm_{major}{minor}"
        built = cuda.get_arch_list()
        if arch not in built:
            raise RuntimeError(
                f"this torch build has no kernels for {arch} (built for {', '.join(built)}); refusing to start"
            )
        # Every later call (empty_cache included) then targets this card on the engine thread.
        cuda.set_device(index)
        return f"cuda:{index}"

    def _device_index(self) -> int:
        name = self._settings.device
        text = name.partition(":")[2]
        if not text:
            current: int = self._torch.cuda.current_device()
            return current
        if not (text.isascii() and text.isdigit()) or int(text) >= self._torch.cuda.device_count():
            raise RuntimeError(f"SEMIF_DEVICE={name} names no visible CUDA device")
        return int(text)

    def _cap_memory(self, device: str) -> None:
        """INV-4: cap this process's share of the card before any weight is allocated."""
        cap_gib = self._settings.vram_cap_gib
        if cap_gib is None:
            return
        if not self._cuda:
            raise RuntimeError(
                "SEMIF_VRAM_CAP_GIB applies only to a CUDA device; unset it for SEMIF_DEVICE=cpu"
            )
        total = self._torch.cuda.get_device_properties(device).total_memory
        if cap_gib * GIB > total:
            raise RuntimeError(
                f"SEMIF_VRAM_CAP_GIB={cap_gib} exceeds the card's {total / GIB:.2f} GiB"
            )
        self._torch.cuda.set_per_process_memory_fraction(cap_gib * GIB / total, device)

    # -- scoring ---------------------------------------------------------------

    def score(self, row: Row) -> dict[str, Any]:
        loaded = self._require_loaded()
        result: dict[str, Any] = self._call(self._package.direct.score, loaded, row)
        return result

    def score_shared(self, rows: list[Row]) -> SharedResult:
        loaded = self._require_loaded()
        results: SharedResult = self._call(self._package.shared.score_shared, loaded, rows)
        return results

    def _require_loaded(self) -> _Model:
        if self._loaded is None:
            raise RuntimeError("TorchScorer.load() has not completed")
        return self._loaded

    def _call(self, fn: Callable[..., Any], loaded: _Model, payload: Any) -> Any:
        """Run one scorer call; whatever happens, give back a burst's reserved memory."""
        try:
            return self._invoke(
                fn,
                loaded.model,
                loaded.tokenizer,
                payload,
                loaded.metadata,
                self._settings.max_tokens,
            )
        finally:
            self._release_over_baseline(loaded)

    def _invoke(self, fn: Callable[..., Any], *args: Any) -> Any:
        """INV-1 pass-through on success; INV-4 exception policy on failure.

        The original exception's traceback holds the failed call's frames and through
        them its tensors. So its frames are cleared (a log handler may keep the record),
        the failure is raised only after the except block, never chained as __context__
        (a chained 503 once kept 11.9 GiB allocated), and empty_cache() runs only then.
        """
        try:
            return fn(*args)
        except ValueError:
            raise
        except Exception as error:  # noqa: BLE001 - every other failure is translated
            failure = self._translate(error)
            traceback.clear_frames(error.__traceback__)
        gc.collect()  # frames in reference cycles would otherwise still pin tensors
        if self._cuda:
            self._torch.cuda.empty_cache()
        raise failure from None

    def _translate(self, error: Exception) -> Exception:
        """OutOfMemory for any OOM (503); ScoringFailed, logged with its traceback, else (500)."""
        if self._is_out_of_memory(error):
            message = str(error).strip() or "CUDA out of memory"
            log.warning("scorer call ran out of memory: %s", message)
            return OutOfMemory(message)
        log.exception("scorer call failed")
        return ScoringFailed(f"scoring failed ({type(error).__name__}); see the server log")

    def _is_out_of_memory(self, error: Exception) -> bool:
        # cuBLAS/cuDNN allocation failures arrive as a plain RuntimeError (S9).
        return isinstance(error, self._torch.cuda.OutOfMemoryError) or (
            isinstance(error, RuntimeError) and "out of memory" in str(error).lower()
        )

    def _release_over_baseline(self, loaded: _Model) -> None:
        """INV-4: a burst must not keep more than the slack above the warm-up baseline."""
        if not self._cuda:
            return
        cuda = self._torch.cuda
        if cuda.memory_reserved(loaded.device) - loaded.baseline_reserved > RELEASE_SLACK_BYTES:
            cuda.empty_cache()

    # -- health ----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Facts for /health; reads only published state, so any thread may call it."""
        loaded = self._loaded
        facts: dict[str, Any] = {
            "scorer": self._package.name,
            "semif_commit": self._package.provenance,
            # The package's prompt format: a bound calibration file must name it.
            "prompt_version": getattr(self._package.direct, "PROMPT_VERSION", None),
            "model": self._settings.model,
            "revision": self._settings.revision,
            "device": loaded.device if loaded else self._settings.device,
            "dtype": self._dtype,
        }
        if loaded is not None and self._cuda:
            cuda = self._torch.cuda
            facts["memory_reserved_bytes"] = cuda.memory_reserved(loaded.device)
            facts["memory_allocated_bytes"] = cuda.memory_allocated(loaded.device)
            # The process's peak since start: what the VRAM acceptance check sizes the cap from.
            facts["max_memory_reserved_bytes"] = cuda.max_memory_reserved(loaded.device)
            facts["vram_cap_gib"] = self._settings.vram_cap_gib
        return facts
