"""What the GGUF builders share: the one-line error, the extra they need, the tokenizer as the
file declares it, and the marker that lets a second run skip the conversion.

Rule 1: a marker is written only after its snapshot is published, and renamed into place, so
it is whole or absent; it is trusted only while the server's structural check passes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..engine import snapshot_verify
from . import snapshot


class BuildError(RuntimeError):
    """A build that cannot succeed, with the one line that tells the user why."""


def require_model_extra() -> None:
    """The conversion's dependencies live in the `model` extra, never in the server's."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise BuildError(
            f"converting the GGUF needs {' and '.join(missing)}: pip install -e '.[model]'"
        )


def tokenizer_as_declared(tokenizer: Any, config: Any) -> None:
    """EOS and PAD as the GGUF declares them (its ids are in the config: transformers maps EOS to
    `<|im_start|>`), and `clean_up_tokenization_spaces` false. transformers' GGUF loader sets the
    latter true, then ignores it for a BPE tokenizer (decoding strips no space either way) and warns
    on the first decode of every load; false decodes the same text and no token id can change
    (encoding never reads it). Set on the loaded tokenizer: the loader overrides the keyword."""
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    tokenizer.pad_token = tokenizer.convert_ids_to_tokens(config.pad_token_id)
    tokenizer.clean_up_tokenization_spaces = False


@contextlib.contextmanager
def writing(out: Path) -> Iterator[None]:
    """ENOSPC, EACCES, ... while writing under out: one line; nothing half-written is read."""
    try:
        yield
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise BuildError(
            f"cannot write the snapshot under {out}: {error.strerror or error}{where}"
        ) from None


def _marker(out: Path, key: str) -> Path:
    return out / "semif-serve-builds" / f"{key}.json"


def built_before(
    out: Path, repo_id: str, key: str, files: Sequence[str] | None
) -> dict[str, str] | None:
    """The settings of a complete snapshot an earlier run recorded under key, if any. files: the
    exact names the snapshot must hold (None: whatever its config and safetensors index require)."""
    try:
        revision = json.loads(_marker(out, key).read_text())["revision"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:  # the server's own structural check: every file a link to its blob (hashing is the server's)
        found = snapshot_verify.verify(repo_id, str(revision), hash_blobs=False, cache=out / "hub")
    except snapshot_verify.SnapshotInvalid:
        return None
    if files is not None and sorted(path.name for path in found.snapshot.iterdir()) != list(files):
        return None
    return snapshot.settings(out, repo_id, revision)


def remember(out: Path, key: str, record: dict[str, str]) -> None:
    """Write the marker (with the revision in record) beside its place and rename it in."""
    marker = _marker(out, key)
    marker.parent.mkdir(parents=True, exist_ok=True)
    staging = marker.with_name(marker.name + ".tmp")
    staging.write_text(json.dumps(record))
    os.replace(staging, marker)


def print_settings(command: str, build: Callable[[], Mapping[str, str]]) -> int:
    """A builder's command line: the built model's settings as `KEY=value` lines, for
    `set -a; . <(semif-serve COMMAND)`; or its BuildError, one line on stderr, and exit 1."""
    try:
        settings = build()
    except BuildError as error:
        print(f"{command}: {error}", file=sys.stderr)
        return 1
    for key, value in settings.items():
        print(f"{key}={value}")
    return 0
