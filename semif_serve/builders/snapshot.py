"""Publishing a model snapshot into a Hugging Face hub cache, atomically and by content.

Rule 1: the revision is a hash of the files' names and bytes, so it changes
exactly when they do, and a second build of the same bytes rewrites nothing.
Rule 2: a snapshot is written beside its final place and renamed into it, so an
interrupted build never leaves half a snapshot where the loader would read it.
Rule 3: this module knows the cache's layout, never what a model is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path


def revision_of(files: dict[str, bytes]) -> str:
    """A commit-like 40-hex id that changes exactly when a file name or byte does."""
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def repo_dir(out: Path, repo_id: str) -> Path:
    """Where the hub cache keeps this repository under HF_HOME=out."""
    return out / "hub" / ("models--" + repo_id.replace("/", "--"))


def matches(snapshot: Path, files: dict[str, bytes]) -> bool:
    """True when the snapshot holds exactly these files with exactly these bytes."""
    if not snapshot.is_dir():
        return False
    present = sorted(path.name for path in snapshot.iterdir())
    return present == sorted(files) and all((snapshot / name).read_bytes() == data for name, data in files.items())


def _write_snapshot(snapshot: Path, files: dict[str, bytes]) -> None:
    """Write beside the target, then rename, so a reader never sees half a snapshot."""
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=snapshot.parent))
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
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
