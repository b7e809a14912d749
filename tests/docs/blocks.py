"""The code blocks of README.md and docs/*.md, read as the docs test runs them.

Rule 1: every fenced block carries a label: the paragraph right before it opens with one
of `**Shell N, bash:**`, `**Shell N, python:**`, `**Output:**` (or `**Output** (...)`) or
`**Not run here:** <reason>` (TESTING.md, "The docs test"). A block without one is an error,
so a new example cannot slip past the test unlabelled.
Rule 2: this module reads and compares; it starts nothing. Running blocks is the test's.

Theory: a document is a list of `Block`s in reading order. An `Output` block is what the
run block before it prints; `compare` checks it the way a reader would: JSON by the keys
it shows (a key left out is not compared), every number within half a unit of its last
printed digit (and the CPU's float noise), and text word by word.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\S*)\s*$")
LABEL = re.compile(
    r"^\*\*(?:Shell (?P<shell>\d+), (?P<language>bash|python)|(?P<kind>Output|Not run here))"
    r":?\*\*:?(?P<rest>.*)",
    re.S,
)


@dataclass(frozen=True)
class Block:
    """One fenced block and its label."""

    doc: str  # path relative to the repository root
    line: int  # the fence's line, 1-based
    kind: str  # "run", "output" or "not run"
    text: str
    shell: int | None = None
    language: str | None = None  # "bash" or "python" for a run block
    reason: str = ""  # a not-run block's reason

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def documents() -> list[str]:
    """README.md, then each guide in the order the README's table of guides lists it, then any other."""
    rows = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("|")
    ]
    linked = list(dict.fromkeys(re.findall(r"\]\((docs/[\w-]+\.md)\)", "\n".join(rows))))
    others = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))
    return ["README.md", *linked, *(doc for doc in others if doc not in linked)]


def label_of(lines: list[str], fence: int) -> str:
    """The paragraph right before line `fence` (0-based; blank lines between are skipped), joined."""
    end = fence
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    start = end
    while start > 0 and lines[start - 1].strip() and not lines[start - 1].startswith("```"):
        start -= 1
    return " ".join(line.strip() for line in lines[start:end])


def parse(doc: str) -> list[Block]:
    """Every fenced block of one document; ValueError naming the line of one without a label."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        if not FENCE.match(lines[index]):
            index += 1
            continue
        end = next((i for i in range(index + 1, len(lines)) if lines[i].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{doc}:{index + 1}: a code block is never closed")
        text = "\n".join(lines[index + 1 : end]) + "\n"
        blocks.append(_labelled(doc, index + 1, label_of(lines, index), text))
        index = end + 1
    return blocks


def _labelled(doc: str, line: int, label: str, text: str) -> Block:
    found = LABEL.match(label)
    if found is None:
        raise ValueError(
            f"{doc}:{line}: the paragraph before this block must open with **Shell N, bash:**, "
            f"**Shell N, python:**, **Output:** or **Not run here:** <reason>; it reads {label[:80]!r}"
        )
    if found["shell"]:
        return Block(doc, line, "run", text, shell=int(found["shell"]), language=found["language"])
    if found["kind"] == "Output":
        return Block(doc, line, "output", text)
    reason = found["rest"].strip()
    if len(reason) < 10:
        raise ValueError(f"{doc}:{line}: **Not run here:** must say why, in the same paragraph")
    return Block(doc, line, "not run", text, reason=reason)


# -- comparing a printed response with what came back ---------------------------------------------


class Printed(str):
    """A number as the docs print it: its text keeps the digits shown."""


def _values(text: str, printed: bool) -> list[Any] | None:
    """The JSON values in `text`, one after another; None when it is not JSON."""
    decoder = (
        json.JSONDecoder(parse_float=Printed, parse_int=Printed) if printed else json.JSONDecoder()
    )
    values, position, text = [], 0, text.strip()
    while position < len(text):
        try:
            value, position = decoder.raw_decode(text, position)
        except ValueError:
            return None
        values.append(value)
        while position < len(text) and text[position].isspace():
            position += 1
    return values or None


# How far the same model's number may move between CPUs: float kernels (the order of a sum, fused
# multiply-adds, AMX against AVX-512) differ in their last bits, and a value that sits on a rounding
# boundary then rounds either way (0.26204981935424454 on one CPU, printed 0.2621 from another).
# 1e-5 of the value is about 100 times float32's epsilon and a small part of any digit printed.
FLOAT_NOISE = 1e-5


def _number_matches(printed: str, actual: float) -> bool:
    """Within half a unit of the last digit printed, plus FLOAT_NOISE of the value: 0.954 stands
    for 0.9535..0.9545 (and a hair beyond, so a value on the boundary holds on any CPU); 93 for
    93 alone."""
    if re.fullmatch(r"-?\d+", printed):
        return float(printed) == actual
    mantissa, _, exponent = printed.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    half_unit = 0.5 * 10.0 ** (int(exponent or 0) - decimals)
    return abs(float(printed) - actual) <= half_unit + FLOAT_NOISE * abs(actual)


def _differences(printed: Any, actual: Any, path: str) -> list[str]:
    if isinstance(printed, Printed):
        if isinstance(actual, bool) or not isinstance(actual, (int, float)):
            return [f"{path}: printed {printed}, got {actual!r}"]
        return (
            []
            if _number_matches(printed, actual)
            else [f"{path}: printed {printed}, got {actual!r}"]
        )
    if isinstance(printed, dict):
        if not isinstance(actual, dict):
            return [f"{path}: printed an object, got {actual!r}"]
        missing = [
            f"{path}.{key}: printed, but not in the answer" for key in printed if key not in actual
        ]
        return missing + [
            d
            for key in printed
            if key in actual
            for d in _differences(printed[key], actual[key], f"{path}.{key}")
        ]
    if isinstance(printed, list):
        if not isinstance(actual, list) or len(actual) != len(printed):
            return [f"{path}: printed {len(printed)} items, got {actual!r}"]
        return [
            d
            for i, (p, a) in enumerate(zip(printed, actual))
            for d in _differences(p, a, f"{path}[{i}]")
        ]
    return [] if printed == actual else [f"{path}: printed {printed!r}, got {actual!r}"]


def _word_differences(printed: str, actual: str) -> list[str]:
    expected, got = printed.split(), actual.split()
    if len(expected) != len(got):
        return [f"printed {len(expected)} words, got {len(got)}: {actual!r}"]
    number = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?$")
    wrong = []
    for index, (p, a) in enumerate(zip(expected, got)):
        same = _number_matches(p, float(a)) if number.match(p) and number.match(a) else p == a
        if not same:
            wrong.append(f"word {index + 1}: printed {p!r}, got {a!r}")
    return wrong


def compare(printed: str, actual: str) -> list[str]:
    """What differs between a printed output and the real one ([] when it matches)."""
    shown = _values(printed, printed=True)
    if shown is None:
        return _word_differences(printed, actual)
    got = _values(actual, printed=False)
    if got is None or len(got) != len(shown):
        return [f"printed {len(shown)} JSON value(s), got {actual.strip()[:300]!r}"]
    return [
        d for index, (p, a) in enumerate(zip(shown, got)) for d in _differences(p, a, f"[{index}]")
    ]
