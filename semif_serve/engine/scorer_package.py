"""Which installed package supplies the torch scorers, and which exact build it is.

The service adds nothing to the scoring, so /health must say precisely whose code
scored: a commit for SemIf installed from its repository, else an installed
version. The answer is read from the installed distribution, never guessed.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType


@dataclass(frozen=True)
class ScorerPackage:
    """The scorer modules of one installed package, and its provenance."""

    name: str
    direct: ModuleType
    shared: ModuleType
    provenance: str


@dataclass(frozen=True)
class _Source:
    distribution: str
    direct: str
    shared: str
    extra: str


_SOURCES: dict[str, _Source] = {
    "semif_phase1": _Source("semif-phase1", "semif_phase1.direct", "semif_phase1.shared", "semif"),
    "fastjev": _Source("fastjev", "fastjev._runtime.direct", "fastjev._runtime.shared", "fastjev"),
}


class ScorerPackageMissing(RuntimeError):
    """The scorer package settings name is not installed (startup refuses)."""


def resolve(name: str) -> ScorerPackage:
    """Import the direct and shared modules of package `name` and read its provenance."""
    source = _SOURCES.get(name)
    if source is None:
        raise ValueError(
            f"SEMIF_SCORER {name!r} is not a torch scorer package ({', '.join(_SOURCES)})"
        )
    hint = f"pip install '.[{source.extra}]'"
    try:
        dist = metadata.distribution(source.distribution)
        direct = importlib.import_module(source.direct)
        shared = importlib.import_module(source.shared)
    except metadata.PackageNotFoundError:
        raise ScorerPackageMissing(_missing(name, hint)) from None
    except ModuleNotFoundError as error:
        # Only the package itself missing is "not installed"; a broken dependency is its own error.
        if error.name is None or error.name.split(".")[0] != source.direct.split(".")[0]:
            raise
        raise ScorerPackageMissing(_missing(name, hint)) from None
    return ScorerPackage(name, direct, shared, provenance(dist))


def _missing(name: str, hint: str) -> str:
    return f"scorer package {name!r} is not installed; install it with: {hint}"


def provenance(dist: metadata.Distribution) -> str:
    """The VCS commit PEP 610 recorded at install time, else the installed version."""
    text = dist.read_text("direct_url.json")
    if text:
        commit = json.loads(text).get("vcs_info", {}).get("commit_id")
        if isinstance(commit, str) and commit:
            return commit
    return dist.version
