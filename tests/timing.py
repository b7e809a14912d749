"""Results without their wall-clock fields (every key ending in `_seconds`: forward_seconds,
total_seconds, suffix_forward_seconds), which differ between two runs of the same request,
so a served answer can be compared whole with a client's, a peer's or SemIf's own.
"""

from __future__ import annotations

from typing import Any


def timeless(value: Any) -> Any:
    """The JSON value without wall-clock fields, at any depth."""
    if isinstance(value, dict):
        return {key: timeless(item) for key, item in value.items() if not key.endswith("_seconds")}
    if isinstance(value, list):
        return [timeless(item) for item in value]
    return value
