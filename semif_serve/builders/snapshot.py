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
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _File:
    """One file to publish: its name, its content hash, and its bytes in memory or staged on disk
    (a staged file is moved into its blob, so a multi-GB weight file is never held in memory)."""

    name: str
    size: int
    sha256: bytes
    data: bytes | None = None
    staged: Path | None = None

    @classmethod
    def of_bytes(cls, name: str, data: bytes) -> _File:
        return cls(name, len(data), hashlib.sha256(data).digest(), data=data)

    @classmethod
    def of_path(cls, name: str, path: Path) -> _File:
        with open(path, "rb") as stream:
            digest = hashlib.file_digest(stream, "sha256").digest()
        return cls(name, path.stat().st_size, digest, staged=path)

    def read(self) -> bytes:
        return self.data if self.data is not None else Path(str(self.staged)).read_bytes()

    @property
    def etag(self) -> str:
        """The blob name the hub gives these bytes: sha256 for an LFS file, the git blob id otherwise."""
        if Path(self.name).suffix in LFS_SUFFIXES or self.size > GIT_MAX_BYTES:
            return self.sha256.hex()
        return git_hash(self.read())


def _revision(files: list[_File]) -> str:
    digest = hashlib.sha1()
    for file in sorted(files, key=lambda file: file.name):
        digest.update(file.name.encode() + b"\0" + file.sha256)
    return digest.hexdigest()


def revision_of(files: dict[str, bytes]) -> str:
    """A commit-like 40-hex id that changes exactly when a file name or byte does."""
    return _revision([_File.of_bytes(name, data) for name, data in files.items()])


def repo_dir(out: Path, repo_id: str) -> Path:
    """Where the hub cache keeps this repository under HF_HOME=out."""
    return out / "hub" / repo_folder_name(repo_id=repo_id, repo_type="model")


def etag(name: str, data: bytes) -> str:
    """The blob name the hub gives these bytes: sha256 for an LFS file, the git blob id otherwise."""
    return _File.of_bytes(name, data).etag


def _link(snapshot: Path, name: str, blob: Path) -> str:
    """The relative link target from snapshots/<rev>/<name> to its blob, as the hub writes it."""
    return os.path.relpath(blob, (snapshot / name).parent)


def _blob_holds(blob: Path, file: _File) -> bool:
    """The blob is present with exactly this file's bytes (hashed, so a torn or tampered one fails)."""
    if not blob.is_file() or blob.stat().st_size != file.size:
        return False
    with open(blob, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").digest() == file.sha256


def _matches(snapshot: Path, files: list[_File], etags: dict[str, str]) -> bool:
    """True when the snapshot holds exactly these files, each a link to its own blob with these bytes."""
    if not snapshot.is_dir():
        return False
    present = sorted(
        str(path.relative_to(snapshot)) for path in snapshot.rglob("*") if not path.is_dir()
    )
    blobs = snapshot.parent.parent / "blobs"
    return present == sorted(file.name for file in files) and all(
        (snapshot / file.name).is_symlink()
        and os.readlink(snapshot / file.name)
        == _link(snapshot, file.name, blobs / etags[file.name])
        and _blob_holds(blobs / etags[file.name], file)
        for file in files
    )


def _write_blob(blob: Path, file: _File) -> None:
    """Put one blob in place unless it already holds these bytes; a torn or tampered one is replaced.
    A staged file is renamed in (same filesystem), bytes are written beside the blob and renamed."""
    if _blob_holds(blob, file):
        return
    if file.staged is not None:
        os.replace(file.staged, blob)
        return
    handle, staging = tempfile.mkstemp(prefix=".staging-", dir=blob.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(file.read())
        os.replace(staging, blob)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _write_snapshot(snapshot: Path, files: list[_File], etags: dict[str, str]) -> None:
    """Blobs first, then links written beside the target and renamed, so a reader never
    sees half a snapshot or a link to a blob that is not there yet."""
    blobs = snapshot.parent.parent / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=snapshot.parent))
    try:
        for file in files:
            blob = blobs / etags[file.name]
            _write_blob(blob, file)
            (staging / file.name).parent.mkdir(parents=True, exist_ok=True)
            # staging sits beside the snapshot, so the same relative target holds after the rename.
            os.symlink(_link(snapshot, file.name, blob), staging / file.name)
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
    return _publish(
        out, repo_id, [_File.of_bytes(name, data) for name, data in files.items()], label
    )


def publish_folder(out: Path, repo_id: str, folder: Path, label: str) -> dict[str, str]:
    """Publish the files of a flat folder, moving each into its blob (folder must be on out's
    filesystem); what is left in the folder afterwards is the caller's to remove."""
    files = [_File.of_path(path.name, path) for path in sorted(folder.iterdir())]
    return _publish(out, repo_id, files, label)


def _publish(out: Path, repo_id: str, files: list[_File], label: str) -> dict[str, str]:
    out = out.resolve()
    revision = _revision(files)
    repo = repo_dir(out, repo_id)
    snapshot = repo / "snapshots" / revision
    etags = {file.name: file.etag for file in files}
    if _matches(snapshot, files, etags):
        print(f"{label}: snapshot {revision} already present", file=sys.stderr)
    else:
        print(f"{label}: writing snapshot {revision}", file=sys.stderr)
        _write_snapshot(snapshot, files, etags)
    _write_ref(repo, revision)
    return settings(out, repo_id, revision)
