"""The bench's own rows (bench/data, written for it) and the requests built from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"
ROWS = DATA / "rows.jsonl"
SPEED21 = DATA / "speed21.json"
BOUNDARY = DATA / "boundary.json"

Row = dict[str, Any]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object per nonblank line."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for item in items:
            handle.write(json.dumps(item, ensure_ascii=False) + "\n")


def rows(path: Path = ROWS) -> list[Row]:
    """SemIf rows with unique ids (the parity key)."""
    loaded = read_jsonl(path)
    ids = [row["id"] for row in loaded]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: row ids must be unique")
    return loaded


def first_with(count: int) -> Row:
    """The first bench row with `count` options."""
    return next(row for row in rows() if len(row["options"]) == count)


def load_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def state_key(state: Any) -> str:
    """Canonical text of a state, so equal states group together."""
    return json.dumps(state, sort_keys=True, ensure_ascii=False)


def by_state(items: list[Row]) -> list[list[Row]]:
    """Rows grouped by exact state, in first-seen order (one /decide/shared per group)."""
    groups: dict[str, list[Row]] = {}
    for row in items:
        groups.setdefault(state_key(row["state"]), []).append(row)
    return list(groups.values())


def shared_body(state: Any, decisions: list[Row]) -> dict[str, Any]:
    """A /decide/shared body: the decisions' id, question and options over one state."""
    keep = ("id", "question", "options", "orderings")
    return {"state": state, "decisions": [{k: d[k] for k in keep if k in d} for d in decisions]}


def with_state(state: Any, decisions: list[Row]) -> list[Row]:
    """Full rows: each decision with the shared state added (as the server builds them)."""
    return [
        {"id": d["id"], "state": state, "question": d["question"], "options": d["options"]}
        for d in decisions
    ]


def shift_descriptions(row: Row) -> Row:
    """The negative control's shuffle: option k gets option k+1's description.

    Ids and positions stay put; a cyclic shift is a derangement, so every id is
    paired with another option's description (rows have distinct descriptions).
    """
    descriptions = [option["description"] for option in row["options"]]
    count = len(descriptions)
    options = [
        {"id": option["id"], "description": descriptions[(k + 1) % count]}
        for k, option in enumerate(row["options"])
    ]
    return {**row, "options": options}


def rotate(row: Row, shift: int) -> Row:
    """The row with its options cyclically shifted by `shift` (what `rotations` sends)."""
    options = row["options"][shift:] + row["options"][:shift]
    return {**row, "id": f"{row['id']}#o{shift}", "options": options}
