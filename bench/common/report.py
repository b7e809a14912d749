"""How every tool reports: a short table and a verdict on stdout, JSON with --out, exit status.

One renderer for tables (markdown pipes, readable in a terminal and in
RESULTS.md) and one outcome shape, so every check's JSON reads the same.
Progress goes to stderr, so stdout stays the table and the verdict.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Outcome:
    """One check's result: pass/fail, why, the criterion applied and the figures behind it."""

    check: str
    passed: bool
    verdict: str
    criterion: str
    figures: dict[str, Any] = field(default_factory=dict)
    table: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "passed": self.passed,
            "verdict": self.verdict,
            "criterion": self.criterion,
            "figures": self.figures,
            "when": now(),
            "machine": machine(),
        }


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


THREAD_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTHON_GIL")


def machine() -> dict[str, Any]:
    """Where a figure was measured: `uname -m`, CPU count, Python, the date, the load average
    when measuring began (the machine is shared) and the thread settings in the environment."""
    return {
        "uname_m": platform.machine(),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.system(),
        "date": datetime.date.today().isoformat(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "threads": {name: os.environ.get(name, "unset") for name in THREAD_SETTINGS},
    }


def section_marks(name: str) -> tuple[str, str]:
    return f"<!-- {name}: begin -->", f"<!-- {name}: end -->"


def splice(text: str, name: str, body: str) -> str:
    """`text` with the marked section `name` replaced by `body` (appended when absent)."""
    begin, end = section_marks(name)
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + block + rest.split(end, 1)[1].lstrip("\n")
    return text.rstrip("\n") + "\n\n" + block


def section(text: str, name: str) -> str | None:
    """The body of the marked section `name` in `text`, if there is one."""
    begin, end = section_marks(name)
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A pipe table; numbers are already formatted by the caller."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def fmt(value: float, digits: int = 4) -> str:
    """A float for a table: fixed digits, scientific when tiny, '-' when undefined."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value != 0 and abs(value) < 10**-digits:
        return f"{value:.2e}"
    return f"{value:.{digits}f}"


def write_json(path: Path, payload: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def emit(outcome: Outcome, out: Path | None) -> int:
    """Print the table and the verdict, write the JSON, return the exit status."""
    print(markdown_table(("figure", "value"), outcome.table))
    print(f"{'PASS' if outcome.passed else 'FAIL'} {outcome.check}: {outcome.verdict}")
    if out is not None:
        write_json(out, outcome.to_json())
    return 0 if outcome.passed else 1


class Progress:
    """`label: done/total` on stderr, at most once a second and once at the end if it took a while."""

    def __init__(self, label: str, total: int, every: float = 1.0) -> None:
        self.label, self.total, self.every = label, total, every
        self.done = 0
        self.started = self.last = time.monotonic()

    def tick(self, count: int = 1) -> None:
        self.done += count
        now_ = time.monotonic()
        finished = self.done >= self.total
        if now_ - self.last >= self.every or (finished and now_ - self.started >= self.every):
            self.last = now_
            print(
                f"{self.label}: {self.done}/{self.total} ({now_ - self.started:.1f} s)",
                file=sys.stderr,
                flush=True,
            )


def note(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)
