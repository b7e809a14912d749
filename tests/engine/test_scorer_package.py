"""Which package scores, and its provenance for /health, read from what is installed."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest

from semif_serve.engine import scorer_package
from semif_serve.engine.scorer_package import ScorerPackageMissing, provenance, resolve

COMMIT = "23cf1f39fc9534fe81437200959b6dfc7106e45a"


def dist_info(root: Path, name: str, direct_url: dict | None = None) -> metadata.Distribution:
    """An installed distribution's metadata directory, as pip writes it."""
    path = root / f"{name}-0.1.0.dist-info"
    path.mkdir(parents=True)
    (path / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    if direct_url is not None:
        (path / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(path)


def test_fastjev_resolves_to_its_runtime_modules_and_installed_version() -> None:
    package = resolve("fastjev")
    assert package.direct.__name__ == "fastjev._runtime.direct"
    assert package.shared.__name__ == "fastjev._runtime.shared"
    assert package.provenance == metadata.version("fastjev")


def test_a_missing_semif_says_how_to_install_it() -> None:
    with pytest.raises(ScorerPackageMissing, match=r"pip install '\.\[semif\]'"):
        resolve("semif_phase1")


def test_a_name_that_is_no_torch_scorer_is_refused() -> None:
    with pytest.raises(ValueError, match="stub"):
        resolve("stub")


def test_provenance_is_the_vcs_commit_pip_recorded(tmp_path: Path) -> None:
    url = {
        "url": "https://github.com/TheoLeeCJ/SemIf",
        "vcs_info": {"vcs": "git", "commit_id": COMMIT},
    }
    assert provenance(dist_info(tmp_path, "semif_phase1", url)) == COMMIT


@pytest.mark.parametrize(
    "direct_url", [None, {"url": "file:///src/semif", "dir_info": {"editable": True}}]
)
def test_without_a_recorded_commit_provenance_is_the_version(
    tmp_path: Path, direct_url: dict | None
) -> None:
    assert provenance(dist_info(tmp_path, "semif_phase1", direct_url)) == "0.1.0"


def test_a_broken_dependency_is_not_reported_as_a_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "brokenscorer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "direct.py").write_text("import not_installed_dependency_xyz\n")
    (package / "shared.py").write_text("")
    dist_info(tmp_path, "brokenscorer")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(
        scorer_package._SOURCES,
        "brokenscorer",
        scorer_package._Source(
            "brokenscorer", "brokenscorer.direct", "brokenscorer.shared", "broken"
        ),
    )
    try:
        with pytest.raises(ModuleNotFoundError) as caught:
            resolve("brokenscorer")
    finally:
        sys.modules.pop("brokenscorer", None)
    assert caught.value.name == "not_installed_dependency_xyz"
