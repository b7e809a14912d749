"""bench/data/labelled.jsonl: the format evaluate and calibrate read, a balanced label position, a clean split."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench.labelled import rows as labelled

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "labelled.jsonl"
KEYS = {"id", "split", "state", "question", "options", "label", "rationale"}


@pytest.fixture(scope="module")
def items() -> list[dict]:
    return labelled.load(DATA)


def test_every_row_has_the_format(items: list[dict]) -> None:
    assert len(items) >= 120
    for row in items:
        where = row["id"]
        assert set(row) == KEYS, where
        assert isinstance(row["id"], str) and row["id"], where
        assert isinstance(row["question"], str) and row["question"].strip(), where
        assert isinstance(row["state"], (str, dict)) and row["state"], where
        options = row["options"]
        assert 2 <= len(options) <= 5, where
        assert all(
            set(o) == {"id", "description"} and o["id"] and o["description"].strip()
            for o in options
        ), where
        assert len({o["id"] for o in options}) == len(options), f"{where}: repeated option id"
        assert len({o["description"] for o in options}) == len(options), (
            f"{where}: repeated description"
        )
        assert type(row["label"]) is int and 0 <= row["label"] < len(options), where
        assert row["rationale"].strip() and "\n" not in row["rationale"], (
            f"{where}: rationale must be one line"
        )


def test_label_position_is_balanced_within_each_split_and_option_count(items: list[dict]) -> None:
    """Per split and option count, every position holds the label equally often (to within one row)."""
    groups: dict[tuple[str, int], Counter[int]] = {}
    for row in items:
        groups.setdefault((row["split"], len(row["options"])), Counter())[row["label"]] += 1
    for (split, n), counts in groups.items():
        per_position = [counts[k] for k in range(n)]
        assert max(per_position) - min(per_position) <= 1, (split, n, per_position)


def test_the_split_halves_the_set_by_option_count_and_shares_nothing(items: list[dict]) -> None:
    splits = Counter(row["split"] for row in items)
    assert set(splits) == {"fit", "test"} and abs(splits["fit"] - splits["test"]) <= 1
    by_count = Counter((row["split"], len(row["options"])) for row in items)
    for n in {len(row["options"]) for row in items}:
        assert abs(by_count["fit", n] - by_count["test", n]) <= 1, n
    fit = {labelled.state_key(row) for row in items if row["split"] == "fit"}
    test = {labelled.state_key(row) for row in items if row["split"] == "test"}
    assert not fit & test, "a decision (state, question, options) sits in both halves"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
                "label": 2,
            },
            "label must be",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
                "label": True,
            },
            "label must be",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}],
                "label": 0,
            },
            "options must be a list of at least 2",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
            },
            "missing ['label']",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
                "label": 0,
                "split": "train",
            },
            "split must be",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
                "label": 0,
                "workload": "",
            },
            "workload must be a nonempty string, got ''",
        ),
        (
            {
                "id": "a",
                "state": "s",
                "question": "q",
                "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
                "label": 0,
                "workload": 3,
            },
            "workload must be a nonempty string, got 3",
        ),
    ],
)
def test_a_bad_row_is_refused_with_its_line(tmp_path: Path, line: dict, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = {
        "id": "ok",
        "state": "s",
        "question": "q",
        "options": [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}],
        "label": 1,
    }
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(labelled.RowError, match=re.escape(f"bad.jsonl:2: {message}")):
        labelled.load(path)


def test_the_prior_fit_reads_rows_without_a_label_and_never_checks_one(tmp_path: Path) -> None:
    options = [{"id": "x", "description": "X"}, {"id": "y", "description": "Y"}]
    path = tmp_path / "decisions.jsonl"
    path.write_text(
        json.dumps({"id": "a", "state": "s", "question": "q", "options": options})
        + "\n"
        + json.dumps({"id": "b", "state": "s", "question": "q", "options": options, "label": 9})
        + "\n"
    )
    assert [row["id"] for row in labelled.load(path, labelled=False)] == ["a", "b"]
    with pytest.raises(labelled.RowError, match=re.escape("decisions.jsonl:1: missing ['label']")):
        labelled.load(path)


def test_one_side_of_the_split_and_none_on_an_empty_side() -> None:
    rows = [{"id": "a", "split": "fit"}, {"id": "b", "split": "test"}, {"id": "c", "split": "fit"}]
    assert (
        labelled.of_split(rows, "fit") == [rows[0], rows[2]]
        and labelled.of_split(rows, None) == rows
    )
    with pytest.raises(labelled.RowError, match="no row is on the 'test' side of the split"):
        labelled.of_split(rows[:1], "test")


def test_a_file_without_split_fields_is_split_by_id_the_same_way_every_time() -> None:
    ids = [f"row-{k}" for k in range(200)]
    sides = [labelled.split_of({"id": i}) for i in ids]
    assert sides == [labelled.split_of({"id": i}) for i in ids]
    assert 60 <= sides.count("fit") <= 140
    assert labelled.split_of({"id": "row-0", "split": "test"}) == "test"
