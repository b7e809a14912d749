"""Errors are data: one table of codes, one renderer of the envelope.

Every refusal the service can give is a row here, so the HTTP status, the code
and the envelope can never drift apart between call sites. The scorer's own
failures are not HTTP and live beside its protocol (engine/scorer.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# code -> (HTTP status, the System One API's error `type`); the contract's table plus the
# routing and protocol codes. The type column is an extension every envelope carries.
CODES: dict[str, tuple[int, str]] = {
    "bad_request": (400, "invalid_request_error"),
    "unauthorized": (401, "authentication_error"),
    "not_found": (404, "not_found_error"),
    "method_not_allowed": (405, "invalid_request_error"),
    "request_timeout": (408, "invalid_request_error"),
    "request_too_large": (413, "invalid_request_error"),
    "unsupported_media_type": (415, "invalid_request_error"),
    "invalid_request": (422, "invalid_request_error"),
    "busy": (429, "rate_limit_error"),
    "headers_too_large": (431, "invalid_request_error"),
    "scoring_failed": (500, "api_error"),
    "too_many_connections": (503, "overloaded_error"),
    "out_of_memory": (503, "overloaded_error"),
    "shutting_down": (503, "overloaded_error"),
}
STATUS: dict[str, int] = {code: status for code, (status, _) in CODES.items()}


@dataclass(frozen=True)
class ApiError(Exception):
    """A refusal with a code from STATUS and a message safe to show the caller."""

    code: str
    message: str
    headers: tuple[tuple[bytes, bytes], ...] = ()
    param: str | None = None  # the JSON path of the offending field, when one is to blame

    def __post_init__(self) -> None:
        if self.code not in STATUS:
            raise KeyError(f"unknown error code {self.code!r}")

    @property
    def status(self) -> int:
        return STATUS[self.code]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


# The 401s (RFC 6750 3): `Bearer` on every one, `error="invalid_token"` only when a token was presented.
# presented -> (message, WWW-Authenticate); a wrong token and a nearly right one get the same.
UNAUTHORIZED = {
    False: ("no bearer token: send the header 'Authorization: Bearer <token>'", b"Bearer"),
    True: ("the bearer token is not one this server accepts", b'Bearer error="invalid_token"'),
}


def unauthorized(presented: bool) -> ApiError:
    """The 401 for a request whose bearer did not pass, by whether it presented a token at all."""
    message, challenge = UNAUTHORIZED[presented]
    return ApiError("unauthorized", message, ((b"www-authenticate", challenge),))


def too_large(limit: int, declared: bool) -> ApiError:
    """The 413 for a body over SEMIF_MAX_BODY_BYTES, declared in Content-Length or found while reading."""
    body = "declared body" if declared else "body"
    return ApiError(
        "request_too_large",
        f"{body} over the {limit}-byte limit; the server's SEMIF_MAX_BODY_BYTES raises it",
    )


def envelope(code: str, message: str, param: str | None = None) -> bytes:
    """Render the contract's error body `{"error": {"code", "message"}}`, plus (extension) the
    API's `type` for the code and, when a field is to blame, its JSON path as `param`."""
    error = {"code": code, "message": message, "type": CODES[code][1]}
    if param is not None:
        error["param"] = param
    return json.dumps({"error": error}).encode()


def excerpt(value: object, limit: int = 80) -> str:
    """A short, printable excerpt of client input, safe to echo in a message."""
    text = value if isinstance(value, str) else repr(value)
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[: limit + 1])
    return clean if len(clean) <= limit else clean[:limit] + "…"
