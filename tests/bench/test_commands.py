"""`python -m bench`: the registry lists every command, every listed command answers --help
(a real `python -m bench CMD --help` process each), and every command, bench path and test
path the docs name exists, so the docs cannot drift from the layout."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
# deploy/'s sources name paths in their comments.
DEPLOY = sorted(
    str(path.relative_to(ROOT))
    for path in (ROOT / "deploy").rglob("*")
    if path.suffix in {".py", ".sh", ".yaml", ".yml", ".json", ".template"}
)
GUIDES = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md"))
DOCS = [
    "README.md",
    *GUIDES,
    "TESTING.md",
    "contract.md",
    "bench/README.md",
    "bench/RESULTS.md",
    "bench/gpu/gpu_check.sh",
    ".ci/run",
    "pyproject.toml",
    *DEPLOY,
]  # pyproject: the mutation-testing selection names test files


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every command's --help, run side by side (each is a fresh interpreter importing its module)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(COMMANDS, pool.map(lambda name: bench(name, "--help"), COMMANDS)))


def test_no_arguments_lists_every_command_once_with_its_line() -> None:
    done = bench()
    assert done.returncode == 0 and done.stderr == ""
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
    for name, command in COMMANDS.items():
        assert f"{name}  " in done.stdout and command.summary in done.stdout


def test_an_unknown_command_prints_the_list_on_stderr_and_exits_2() -> None:
    done = bench("no-such-command", "--help")
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown command 'no-such-command'" in done.stderr
    assert all(f"  {name}" in done.stderr for name in COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_listed_command_answers_help(
    helps: dict[str, subprocess.CompletedProcess[str]], name: str
) -> None:
    done = helps[name]
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:") and "--help" in done.stdout


def named(pattern: str) -> set[str]:
    found: set[str] = set()
    for doc in DOCS:
        found |= set(re.findall(pattern, (ROOT / doc).read_text(encoding="utf-8")))
    return found


def test_every_command_the_docs_name_is_registered() -> None:
    commands = named(r"-m bench ([a-z][a-z-]*)")
    assert commands, "the docs name no `python -m bench` command: the pattern is wrong"
    assert commands - set(COMMANDS) == set()


def test_every_bench_and_test_path_the_docs_name_exists() -> None:
    paths = named(r"(?<![\w/.-])((?:bench|tests|deploy)/[\w./-]*\w)")
    outputs = {
        path for path in paths if path.startswith("bench/results")
    }  # what the commands write
    assert len(paths - outputs) > 20, "too few paths found: the pattern is wrong"
    assert sorted(path for path in paths - outputs if not (ROOT / path).exists()) == []
