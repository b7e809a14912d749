"""The Containerfile's build arguments: defaults are the production build, and every
`--build-arg` the container check and docs/operating.md pass is one the file declares (podman
only warns about an undeclared one and builds the defaults)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = (ROOT / "Containerfile").read_text()


def declared() -> dict[str, str | None]:
    """Each ARG and its default (the first one declared wins, as for a global ARG)."""
    found: dict[str, str | None] = {}
    for name, _, default in re.findall(r"^ARG (\w+)(=(.*))?$", CONTAINERFILE, re.MULTILINE):
        found.setdefault(name, default.strip('"') if _ else None)
    return found


def passed(text: str) -> set[str]:
    return set(re.findall(r"--build-arg (\w+)=", text))


def test_defaults_are_the_production_build() -> None:
    args = declared()
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert args["BASE_IMAGE"] == "python:3.11-slim"
    assert args["TORCH_VERSION"] == "2.10.0+cu128"
    assert args["TORCH_INDEX"] == "https://download.pytorch.org/whl/cu128"
    assert (args["SCORER"], args["SCORER_EXTRA"]) == ("semif_phase1", "semif")
    assert "SemIf@23cf1f3" in pins["semif"][0]
    assert args["PIP_CERT"] == ""


def test_the_check_and_the_operating_guide_pass_only_declared_arguments() -> None:
    check = passed((ROOT / "deploy" / "container" / "check.sh").read_text().replace("\\\n", " "))
    guide = passed((ROOT / "docs" / "operating.md").read_text())
    assert check == {
        "BASE_IMAGE",
        "TORCH_VERSION",
        "TORCH_INDEX",
        "SCORER",
        "SCORER_EXTRA",
        "PIP_CERT",
    }
    assert guide == check
    assert check <= set(declared())


def test_the_cpu_torch_is_the_test_extras_release() -> None:
    """The check's TORCH_VERSION is the `cpu` extra's torch, in its CPU build."""
    (version,) = re.findall(
        r"^TORCH_VERSION=(\S+)",
        (ROOT / "deploy" / "container" / "check.sh").read_text(),
        re.MULTILINE,
    )
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert pins["cpu"] == [f"torch=={version.removesuffix('+cpu')}"] and version.endswith("+cpu")
