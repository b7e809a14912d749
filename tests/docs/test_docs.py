"""README.md and docs/*.md, run as written: every labelled block in reading order, in the shell
its label names, against the server the doc itself starts (the tiny model, or SmolLM2 where
the suite builds it), each printed output compared with what came back; every module, flag,
link and anchor the docs name exists; the README's test command is the one .ci/run runs.

The convention the blocks follow, and what this test rewrites to run them here, is in
TESTING.md ("The docs test").
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.common import prometheus
from bench.scale import edge
from semif_serve import config
from tests.docs import blocks
from tests.docs.shells import (
    ROOT,
    DocsError,
    Installs,
    NotInstalledHere,
    Rewrites,
    Servers,
    Shell,
    environment,
    modules_used,
    without_installs,
)

DOCS = blocks.documents()
# System programs CI installs (.ci/run): without one, its blocks are left out (a skip; under CI=true a failure).
PROGRAMS: dict[str, Callable[[], str | None]] = {
    "nginx": edge.nginx_binary,
    "promtool": lambda: prometheus.binary("promtool"),
    "prometheus": lambda: prometheus.binary("prometheus"),
}


def joined(text: str) -> str:
    """A block with its backslash-continued lines joined."""
    return text.replace("\\\n", " ")


@pytest.fixture(scope="module")
def servers() -> Servers:
    current = Servers()
    yield current
    current.stop()


# -- what is checked without running anything -------------------------------------------------------


def test_every_block_is_labelled_and_the_readme_links_every_guide() -> None:
    parsed = {doc: blocks.parse(doc) for doc in DOCS}  # ValueError names an unlabelled block
    assert sum(len(found) for found in parsed.values()) > 30, (
        "too few blocks: the fence pattern is wrong"
    )
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [doc for doc in DOCS[1:] if f"]({doc})" not in readme] == []
    for _doc, found in parsed.items():
        for before, block in zip([None, *found], found):
            if block.kind == "output":
                assert before is not None and before.kind == "run", (
                    f"{block.where}: an Output must follow a run block"
                )
            if block.kind == "run":
                assert block.shell != 1 or block.language == "bash", (
                    f"{block.where}: shell 1 serves; it runs bash"
                )


def test_a_block_without_a_label_or_a_reason_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blocks, "ROOT", tmp_path)
    cases = {
        "no label": "Some text:\n\n```bash\nls\n```\n",
        "a bare reason": "**Not run here:** no.\n```bash\nls\n```\n",
        "open": "**Shell 2, bash:**\n```bash\nls\n",
    }
    for _name, text in cases.items():
        (tmp_path / "doc.md").write_text(text)
        with pytest.raises(ValueError, match="doc.md:"):
            blocks.parse("doc.md")
    (tmp_path / "doc.md").write_text(
        "**Shell 2, python:** run it.\n```python\nprint(1)\n```\n\n"
        "**Output** (one number):\n```text\n1\n```\n"
    )
    assert [(b.kind, b.shell, b.language) for b in blocks.parse("doc.md")] == [
        ("run", 2, "python"),
        ("output", None, None),
    ]


def test_printed_numbers_are_compared_to_their_digits() -> None:
    assert (
        blocks.compare(
            '{"p": [0.954, 0.046], "id": "t1"}', '{"id": "t1", "p": [0.95436, 0.04564], "x": 1}'
        )
        == []
    )
    assert (
        blocks.compare('{"p": [0.954]}', '{"p": [0.9536]}') == []
        and blocks.compare('{"p": [0.954]}', '{"p": [0.9544]}') == []
    )
    assert (
        blocks.compare('{"p": [0.954]}', '{"p": [0.9534]}') != []
        and blocks.compare('{"p": [0.954]}', '{"p": [0.9546]}') != []
    )
    assert blocks.compare('{"p": 4096}', '{"p": 4096.4}') != []  # an integer is printed whole
    assert (
        blocks.compare('{"missing": 1}', '{"other": 1}') != []
        and blocks.compare('{"n": 93}', '{"n": 94}') != []
    )
    assert (
        blocks.compare("yes 0.9544 -", "yes   0.95436  -\n") == []
        and blocks.compare("yes 0.9544", "no 0.9544") != []
    )


def test_a_number_on_a_rounding_boundary_matches_on_any_cpu() -> None:
    """docs/models.md printed 0.2621 where another CPU's float kernels returned a value just
    under the boundary (it rounds to 0.2620): within half a unit plus the float noise, it holds;
    a number off by a printed digit does not."""
    returned = '{"p": [0.26204981935424454]}'
    assert blocks.compare('{"p": [0.2621]}', returned) == []
    assert blocks.compare('{"p": [0.2620]}', returned) == []
    assert blocks.compare("p 0.2621", "p 0.26204981935424454") == []
    assert blocks.compare('{"p": [0.2622]}', returned) != []
    assert blocks.compare('{"p": [0.2623]}', returned) != []
    assert blocks.compare('{"p": [0.2619]}', returned) != []
    # Past the boundary by more than the float noise (1e-5 beyond it, the noise 2.6e-6): different.
    assert blocks.compare('{"p": [0.2621]}', '{"p": [0.26204]}') != []
    # All the digits printed: only the float noise is left to tolerate.
    assert blocks.compare('{"p": [0.26204981935424454]}', '{"p": [0.262049821]}') == []
    assert blocks.compare('{"p": [0.26204981935424454]}', '{"p": [0.2621]}') != []
    # Exactly on the boundary, either side: 0.954 stands for 0.9535 and 0.9545 alike.
    assert blocks.compare('{"p": [0.954]}', '{"p": [0.9535]}') == []
    assert blocks.compare('{"p": [0.954]}', '{"p": [0.9545]}') == []
    assert blocks.compare('{"p": [1.5e-3]}', '{"p": [0.00155]}') == []
    assert blocks.compare('{"p": [1.5e-3]}', '{"p": [0.00156]}') != []


def links(doc: str) -> list[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", (ROOT / doc).read_text(encoding="utf-8"), flags=re.S)
    return [(doc, target) for target in re.findall(r"\]\(([^)\s]+)\)", text)]


@functools.cache
def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.*)$", text, re.M)
    }


def test_every_link_and_anchor_resolves_inside_the_repository() -> None:
    found = [
        link
        for doc in [*DOCS, "contract.md", "TESTING.md", "bench/README.md"]
        for link in links(doc)
    ]
    assert len(found) > 30, "too few links: the pattern is wrong"
    broken = []
    for doc, target in found:
        if re.match(r"https?://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = ((ROOT / doc).parent / path).resolve() if path else (ROOT / doc)
        if ROOT not in resolved.parents and resolved != ROOT or not resolved.exists():
            broken.append(f"{doc}: {target} (no such file in the repository)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{doc}: {target} (no such heading)")
    assert broken == []


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    (suite,) = [block for block in blocks.parse("README.md") if "-m pytest" in block.text]
    command = suite.text.strip()
    assert suite.kind == "not run" and "\n" not in command
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_settings_table_names_every_variable_config_reads() -> None:
    guide = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    section = guide.split("## Settings\n", 1)[1].split("\n## ", 1)[0]
    table = {
        name
        for line in section.splitlines()
        if line.startswith("| `SEMIF_")
        for name in re.findall(r"`(SEMIF_[A-Z_]+)`", line.split("|")[1])
    }
    read = config.variables()
    assert len(read) > 20 and table == read


@functools.cache
def help_text(program: tuple[str, ...]) -> str | None:
    """`program --help`'s output, or None when it is not a command that answers --help."""
    done = subprocess.run(
        [*program, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    return done.stdout if done.returncode == 0 and "usage" in done.stdout.lower() else None


def commands(text: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """(program, arguments) for each `python -m MODULE` and `semif-serve SUB` in a block."""
    found = []
    for module, arguments in re.findall(r"python3? -m ([\w.]+)([^\n|;&>)]*)", text):
        found.append(((sys.executable, "-m", module), arguments.split()))
    for arguments in re.findall(
        r"(?<![\w/-])(?:\.venv/bin/)?semif-serve(?![\w-])([^\n|;&>)]*)", text
    ):
        found.append(((sys.executable, "-m", "semif_serve"), arguments.split()))
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_every_module_and_flag_a_block_names_exists(doc: str) -> None:
    """Run or not, a block's `python -m` modules exist and answer --help listing every flag it passes."""
    checked = 0
    for block in blocks.parse(doc):
        if block.kind == "output" or block.language == "python":
            continue
        for program, arguments in commands(joined(block.text)):
            if program[-1] != "semif_serve":
                assert importlib.util.find_spec(program[-1]) is not None, (
                    f"{block.where}: no module {program[-1]}"
                )
            sub = (
                (arguments[0],) if arguments and re.fullmatch(r"[a-z][\w-]*", arguments[0]) else ()
            )
            text = help_text(program + sub) if sub else None
            text = text or help_text(program)
            flags = [argument.split("=")[0] for argument in arguments if argument.startswith("--")]
            if flags:
                assert text is not None, (
                    f"{block.where}: {' '.join(program[1:] + sub)} --help failed"
                )
                for flag in flags:
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (
                        f"{block.where}: no flag {flag}"
                    )
                    checked += 1
    if doc in ("docs/operating.md", "docs/acceptance.md", "docs/models.md"):
        assert checked > 3, "too few flags checked: the command pattern is wrong"


# -- running the docs ----------------------------------------------------------------------------


def earlier_installs(doc: str) -> Installs:
    """What the run blocks of the docs before this one installed (README first, as a reader goes)."""
    installs = Installs()
    for earlier in DOCS[: DOCS.index(doc)]:
        for block in blocks.parse(earlier):
            if block.kind == "run" and block.language == "bash":
                try:
                    without_installs(block.text, installs, block.where)
                except NotInstalledHere:
                    pass  # recorded all the same; the doc that installs it says so when it runs
    return installs


def missing_programs(text: str) -> tuple[list[str], list[str]]:
    """(programs this block runs that are not installed, directories of those that are)."""
    missing, found = [], []
    for name in set(re.findall(r"(?:^|[;&|]\s*)(nginx|promtool|prometheus)\b", text, re.M)):
        binary = PROGRAMS[name]()
        if binary is None:
            missing.append(name)
        else:
            found.append(os.path.dirname(binary))
    return missing, found


@pytest.mark.parametrize("doc", DOCS)
def test_the_doc_runs_as_written(
    doc: str, servers: Servers, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    found = blocks.parse(doc)
    runs = [block for block in found if block.kind == "run"]
    if not runs:
        pytest.skip(f"{doc} has no block to run")
    if any("small-model" in block.text for block in runs):
        request.getfixturevalue("smollm2_build")  # skips without the wheel; fails under CI=true
    programs = {directory for block in runs for directory in missing_programs(block.text)[1]}
    left_out: list[str] = []
    env = environment(tmp_path / "home", sorted(programs))
    rewrites, installs = Rewrites(tmp_path, servers.port), earlier_installs(doc)
    (tmp_path / "etc" / "nginx").mkdir(parents=True)  # the nginx package makes it
    shells: dict[int, Shell] = {}
    printed: str | None = None
    try:
        for block in found:
            if block.kind == "not run":
                printed = None
            elif block.kind == "output":
                if printed is not None:
                    assert blocks.compare(block.text, printed) == [], (
                        f"{block.where}: {blocks.compare(block.text, printed)}"
                    )
            else:
                printed = None
                absent = missing_programs(block.text)[0]
                if absent:
                    left_out.append(f"{block.where} ({', '.join(absent)} not installed)")
                    continue
                try:
                    text = without_installs(block.text, installs, block.where)
                except NotInstalledHere as missing:
                    if os.environ.get("CI") == "true":
                        raise
                    left_out.append(str(missing))
                    break
                for module in modules_used(block.text, block.language or "bash"):
                    installs.check_import(module, block.where)
                if block.shell == 1:
                    servers.start(block.text, rewrites.apply(text), env, rewrites, block.where)
                    continue
                if block.shell not in shells:
                    (tmp_path / f"shell{block.shell}").mkdir()
                    shells[block.shell] = Shell(env, tmp_path / f"shell{block.shell}")
                printed = shells[block.shell].run(
                    rewrites.apply(text), block.language or "bash", block.where
                )
    finally:
        for shell in shells.values():
            shell.close()
    if left_out:
        message = f"{doc}: ran the rest; left out {', '.join(left_out)}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def test_a_missing_export_fails_the_run(tmp_path: Path) -> None:
    """The test's own guard: a shell starts without the token, so a doc that never exports it fails."""
    env = environment(tmp_path, [])
    assert "SEMIF_API_TOKEN" not in env and str(ROOT / ".venv" / "bin") not in env["PATH"].split(
        os.pathsep
    )
    shell = Shell(env, tmp_path)
    try:
        with pytest.raises(DocsError, match="exited"):
            shell.run('test -n "$SEMIF_API_TOKEN"\n', "bash", "doc.md:1")
    finally:
        shell.close()
    assert shutil.which("semif-serve", path=env["PATH"]) is None
