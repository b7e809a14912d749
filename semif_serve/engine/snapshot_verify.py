"""Weights verified before they load: the pinned snapshot in the local hub cache proves itself.

Rules:
1. This runs before transformers opens a file of the model, reads only the local
   hub cache (never the network) and changes nothing in it.
2. It knows the hub cache's layout and what lists a snapshot's files (the
   directory, config.json, a safetensors index), never how a model is built.
3. Cheapest checks first: the revision resolves, every listed file is present
   as a link to a blob, and only then is any blob hashed.
4. Any failure is one SnapshotInvalid whose message names the file, so startup
   refuses with one line: never a half-loaded model or garbage scores.

Theory of operation. The hub cache stores each file once, under
`models--<org>--<name>/blobs/<etag>`, where the etag is the file's content hash:
the sha256 of its bytes for a large-file (LFS) blob (64 hex), the git blob id
(sha1 of `blob <size>\\0` + bytes, 40 hex) for the rest. `snapshots/<commit>/<name>`
is a relative link to that blob, and `refs/<branch>` holds a commit. So a
snapshot can be checked offline against itself: every entry must resolve to a
blob, the files the snapshot says it needs (config.json, the weights, every
shard a safetensors index maps) must be there, and each blob must hash to its
own name. A flipped byte, a truncated download or a blob deleted by a cache
clean-up all fail here. Hashing reads every byte once (sha256 runs at roughly
1-2 GB/s per core), which `SEMIF_VERIFY_WEIGHTS=presence` (hash_blobs=False)
trades away for the structural checks alone.
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils.sha import git_hash, sha_fileobj

COMMIT = re.compile(r"[0-9a-f]{40}")
SHA256_NAME = re.compile(r"[0-9a-f]{64}")
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
CHUNK = (
    8 << 20
)  # bytes per read while hashing; large reads keep the hash, not Python, the bottleneck
MAX_HASH_THREADS = 4  # hashlib releases the GIL, so shards hash in parallel


class SnapshotInvalid(RuntimeError):
    """The pinned snapshot is missing, incomplete or corrupt (startup refuses)."""


@dataclass(frozen=True)
class Verified:
    """What a verification proved, for the startup log."""

    snapshot: Path
    files: int
    hashed_bytes: int
    seconds: float


def hub_cache() -> Path:
    """The cache transformers reads: huggingface_hub's constant, looked up at call time."""
    return Path(constants.HF_HUB_CACHE)


def repo_folder(cache: Path, repo_id: str) -> Path:
    """Where the hub cache keeps model repository repo_id."""
    return cache / repo_folder_name(repo_id=repo_id, repo_type="model")


def _commit(repo: Path, revision: str) -> str:
    """A 40-hex revision as it is; a branch or tag through refs/<revision>."""
    if COMMIT.fullmatch(revision):
        return revision
    ref = repo / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip()
    except OSError:
        raise SnapshotInvalid(
            f"revision {revision!r} is not a commit and {ref} does not name one"
        ) from None
    if not COMMIT.fullmatch(commit):
        raise SnapshotInvalid(f"{ref} does not hold a 40-hex commit")
    return commit


def _blob(snapshot: Path, blobs: Path, name: str) -> Path:
    """The blob one snapshot entry links to; refused unless it is a present, content-named blob."""
    entry = snapshot / name
    if not entry.is_symlink():
        if not entry.exists():
            raise SnapshotInvalid(f"snapshot file {name!r} is missing from {snapshot}")
        raise SnapshotInvalid(
            f"snapshot file {name!r} is not a link to a content-addressed blob, so it cannot be verified"
        )
    target = Path(os.path.normpath(entry.parent / os.readlink(entry)))
    # realpath on the folders only: an absolute link through a symlinked cache path still counts.
    in_blobs = os.path.realpath(target.parent) == os.path.realpath(blobs)
    if not in_blobs or not (COMMIT.fullmatch(target.name) or SHA256_NAME.fullmatch(target.name)):
        raise SnapshotInvalid(f"snapshot file {name!r} links to {target}, not to a blob of {blobs}")
    if not target.is_file():
        raise SnapshotInvalid(
            f"snapshot file {name!r} is missing: its blob {target.name} is not in the cache"
        )
    return target


def _listed(snapshot: Path) -> list[str]:
    """Every file the snapshot directory holds, as names relative to it."""
    names: list[str] = []
    for folder, _, files in os.walk(snapshot):
        names.extend(os.path.relpath(os.path.join(folder, name), snapshot) for name in files)
    return sorted(names)


def _required(snapshot: Path, blobs: Path, present: set[str]) -> set[str]:
    """config.json and the weights, with every shard a safetensors index maps."""
    required = {"config.json"}
    if WEIGHTS_INDEX in present:
        index_blob = _blob(snapshot, blobs, WEIGHTS_INDEX)
        try:
            weight_map = json.loads(index_blob.read_text(encoding="utf-8"))["weight_map"]
            required |= {str(shard) for shard in weight_map.values()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SnapshotInvalid(
                f"snapshot file {WEIGHTS_INDEX!r} is not a safetensors index"
            ) from None
    else:
        required.add(WEIGHTS)
    return required


def _digest(blob: Path) -> str:
    """The blob's content hash in the form its name takes."""
    with blob.open("rb") as stream:
        if SHA256_NAME.fullmatch(blob.name):
            return sha_fileobj(stream, CHUNK).hex()
        return git_hash(stream.read())  # git blobs are small files: the hub keeps big ones in LFS


def _check_hashes(entries: dict[str, Path]) -> int:
    """Hash each distinct blob (smallest first); refuse naming the first file that does not match."""
    blobs = sorted(set(entries.values()), key=lambda blob: (blob.stat().st_size, blob.name))
    with ThreadPoolExecutor(max_workers=min(MAX_HASH_THREADS, os.cpu_count() or 1)) as pool:
        digests = dict(zip(blobs, pool.map(_digest, blobs)))
    for name, blob in sorted(entries.items()):
        if digests[blob] != blob.name:
            raise SnapshotInvalid(
                f"snapshot file {name!r} is corrupt: its blob {blob.name} hashes to {digests[blob]}"
            )
    return sum(blob.stat().st_size for blob in blobs)


def verify(
    repo_id: str, revision: str, hash_blobs: bool = True, cache: Path | None = None
) -> Verified:
    """Prove the snapshot of repo_id@revision complete and, with hash_blobs, every byte of it."""
    started = time.perf_counter()
    repo = repo_folder(cache if cache is not None else hub_cache(), repo_id)
    if not repo.is_dir():
        raise SnapshotInvalid(f"model {repo_id!r} is not in the hub cache ({repo} is missing)")
    snapshot = repo / "snapshots" / _commit(repo, revision)
    if not snapshot.is_dir():
        raise SnapshotInvalid(
            f"revision {revision!r} of {repo_id!r} has no snapshot ({snapshot} is missing)"
        )
    blobs = repo / "blobs"
    present = _listed(snapshot)
    entries = {name: _blob(snapshot, blobs, name) for name in present}
    missing = sorted(_required(snapshot, blobs, set(present)) - set(present))
    if missing:
        raise SnapshotInvalid(f"snapshot file {missing[0]!r} is missing from {snapshot}")
    hashed = _check_hashes(entries) if hash_blobs else 0
    return Verified(snapshot, len(entries), hashed, time.perf_counter() - started)
