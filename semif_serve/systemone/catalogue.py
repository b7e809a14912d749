"""The model names of the System One routes: the id that names the loaded weights, and `GET /v1/models`.

What the API promises: `{models: [{name, description, release_date}]}`, the date as
YYYY-MM-DD. We know no release date for the served weights, so every entry carries
RELEASE_DATE, the date of the API reference this layer follows: stable from run to
run, never today's.

The served id is SemIf's server's form, `semif/<name>@<revision[:12]>+<backend>-<dtype>`
(SemIf's `runtime.model_id`), built from the facts the scorer reports about the
snapshot it loaded, so every logged answer says which weights produced it. It is
used on the System One routes only: /health and the calibration binding keep
SEMIF_MODEL as it is, so no bound file breaks. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

RELEASE_DATE = (
    "2026-09-22"  # the TypeSafe API reference SemIf's mapping follows (JEV_API_COMPAT.md 1)
)
# The stub loads no weights: its id has the form, with no revision and no dtype to name.
STUB_ID = "semif/stub@000000000000+stub-none"


def backend(facts: Mapping[str, Any]) -> str:
    """SemIf's `backend` for the scorer that reported `facts`: `stub` for the stub, else `torch`
    (both scorer packages run SemIf's torch scorers)."""
    return "stub" if facts["scorer"] == "stub" else "torch"


def model_id(facts: Mapping[str, Any]) -> str:
    """The System One id of the snapshot `facts` describe: its name (the last part of SEMIF_MODEL,
    a hub id or a local directory), the revision's first 12 characters, the backend and the dtype."""
    if backend(facts) == "stub":
        return STUB_ID
    name = str(facts["model"]).rstrip("/").rsplit("/", 1)[-1]
    return f"semif/{name}@{str(facts['revision'])[:12]}+torch-{facts['dtype']}"


def listing(served: str, aliases: Sequence[str]) -> dict[str, Any]:
    """The served id first, then each alias once, in order, named as the alias of what it serves."""
    models = [
        {
            "name": served,
            "description": "semif-serve: SemIf option-letter readout (text only; not TypeSafe's Jev)",
            "release_date": RELEASE_DATE,
        }
    ]
    models += [
        {"name": alias, "description": f"alias of {served}", "release_date": RELEASE_DATE}
        for alias in dict.fromkeys(aliases)
        if alias != served
    ]
    return {"models": models}
