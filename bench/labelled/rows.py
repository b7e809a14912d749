"""The labelled-row format shared by evaluate, calibrate and prior, and its fit/test split.

A row is `{id, state, question, options, label}` (plus optional `split`,
`workload` and `rationale`): `label` is the index of the correct option in the
row's own order. The prior fit needs no label (`load(..., labelled=False)`):
a row may then omit it, and one that is present is not read. This module checks that shape once, up front, so a bad file
fails with the line that is wrong instead of halfway through a long scoring
run. It knows nothing about HTTP or metrics.

Split rule: a row's own `split` ("fit" or "test") wins; a file without split
fields is divided by a stable hash of each id, so any file in the format can be
calibrated and the same row always lands on the same side.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

Row = dict[str, Any]
SPLITS = ("fit", "test")
REQUEST_KEYS = ("id", "state", "question", "options")


class RowError(ValueError):
    """A labelled file that cannot be used, naming the line."""


def _check(row: Any, where: str, labelled: bool) -> Row:
    if not isinstance(row, dict):
        raise RowError(f"{where}: a row must be a JSON object")
    missing = [key for key in (*REQUEST_KEYS, *(("label",) if labelled else ())) if key not in row]
    if missing:
        raise RowError(f"{where}: missing {missing}")
    options = row["options"]
    if not isinstance(options, list) or len(options) < 2:
        raise RowError(f"{where}: options must be a list of at least 2")
    label = row.get("label")
    if labelled and (
        isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(options)
    ):
        raise RowError(
            f"{where}: label must be an option index in [0, {len(options) - 1}], got {label!r}"
        )
    if "split" in row and row["split"] not in SPLITS:
        raise RowError(f"{where}: split must be one of {SPLITS}, got {row['split']!r}")
    workload = row.get("workload")
    if workload is not None and (not isinstance(workload, str) or not workload):
        raise RowError(f"{where}: workload must be a nonempty string, got {workload!r}")
    return row


def load(path: str | Path, labelled: bool = True) -> list[Row]:
    """Every nonblank line of a JSONL file, checked; ids must be unique. `labelled=False`: no label needed."""
    loaded: list[Row] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                where = f"{path}:{number}"
                try:
                    item = json.loads(line)
                except ValueError as error:
                    raise RowError(f"{where}: not JSON: {error}") from None
                loaded.append(_check(item, where, labelled))
    ids = [row["id"] for row in loaded]
    if len(set(ids)) != len(ids):
        raise RowError(f"{path}: row ids must be unique")
    if not loaded:
        raise RowError(f"{path}: no rows")
    return loaded


def state_key(row: Row) -> str:
    """The decision itself (state, question, options) as canonical text, for finding repeats."""
    return json.dumps(
        [row["state"], row["question"], row["options"]], sort_keys=True, ensure_ascii=False
    )


def split_of(row: Row) -> str:
    """'fit' or 'test': the row's own field, else the parity of a hash of its id."""
    if "split" in row:
        return row["split"]
    digest = hashlib.blake2b(str(row["id"]).encode(), digest_size=1).digest()[0]
    return SPLITS[digest % 2]


def workload_of(row: Row, default: str) -> str:
    """The row's own workload, else the command's --workload."""
    return row.get("workload") or default


def of_split(items: list[Row], split: str | None) -> list[Row]:
    """The rows on one side of the split (all of them when `split` is None); RowError when none are."""
    if split is None:
        return items
    chosen = [row for row in items if split_of(row) == split]
    if not chosen:
        raise RowError(f"no row is on the {split!r} side of the split")
    return chosen


def request(row: Row, orderings: str, workload: str | None = None) -> dict[str, Any]:
    """The /decide body for a row under one ordering method (label and rationale stay here);
    `workload` is sent only when given (method `prior` selects its prior by it)."""
    body = {**{key: row[key] for key in REQUEST_KEYS}, "orderings": orderings}
    return body if workload is None else {**body, "workload": workload}
