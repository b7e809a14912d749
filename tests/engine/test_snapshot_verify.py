"""Weights verified before they load (extension): snapshot_verify and the builders' layout.

The tiny model is built once through the real builder; each test damages its own
copy of the hub cache (links kept as links) and checks that verification refuses
it naming the file. One test does so through a real `python -m semif_serve`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from semif_serve import config
from semif_serve.builders import snapshot
from semif_serve.builders import tiny as tiny_model
from semif_serve.engine import snapshot_verify
from semif_serve.engine.snapshot_verify import SnapshotInvalid
from tests.fakes import settings as server_settings
from tests.wire_client import TOKEN

REPO_ID = tiny_model.REPO_ID


@pytest.fixture
def hub(tiny_built: dict[str, str], tmp_path: Path) -> Path:
    """A private copy of the built hub cache, links kept as links."""
    copy = tmp_path / "hub"
    shutil.copytree(tiny_built["HF_HUB_CACHE"], copy, symlinks=True)
    return copy


@pytest.fixture
def revision(tiny_built: dict[str, str]) -> str:
    return tiny_built["SEMIF_REVISION"]


def entry(hub: Path, revision: str, name: str) -> Path:
    return snapshot.repo_dir(hub.parent, REPO_ID) / "snapshots" / revision / name


def blob_of(hub: Path, revision: str, name: str) -> Path:
    return entry(hub, revision, name).resolve()


def refusal(hub: Path, revision: str, hash_blobs: bool = True) -> str:
    with pytest.raises(SnapshotInvalid) as caught:
        snapshot_verify.verify(REPO_ID, revision, hash_blobs=hash_blobs, cache=hub)
    return str(caught.value)


def flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


# -- the builders write the hub's layout -------------------------------------------------


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_builder_writes_blobs_named_by_their_hash_behind_relative_links(
    hub: Path, revision: str
) -> None:
    blobs = snapshot.repo_dir(hub.parent, REPO_ID) / "blobs"
    for name in tiny_model.SNAPSHOT_FILES:
        link = entry(hub, revision, name)
        assert link.is_symlink() and os.readlink(link) == f"../../blobs/{link.resolve().name}"
        data = link.read_bytes()
        expected = (
            hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else git_blob_id(data)
        )
        assert link.resolve() == blobs / expected, name
    assert sorted(path.name for path in blobs.iterdir()) == sorted(
        blob_of(hub, revision, n).name for n in tiny_model.SNAPSHOT_FILES
    )


@pytest.mark.parametrize("damage", ["flip", "delete-blob", "delete-link"])
def test_publishing_again_repairs_a_damaged_snapshot_so_it_verifies(
    tmp_path: Path, damage: str
) -> None:
    files = {"config.json": b'{"a": 1}', "model.safetensors": bytes(range(256)) * 64}
    built = snapshot.publish(tmp_path, "org/small", files, label="test")
    hub, revision = Path(built["HF_HUB_CACHE"]), built["SEMIF_REVISION"]
    link = hub / "models--org--small" / "snapshots" / revision / "model.safetensors"
    {
        "flip": lambda: flip_one_byte(link.resolve()),
        "delete-blob": lambda: link.resolve().unlink(),
        "delete-link": link.unlink,
    }[damage]()
    with pytest.raises(SnapshotInvalid, match="'model.safetensors'"):
        snapshot_verify.verify("org/small", revision, cache=hub)
    assert snapshot.publish(tmp_path, "org/small", files, label="test") == built
    assert snapshot_verify.verify("org/small", revision, cache=hub).files == 2


def test_an_absolute_link_to_the_right_blob_is_accepted(hub: Path, revision: str) -> None:
    link = entry(hub, revision, "config.json")
    blob = link.resolve()
    link.unlink()
    link.symlink_to(blob)  # the hub falls back to absolute links where relative ones fail
    assert snapshot_verify.verify(REPO_ID, revision, cache=hub).files == len(
        tiny_model.SNAPSHOT_FILES
    )


def test_the_intact_snapshot_passes_in_both_modes(hub: Path, revision: str) -> None:
    verified = snapshot_verify.verify(REPO_ID, revision, cache=hub)
    assert verified.files == len(tiny_model.SNAPSHOT_FILES)
    assert verified.hashed_bytes == sum(
        blob_of(hub, revision, n).stat().st_size for n in tiny_model.SNAPSHOT_FILES
    )
    assert snapshot_verify.verify(REPO_ID, revision, hash_blobs=False, cache=hub).hashed_bytes == 0
    assert (
        snapshot_verify.verify(REPO_ID, "main", cache=hub).snapshot == verified.snapshot
    )  # a branch resolves via refs


# -- damage, and the file named ----------------------------------------------------------


@pytest.mark.parametrize("name", tiny_model.SNAPSHOT_FILES)
def test_one_flipped_byte_is_refused_naming_the_file(hub: Path, revision: str, name: str) -> None:
    flip_one_byte(
        blob_of(hub, revision, name)
    )  # sha256 (LFS) for the weights, git blob ids for the rest
    message = refusal(hub, revision)
    assert f"{name!r}" in message and "corrupt" in message
    # The documented trade: presence checks alone cannot see a flipped byte.
    snapshot_verify.verify(REPO_ID, revision, hash_blobs=False, cache=hub)


def test_a_truncated_blob_is_refused_naming_the_file(hub: Path, revision: str) -> None:
    blob = blob_of(hub, revision, "model.safetensors")
    os.truncate(blob, blob.stat().st_size // 2)
    assert "'model.safetensors'" in refusal(hub, revision)


@pytest.mark.parametrize("hash_blobs", [True, False])
@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_a_missing_blob_is_refused_naming_the_file(
    hub: Path, revision: str, name: str, hash_blobs: bool
) -> None:
    blob_of(hub, revision, name).unlink()
    message = refusal(hub, revision, hash_blobs)
    assert f"{name!r}" in message and "missing" in message


@pytest.mark.parametrize("hash_blobs", [True, False])
@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_required_file_missing_from_the_snapshot_is_refused_naming_it(
    hub: Path, revision: str, name: str, hash_blobs: bool
) -> None:
    entry(hub, revision, name).unlink()
    message = refusal(hub, revision, hash_blobs)
    assert f"{name!r}" in message and "missing" in message


def test_a_file_that_is_not_a_link_to_a_blob_cannot_be_verified(hub: Path, revision: str) -> None:
    link = entry(hub, revision, "config.json")
    data = link.read_bytes()
    link.unlink()
    link.write_bytes(data)
    assert "'config.json'" in refusal(hub, revision)


def test_an_unknown_model_or_revision_is_refused(hub: Path, revision: str) -> None:
    with pytest.raises(SnapshotInvalid, match="not in the hub cache"):
        snapshot_verify.verify("nobody/nothing", revision, cache=hub)
    assert "no snapshot" in refusal(hub, "0" * 40)
    assert "refs" in refusal(hub, "no-such-branch")


def test_every_shard_a_safetensors_index_lists_must_be_there(tmp_path: Path) -> None:
    index = {
        "metadata": {},
        "weight_map": {
            "a.weight": "model-00001-of-00002.safetensors",
            "b.weight": "model-00002-of-00002.safetensors",
        },
    }
    files = {
        "config.json": b"{}",
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": b"\x01" * 4096,
        "model-00002-of-00002.safetensors": b"\x02" * 4096,
    }
    built = snapshot.publish(tmp_path, "org/sharded", files, label="test")
    hub = Path(built["HF_HUB_CACHE"])
    assert snapshot_verify.verify("org/sharded", built["SEMIF_REVISION"], cache=hub).files == 4
    (
        hub
        / "models--org--sharded"
        / "snapshots"
        / built["SEMIF_REVISION"]
        / "model-00002-of-00002.safetensors"
    ).unlink()
    with pytest.raises(SnapshotInvalid, match="'model-00002-of-00002.safetensors' is missing"):
        snapshot_verify.verify("org/sharded", built["SEMIF_REVISION"], cache=hub)


# -- wired into startup ------------------------------------------------------------------


def test_the_setting_is_on_by_default_and_refuses_an_unknown_mode() -> None:
    assert config.load({"SEMIF_API_TOKEN": TOKEN}).verify_weights == "hash"
    assert (
        config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_VERIFY_WEIGHTS": "presence"}).verify_weights
        == "presence"
    )
    for bad in ("off", "", "HASH"):
        with pytest.raises(ValueError, match="SEMIF_VERIFY_WEIGHTS"):
            config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_VERIFY_WEIGHTS": bad})


def test_the_loader_refuses_before_transformers_reads_a_file(
    hub: Path, revision: str, monkeypatch
) -> None:
    import huggingface_hub.constants
    import transformers

    from semif_serve.engine import torch_scorer

    blob_of(hub, revision, "config.json").unlink()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    opened: list[str] = []
    monkeypatch.setattr(
        transformers.AutoConfig, "from_pretrained", lambda *a, **k: opened.append("config")
    )
    for mode in ("hash", "presence"):
        settings = dataclasses.replace(
            server_settings(),
            model=REPO_ID,
            revision=revision,
            device="cpu",
            scorer="fastjev",
            verify_weights=mode,
        )
        with pytest.raises(SnapshotInvalid, match="'config.json' is missing"):
            torch_scorer.load_model(settings, "cpu", "float32", None)  # type: ignore[arg-type]
    assert opened == []


def test_a_corrupt_snapshot_refuses_startup_of_the_real_process(
    hub: Path, revision: str, tiny_built: dict[str, str]
) -> None:
    flip_one_byte(blob_of(hub, revision, "model.safetensors"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SEMIF_", "HF_"))}
    env.update(
        {
            **tiny_built,
            "HF_HOME": str(hub.parent),
            "HF_HUB_CACHE": str(hub),
            "SEMIF_API_TOKEN": TOKEN,
            "SEMIF_HOST": "127.0.0.1",
            "OMP_NUM_THREADS": "1",
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "semif_serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    refusals = [line for line in done.stderr.splitlines() if line.startswith("semif-serve:")]
    assert (
        len(refusals) == 1
        and "SnapshotInvalid" in refusals[0]
        and "'model.safetensors'" in refusals[0]
    ), done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Loading weights" not in done.stderr
