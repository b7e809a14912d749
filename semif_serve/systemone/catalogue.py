"""The body of `GET /v1/models`: the served model id and each alias `model` may name.

What the API promises: `{models: [{name, description, release_date}]}`, the date as
YYYY-MM-DD. We know no release date for the served weights, so every entry carries
RELEASE_DATE, the date of the API reference this layer follows: stable from run to
run, never today's. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

RELEASE_DATE = "2026-09-22"  # the TypeSafe API reference SemIf's mapping follows (JEV_API_COMPAT.md 1)


def listing(served: str, aliases: Sequence[str]) -> dict[str, Any]:
    """The served id first, then each alias, named as the alias of what it serves."""
    models = [{"name": served, "description": "semif-serve: SemIf option-letter readout (text only; not TypeSafe's Jev)",
               "release_date": RELEASE_DATE}]
    models += [{"name": alias, "description": f"alias of {served}", "release_date": RELEASE_DATE}
               for alias in aliases if alias != served]
    return {"models": models}
