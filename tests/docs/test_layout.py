"""tests/ mirrors the package (TESTING.md, "Layout"), and what names a test moves with it.

- A folder per layer of semif_serve, named as the layer is: the layers are the ones pyproject's
  import-linter contract lists, so a new layer without tests, or a test folder named after no layer
  (`wire` for `http`), fails here. `__main__` is the entry point's, tested in tests/cli. Besides the
  layers, only the cross-cutting folders, which test no one layer.
- TESTING.md's layout table has a row for each folder and none for a folder that is gone.
- No two helper modules under tests/ share a file name, with each other or with a module of
  semif_serve, bench or deploy: a name that says two things sends a reader, or an import, to the
  wrong file.
- Every path under tests/ that the docs, contract.md, TESTING.md, pyproject.toml (the mutation
  selection) and .ci/run name exists, so a test that moves takes its mentions along.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
CROSS_CUTTING = {"real_models", "bench", "deploy", "docs"}
NOT_HELPERS = {"__init__.py", "conftest.py"}


def layers() -> set[str]:
    """The names of semif_serve's layers, as the layers contract lists them."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c
        for c in pyproject["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c["containers"] == ["semif_serve"]
    ]
    names = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    return names - {"__main__"}  # `python -m semif_serve`, tested in tests/cli


def folders() -> set[str]:
    return {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.rglob("test_*.py"))}


def modules(folder: Path) -> Iterator[Path]:
    return (p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_layers_read_are_the_package_s_own() -> None:
    top = {
        p.stem
        for p in (ROOT / "semif_serve").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert layers() == top - {"__init__", "__main__"}


def test_every_layer_of_the_package_has_a_test_folder_of_its_name() -> None:
    assert sorted(layers() - folders()) == []


def test_every_test_folder_is_a_layer_or_cross_cutting() -> None:
    assert sorted(folders() - layers() - CROSS_CUTTING) == []
    assert sorted(CROSS_CUTTING - folders()) == []


def test_testing_md_lists_every_test_folder_and_no_other() -> None:
    text = (ROOT / "TESTING.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `tests/(\w+)/` \|", text, re.MULTILINE))
    assert sorted(rows ^ folders()) == []


def helpers() -> list[str]:
    """The file names of the modules under tests/ that are neither tests nor packages' or pytest's own."""
    return [
        p.name
        for p in modules(TESTS)
        if not p.name.startswith("test_") and p.name not in NOT_HELPERS
    ]


def test_no_two_helper_modules_share_a_file_name() -> None:
    assert sorted(name for name, n in Counter(helpers()).items() if n > 1) == []


def test_no_helper_module_shares_its_file_name_with_a_module_of_the_product() -> None:
    product = {
        p.name for folder in ("semif_serve", "bench", "deploy") for p in modules(ROOT / folder)
    }
    assert sorted(set(helpers()) & product) == []


def named_paths() -> Iterator[tuple[str, str]]:
    docs = [
        ROOT / n for n in ("README.md", "contract.md", "TESTING.md", "pyproject.toml", ".ci/run")
    ]
    docs += sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "bench").glob("*.md"))
    for doc in docs:
        for path in re.findall(r"(?<![\w/.-])tests/[\w/.]*\w", doc.read_text(encoding="utf-8")):
            yield doc.name, path


def test_every_test_path_the_docs_name_exists() -> None:
    named = list(named_paths())
    assert len(named) > 100  # the pattern finds them: TESTING.md alone names well over a hundred
    assert sorted({f"{doc}: {path}" for doc, path in named if not (ROOT / path).exists()}) == []
