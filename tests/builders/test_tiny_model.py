"""The tiny Qwen3.5 snapshot: reproducible, loadable offline, and scoring through upstream.

Nothing is mocked: the model is built once per module, loaded by transformers from the
hub-cache layout it was written in, and scored by fastjev's own scorer functions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fastjev._runtime import direct, shared
from transformers import AutoConfig, AutoTokenizer, Qwen3_5ForCausalLM

from semif_serve.builders import snapshot
from semif_serve.builders import tiny as tiny_model

LETTERS = "ABCDEFGHIJKLMNOP"
REFUSAL = "The fixed state prefix does not match every full prompt"
BOUNDARY_STATES = [{"person_said": "ok :)"}, {"x": "a;"}, {"x": "a}"}]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny")


@pytest.fixture(scope="module")
def built(out: Path) -> dict[str, str]:
    return tiny_model.build(out)


@pytest.fixture(scope="module")
def one_thread():
    """A forward pass of this size is ~30 ms on one thread but can take seconds when
    torch's intra-op threads compete for a busy CPU; restore the setting afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def loaded(built: dict[str, str], one_thread) -> tuple[Qwen3_5ForCausalLM, object, dict]:
    """Model and tokenizer as the server loads them, from the cache the build wrote."""
    common = {
        "revision": built["SEMIF_REVISION"],
        "cache_dir": built["HF_HUB_CACHE"],
        "local_files_only": True,
    }
    config = AutoConfig.from_pretrained(built["SEMIF_MODEL"], **common)
    tokenizer = AutoTokenizer.from_pretrained(built["SEMIF_MODEL"], **common)
    model, info = Qwen3_5ForCausalLM.from_pretrained(
        built["SEMIF_MODEL"],
        config=config.get_text_config(),
        dtype=torch.float32,
        output_loading_info=True,
        **common,
    )
    return model.eval(), tokenizer, {"config": config, "info": info}


def _snapshot_bytes(out: Path) -> dict[str, bytes]:
    hub = out / "hub"
    return {
        str(path.relative_to(hub)): path.read_bytes()
        for path in sorted(hub.rglob("*"))
        if path.is_file()
    }


def _row(row_id: str, state: object, descriptions: list[str]) -> dict:
    return {
        "id": row_id,
        "state": state,
        "question": f"Criterion {row_id}: is the person upset?",
        "options": [
            {"id": f"o{index}", "description": text} for index, text in enumerate(descriptions)
        ],
    }


def test_build_is_deterministic(built: dict[str, str], out: Path, tmp_path: Path) -> None:
    again = tiny_model.build(tmp_path)
    assert again["SEMIF_REVISION"] == built["SEMIF_REVISION"]
    assert re.fullmatch(r"[0-9a-f]{40}", again["SEMIF_REVISION"])
    assert _snapshot_bytes(tmp_path) == _snapshot_bytes(out)


def test_revision_is_the_content_hash(built: dict[str, str], out: Path) -> None:
    repo = snapshot.repo_dir(out, tiny_model.REPO_ID)
    folder = repo / "snapshots" / built["SEMIF_REVISION"]
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert sorted(files) == list(tiny_model.SNAPSHOT_FILES)
    assert snapshot.revision_of(files) == built["SEMIF_REVISION"]
    assert (repo / "refs" / "main").read_text() == built["SEMIF_REVISION"]


def test_build_is_idempotent(built: dict[str, str], out: Path) -> None:
    hub = out / "hub"
    before = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in hub.rglob("*")}
    assert tiny_model.build(out) == built
    after = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in hub.rglob("*")}
    assert after == before


def test_build_repairs_a_tampered_snapshot(built: dict[str, str], tmp_path: Path) -> None:
    tiny_model.build(tmp_path)
    config = (
        snapshot.repo_dir(tmp_path, tiny_model.REPO_ID)
        / "snapshots"
        / built["SEMIF_REVISION"]
        / "config.json"
    )
    pristine = config.read_bytes()
    config.write_bytes(pristine.replace(b'"hidden_size": 64', b'"hidden_size": 65'))
    tiny_model.build(tmp_path)
    assert config.read_bytes() == pristine


def test_main_prints_settings_that_load_offline(built: dict[str, str], out: Path, capsys) -> None:
    assert tiny_model.main(["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(re.fullmatch(r"[A-Z_]+=\S+", line) for line in lines), lines
    printed = dict(line.split("=", 1) for line in lines)
    assert printed == built
    assert {
        "SEMIF_DEVICE": "cpu",
        "SEMIF_SCORER": "fastjev",
        "HF_HUB_OFFLINE": "1",
    }.items() <= printed.items()
    assert printed["HF_HOME"] == str(out.resolve())
    # A fresh process resolves the repo id from HF_HOME alone, as the loader does
    # (local_files_only=False, so only HF_HUB_OFFLINE keeps it off the network).
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "HUGGINGFACE_"))
    }
    env.update({key: printed[key] for key in ("HF_HOME", "HF_HUB_OFFLINE")})
    program = """
import json, os, torch
from transformers import AutoConfig, AutoTokenizer, Qwen3_5ForCausalLM
common = {"revision": os.environ["SEMIF_REVISION"], "local_files_only": False}
name = os.environ["SEMIF_MODEL"]
config = AutoConfig.from_pretrained(name, **common)
tokenizer = AutoTokenizer.from_pretrained(name, **common)
model, info = Qwen3_5ForCausalLM.from_pretrained(
    name, config=config.get_text_config(), dtype=torch.float32, output_loading_info=True, **common
)
print(json.dumps({"model_type": config.model_type, "vocab": len(tokenizer),
                  "problems": sum(len(info[key]) for key in ("missing_keys", "mismatched_keys", "error_msgs"))}))
"""
    env.update(SEMIF_MODEL=printed["SEMIF_MODEL"], SEMIF_REVISION=printed["SEMIF_REVISION"])
    result = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["model_type"] == "qwen3_5"
    assert report["problems"] == 0
    assert report["vocab"] > 256


def test_checkpoint_loads_completely_as_a_hybrid_qwen35(loaded) -> None:
    model, _, extra = loaded
    info = extra["info"]
    assert not any(
        info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
    ), info
    assert extra["config"].model_type == "qwen3_5"
    assert set(model.config.layer_types) == {"linear_attention", "full_attention"}
    assert 100_000 <= sum(parameter.numel() for parameter in model.parameters()) <= 300_000


def test_letters_are_single_round_trip_tokens(loaded) -> None:
    _, tokenizer, _ = loaded
    ids = []
    for letter in LETTERS:
        encoded = tokenizer.encode(letter, add_special_tokens=False)
        assert len(encoded) == 1, (letter, encoded)
        assert tokenizer.decode(encoded) == letter
        ids.extend(encoded)
    assert len(set(ids)) == len(LETTERS)
    assert tokenizer.pad_token_id is not None and tokenizer.eos_token_id is not None


def test_chat_template_honours_enable_thinking(loaded) -> None:
    _, tokenizer, _ = loaded
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    closed = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert (
        closed == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    default = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert default.endswith("<|im_start|>assistant\n")


def test_shared_agrees_with_direct(loaded) -> None:
    model, tokenizer, _ = loaded
    state = {"person_said": "I am fine, thanks"}
    rows = [
        _row("a", state, ["Yes", "No"]),
        _row("b", state, ["calm", "upset", "unclear", "other"]),
        _row("c", state, ["no", "yes"]),
    ]
    direct_results = [direct.score(model, tokenizer, row, {"source": "tiny"}) for row in rows]
    shared_results, timing = shared.score_shared(model, tokenizer, rows, {"source": "tiny"})
    assert timing["prefix_tokens"] > 0
    for one, many in zip(direct_results, shared_results, strict=True):
        assert one["id"] == many["id"]
        assert max(one["probabilities"]) - min(one["probabilities"]) > 0.05  # a real top choice
        assert max(abs(a - b) for a, b in zip(one["probabilities"], many["probabilities"])) < 1e-5


@pytest.mark.parametrize("state", BOUNDARY_STATES, ids=[")", ";", "}"])
def test_upstream_refuses_a_boundary_object_state(loaded, state: dict) -> None:
    model, tokenizer, _ = loaded
    with pytest.raises(ValueError, match=re.escape(REFUSAL)):
        shared.score_shared(model, tokenizer, [_row("r", state, ["Yes", "No"])], {})


@pytest.mark.parametrize("state", ["ok :)", {"person_said": "fine"}], ids=["string", "ordinary"])
def test_upstream_accepts_other_states(loaded, state: object) -> None:
    model, tokenizer, _ = loaded
    results, _ = shared.score_shared(model, tokenizer, [_row("r", state, ["Yes", "No"])], {})
    assert len(results[0]["probabilities"]) == 2
