"""`bench evaluate --journal FILE.jsonl`: every answered row appended as it completes, so a run resumes.

Rules a newcomer could break:
1. The first line is the run's header (the server's model, revision and prompt version, and the
   scoring options); every later line is one row whose methods were all answered. A row is
   written only once all its requests came back, so a run killed halfway loses at most the rows
   in flight, never half a row.
2. Resuming with another server or other options would mix rows that are not comparable: a
   header that differs from the run's own is refused, naming the first key that differs.
3. A journal reads back as a saved run (`--results FILE.jsonl`), so a partial run can be
   reported at any time without a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADER_KEY = "journal"
HEALTH_KEYS = ("model", "revision", "prompt_version", "dtype")
OPTION_KEYS = ("methods", "derived", "workload", "all_max_options", "split", "data")


class JournalError(ValueError):
    """A journal that belongs to another run, or that cannot be read."""


def header(health: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    return {
        HEADER_KEY: "evaluate",
        "health": {key: health.get(key) for key in HEALTH_KEYS},
        **{key: options.get(key) for key in OPTION_KEYS},
    }


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the rows of an existing journal."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        items = [json.loads(line) for line in lines]
    except ValueError as error:
        raise JournalError(f"{path}: not JSON lines ({error})") from None
    if not items or items[0].get(HEADER_KEY) != "evaluate":
        raise JournalError(f"{path}: not an evaluate journal (no header line)")
    return items[0], items[1:]


def resume(path: Path, wanted: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rows already answered (by id), after checking the journal is this run's; creates it when absent."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
        return {}
    found, rows = read(path)
    for key in ("health", *OPTION_KEYS):
        if found.get(key) != wanted.get(key):
            raise JournalError(
                f"{path} was written by another run: {key} {found.get(key)!r}, this run {wanted.get(key)!r}"
            )
    return {row["id"]: row for row in rows}


def append(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        handle.flush()


def as_run(path: Path) -> dict[str, Any]:
    """A journal in the shape of a saved run (`evaluate --out`); a method a row lacks counts as skipped."""
    found, rows = read(path)
    return {
        "health": found["health"],
        **{key: found.get(key) for key in OPTION_KEYS},
        "rows": rows,
        "skipped": {
            method: [row["id"] for row in rows if method not in row["methods"]]
            for method in found["methods"]
        },
    }
