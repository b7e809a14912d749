"""Shared fakes for the torch engine: a fake torch, a merging tokenizer, a fake scorer package.

Every fake that matters to an ordering check writes into one shared event log
(a plain list), so a test can assert what happened before what.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from semif_serve.config import Settings
from semif_serve.decisions.calibration_file import Loaded, Table, as_table
from semif_serve.engine.scorer_package import ScorerPackage
from tests.wire_client import TOKEN

GIB = 1 << 30
MIB = 1 << 20
EventLog = list[Any]


# -- torch ---------------------------------------------------------------------


class FakeOutOfMemoryError(RuntimeError):
    """Stands in for torch.cuda.OutOfMemoryError (a RuntimeError subclass, as in torch)."""


class FakeCuda:
    """The slice of torch.cuda the engine uses; state is plain attributes tests set."""

    OutOfMemoryError = FakeOutOfMemoryError

    def __init__(
        self,
        log: EventLog,
        *,
        available: bool = True,
        capability: tuple[int, int] = (9, 0),
        arch_list: tuple[str, ...] = ("sm_80", "sm_90"),
        total_memory: int = 140 * GIB,
    ) -> None:
        self.log = log
        self.available = available
        self.capability = capability
        self.arch_list = arch_list
        self.total_memory = total_memory
        self.reserved = 0
        self.allocated = 0
        self.peak_reserved = 0

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return 1 if self.available else 0

    def current_device(self) -> int:
        return 0

    def set_device(self, index: int) -> None:
        self.log.append(("set_device", index))

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        return self.capability

    def get_arch_list(self) -> list[str]:
        return list(self.arch_list)

    def get_device_properties(self, device: Any) -> SimpleNamespace:
        return SimpleNamespace(total_memory=self.total_memory)

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        self.log.append(("cap", fraction, device))

    def memory_reserved(self, device: Any = None) -> int:
        return self.reserved

    def memory_allocated(self, device: Any = None) -> int:
        return self.allocated

    def max_memory_reserved(self, device: Any = None) -> int:
        return self.peak_reserved

    def empty_cache(self) -> None:
        self.log.append("empty_cache")


class FakeTorch(types.ModuleType):
    """A module object with `cuda` and `__version__`, passed to TorchScorer(torch=...)."""

    def __init__(self, log: EventLog, **cuda: Any) -> None:
        super().__init__("torch")
        self.cuda = FakeCuda(log, **cuda)
        self.__version__ = "0.0.0+fake"


class FakeTensor:
    """Records "freed" in the event log when the last reference to it goes."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def __del__(self) -> None:
        self.log.append("freed")


# -- tokenizer -----------------------------------------------------------------


class MergingTokenizer:
    """Greedy longest-match tokenizer: single characters plus two merges.

    `"}` is one token, and `)"},` is one token. So the evidence of the state
    {"person_said": "ok :)"} ends in `)`, `"}`; upstream drops `"}` and keeps `)`,
    but once `, "criterion"` follows, `)"},` swallows that `)` too: the merge
    reaches two tokens back, exactly the boundary case INV-7 fixes.
    """

    MERGES = (')"},', '"}')
    _MERGE_BASE = 0x110000  # above every code point, so merge ids never collide with characters
    pad_token_id = 0
    eos_token_id = 0

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        enable_thinking: bool = False,
    ) -> str:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, index = [], 0
        while index < len(text):
            merge = next((m for m in self.MERGES if text.startswith(m, index)), None)
            if merge is None:
                ids.append(ord(text[index]))
                index += 1
            else:
                ids.append(self._MERGE_BASE + self.MERGES.index(merge))
                index += len(merge)
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(
            self.MERGES[i - self._MERGE_BASE] if i >= self._MERGE_BASE else chr(i) for i in ids
        )


# -- scorer package ------------------------------------------------------------

# The fake shared module mirrors upstream's contract with `_state_prefix`: a module
# global looked up on each call, and every real row checked against the prefix.
SHARED_SOURCE = """
from fastjev._runtime.direct import encode_prompt
from fastjev._runtime.shared import _state_prefix


def score_shared(model, tokenizer, rows, metadata, max_tokens=4096):
    encoded = [encode_prompt(tokenizer, row, max_tokens) for row in rows]
    prefix = _state_prefix(tokenizer, rows[0]["state"])
    if not prefix or any(ids[: len(prefix)] != prefix or len(ids) <= len(prefix) for ids, _, _ in encoded):
        raise ValueError("The fixed state prefix does not match every full prompt")
    return [model(row) for row in rows], {"prefix_tokens": len(prefix)}
"""

DIRECT_SOURCE = """
from fastjev._runtime.direct import encode_prompt


def score(model, tokenizer, row, metadata, max_tokens=4096):
    encode_prompt(tokenizer, row, max_tokens)
    return model(row)
"""


# A shared module that proves nothing: it never calls the installed INV-7 wrapper.
NEVER_CALLS = """
from fastjev._runtime.shared import _state_prefix


def score_shared(model, tokenizer, rows, metadata, max_tokens=4096):
    if rows is None:
        _state_prefix(tokenizer, None)
    return [model(row) for row in rows], {}
"""


def wrong_system_prompt(
    tokenizer: Any, row: dict[str, Any], max_tokens: int
) -> tuple[list[int], list[int], str]:
    """Renders the row with another system prompt: the prompt head differs from upstream's."""
    from fastjev._runtime.core import direct_messages  # fakes.py itself needs no scorer package

    messages = direct_messages(row)
    messages[0]["content"] = "Answer freely."
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text), [], "wrong"


def compiled_module(name: str, source: str) -> types.ModuleType:
    """A module whose functions resolve their globals from it, as an imported one's do."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def fake_package(shared_source: str = SHARED_SOURCE) -> ScorerPackage:
    """A scorer package built from source: real fastjev prompts, a fake model call."""
    return ScorerPackage(
        name="fake",
        direct=compiled_module("fake_scorer.direct", DIRECT_SOURCE),
        shared=compiled_module("fake_scorer.shared", shared_source),
        provenance="fake-commit",
    )


def fake_result(row: dict[str, Any]) -> dict[str, Any]:
    """A result shaped like SemIf's, so pass-through can be compared by identity and value."""
    ids = [option["id"] for option in row["options"]]
    return {"id": row["id"], "option_ids": ids, "probabilities": [1.0 / len(ids)] * len(ids)}


class FakeModel:
    """Called by the fake scorers with each row; `behaviour` is what a test swaps."""

    def __init__(self) -> None:
        self.behaviour: Callable[[dict[str, Any]], Any] = fake_result
        self.rows: list[dict[str, Any]] = []

    def __call__(self, row: dict[str, Any]) -> Any:
        self.rows.append(row)
        return self.behaviour(row)


class FakeLoader:
    """Stands in for load_model: logs "load", returns the fake model and tokenizer."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.model = FakeModel()
        self.tokenizer = MergingTokenizer()

    def __call__(
        self, settings: Settings, device: str, dtype: str, torch: Any
    ) -> tuple[Any, Any, dict[str, Any]]:
        self.log.append("load")
        return (
            self.model,
            self.tokenizer,
            {"source": settings.model, "device": device, "dtype": dtype},
        )


def calibration(table: Table | Mapping[str, float] | None) -> Loaded | None:
    """A calibration as the server takes it, from a Table or a plain {workload: T} (no file, so no
    digest); None: none given, the server reads SEMIF_CALIBRATION's."""
    return None if table is None else Loaded(as_table(table))


def settings(**overrides: Any) -> Settings:
    """The tests' one settings factory: a valid token, the stub scorer, an ephemeral
    loopback port; everything overridable (torch-engine tests pass their own package)."""
    return dataclasses.replace(
        Settings(api_token=TOKEN, host="127.0.0.1", port=0, scorer="stub"), **overrides
    )
