"""Publishing a model snapshot into a Hugging Face hub cache, atomically and by content.

Rule 1: the revision is a hash of the files' names and bytes, so it changes
exactly when they do, and a second build of the same bytes rewrites nothing.
Rule 2: a snapshot is written beside its final place and renamed into it, so an
interrupted build never leaves half a snapshot where the loader would read it;
its blobs are in place before it is.
Rule 3: this module knows the cache's layout, never what a model is.
Rule 4: the layout is the hub's own, so a snapshot passes the same check before
load (semif_serve/engine/snapshot_verify.py) as a downloaded one: each file's bytes
live once in `blobs/<etag>`, the etag being the sha256 of the bytes for a
large-file (LFS) blob and the git blob id for the rest, and
`snapshots/<revision>/<name>` is a relative link to it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils.sha import git_hash

# What the hub's default .gitattributes stores in LFS, plus anything over its 10 MB git limit.
LFS_SUFFIXES = frozenset(
    {
        ".safetensors",
        ".bin",
        ".pt",
        ".pth",
        ".ckpt",
        ".h5",
        ".onnx",
        ".msgpack",
        ".model",
        ".gguf",
        ".npy",
        ".npz",
        ".pkl",
        ".ot",
        ".tflite",
        ".zip",
        ".gz",
        ".tar",
        ".parquet",
    }
)
GIT_MAX_BYTES = 10 * 1024 * 1024


def revision_of(files: dict[str, bytes]) -> str:
    """A commit-like 40-hex id that changes exactly when a file name or byte does."""
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def repo_dir(out: Path, repo_id: str) -> Path:
    """Where the hub cache keeps this repository under HF_HOME=out."""
    return out / "hub" / repo_folder_name(repo_id=repo_id, repo_type="model")


def etag(name: str, data: bytes) -> str:
    """The blob name the hub gives these bytes: sha256 for an LFS file, the git blob id otherwise."""
    if Path(name).suffix in LFS_SUFFIXES or len(data) > GIT_MAX_BYTES:
        return hashlib.sha256(data).hexdigest()
    return git_hash(data)


def _link(snapshot: Path, name: str, blob: Path) -> str:
    """The relative link target from snapshots/<rev>/<name> to its blob, as the hub writes it."""
    return os.path.relpath(blob, (snapshot / name).parent)


def matches(snapshot: Path, files: dict[str, bytes]) -> bool:
    """True when the snapshot holds exactly these files, each a link to its own blob with these bytes."""
    if not snapshot.is_dir():
        return False
    present = sorted(
        str(path.relative_to(snapshot)) for path in snapshot.rglob("*") if not path.is_dir()
    )
    return present == sorted(files) and all(
        _holds(snapshot, name, data) for name, data in files.items()
    )


def _holds(snapshot: Path, name: str, data: bytes) -> bool:
    """The entry is the hub's link to the blob named by these bytes' hash, and the blob holds them."""
    entry, blob = snapshot / name, snapshot.parent.parent / "blobs" / etag(name, data)
    return (
        entry.is_symlink()
        and os.readlink(entry) == _link(snapshot, name, blob)
        and blob.is_file()
        and blob.stat().st_size == len(data)
        and blob.read_bytes() == data
    )


def _write_blob(blob: Path, data: bytes) -> None:
    """Write one blob unless it already holds these bytes; a torn or tampered one is replaced."""
    if blob.is_file() and blob.stat().st_size == len(data) and blob.read_bytes() == data:
        return
    handle, staging = tempfile.mkstemp(prefix=".staging-", dir=blob.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(staging, blob)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _write_snapshot(snapshot: Path, files: dict[str, bytes]) -> None:
    """Blobs first, then links written beside the target and renamed, so a reader never
    sees half a snapshot or a link to a blob that is not there yet."""
    blobs = snapshot.parent.parent / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=snapshot.parent))
    try:
        for name, data in files.items():
            blob = blobs / etag(name, data)
            _write_blob(blob, data)
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            # staging sits beside the snapshot, so the same relative target holds after the rename.
            os.symlink(_link(snapshot, name, blob), staging / name)
        if snapshot.exists():
            shutil.rmtree(snapshot)
        os.replace(staging, snapshot)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_ref(repo: Path, revision: str) -> None:
    """Point refs/main at the revision, leaving a correct ref untouched."""
    ref = repo / "refs" / "main"
    if ref.is_file() and ref.read_text() == revision:
        return
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(revision)


def settings(out: Path, repo_id: str, revision: str) -> dict[str, str]:
    """The environment that serves this snapshot through the production loading path."""
    return {
        "SEMIF_MODEL": repo_id,
        "SEMIF_REVISION": revision,
        "HF_HOME": str(out),
        # Wins over HF_HOME, so an HF_HUB_CACHE already in the environment cannot hide the snapshot.
        "HF_HUB_CACHE": str(out / "hub"),
        "HF_HUB_OFFLINE": "1",
        "SEMIF_DEVICE": "cpu",
        "SEMIF_SCORER": "fastjev",
    }


def publish(out: Path, repo_id: str, files: dict[str, bytes], label: str) -> dict[str, str]:
    """Write the snapshot under out (unless an identical one is there) and return its settings."""
    out = out.resolve()
    revision = revision_of(files)
    repo = repo_dir(out, repo_id)
    snapshot = repo / "snapshots" / revision
    if matches(snapshot, files):
        print(f"{label}: snapshot {revision} already present", file=sys.stderr)
    else:
        print(f"{label}: writing snapshot {revision}", file=sys.stderr)
        _write_snapshot(snapshot, files)
    _write_ref(repo, revision)
    return settings(out, repo_id, revision)
