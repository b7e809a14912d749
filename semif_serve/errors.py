"""Errors are data: one table of codes, one renderer of the envelope.

Every refusal the service can give is a row here, so the HTTP status, the code
and the envelope can never drift apart between call sites.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# code -> HTTP status; the contract's table plus the routing and protocol codes.
STATUS: dict[str, int] = {
    "bad_request": 400,
    "unauthorized": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "request_timeout": 408,
    "request_too_large": 413,
    "invalid_request": 422,
    "busy": 429,
    "headers_too_large": 431,
    "scoring_failed": 500,
    "too_many_connections": 503,
    "out_of_memory": 503,
    "shutting_down": 503,
}


@dataclass(frozen=True)
class ApiError(Exception):
    """A refusal with a code from STATUS and a message safe to show the caller."""

    code: str
    message: str
    headers: tuple[tuple[bytes, bytes], ...] = ()

    def __post_init__(self) -> None:
        if self.code not in STATUS:
            raise KeyError(f"unknown error code {self.code!r}")

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def envelope(code: str, message: str) -> bytes:
    """Render the contract's error body `{"error": {"code", "message"}}`."""
    return json.dumps({"error": {"code": code, "message": message}}).encode()


class OutOfMemory(Exception):
    """The accelerator ran out of memory during a scorer call (503, retry later)."""


class ScoringFailed(Exception):
    """The scorer failed for a reason other than bad input or memory (500)."""


def excerpt(value: object, limit: int = 80) -> str:
    """A short, printable excerpt of client input, safe to echo in a message."""
    text = value if isinstance(value, str) else repr(value)
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return clean if len(clean) <= limit else clean[:limit] + "…"
