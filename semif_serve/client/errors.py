"""The client's typed errors: every failure a call can end in, with status, code, message, request id.

Rules: one base class, `SemifError`, so a caller can catch everything from a call in
one clause; every error carries the four facts a caller acts on: the HTTP `status`
(None when no response came), the `code`, a `message` fit to show, and the
`request_id` the call sent in `X-Request-Id` on every attempt. Server codes come from
the envelope `{"error": {"code", "message"}}` unchanged; the client adds only the
codes in CLIENT_CODES, for failures that have no envelope, and `http_<status>` for an
error status whose body is not an envelope (a proxy's page). No I/O here.
"""

from __future__ import annotations

from typing import Any

# Codes the client gives failures that never produced an envelope.
CLIENT_CODES = {
    "connection_failed": "no response: the connection could not be made or broke before any response",
    "incomplete_response": "the server closed the connection in the middle of a response",
    "bad_response": "the response was not the JSON the contract describes",
    "deadline_exceeded": "the call's total deadline passed",
    "no_token": "a call that needs the bearer token, with none to send: refused before any request",
}


class SemifError(Exception):
    """Any failure of a semif-serve call."""

    def __init__(
        self, status: int | None, code: str, message: str, request_id: str, attempts: int = 1
    ) -> None:
        super().__init__(
            f"{code}: {message}"
            + (f" (HTTP {status})" if status is not None else "")
            + f" [request id {request_id}]"
        )
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        self.attempts = attempts


class ApiError(SemifError):
    """The server refused or failed the request and said why in its error envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        request_id: str,
        attempts: int = 1,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, code, message, request_id, attempts)
        self.retry_after = retry_after

    @classmethod
    def from_envelope(
        cls, status: int, body: Any, request_id: str, attempts: int, retry_after: float | None
    ) -> ApiError:
        """Read `{"error": {"code", "message"}}`; anything else is still an ApiError, coded by status."""
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return cls(
                status,
                error["code"],
                str(error.get("message", "")),
                request_id,
                attempts,
                retry_after,
            )
        return cls(
            status,
            f"http_{status}",
            "the server answered without an error envelope",
            request_id,
            attempts,
            retry_after,
        )


class TransportError(SemifError):
    """No usable response: the connection failed, broke mid-response, or the body was not JSON."""

    def __init__(
        self, code: str, message: str, request_id: str, attempts: int = 1, status: int | None = None
    ) -> None:
        if code not in CLIENT_CODES:
            raise KeyError(f"unknown client error code {code!r}")
        super().__init__(status, code, message, request_id, attempts)


class MissingToken(SemifError):
    """A protected call with no token (none given, SEMIF_API_TOKEN unset): nothing was sent,
    since the server could only answer 401. GET /health needs none."""

    def __init__(self, message: str, request_id: str) -> None:
        super().__init__(None, "no_token", message, request_id, 0)


class DeadlineExceeded(SemifError):
    """The call's total deadline passed, or the next try could not start before it.

    `last` is what the final attempt ended in (a busy 429, a 503, a connection failure),
    or None when the deadline ran out during the attempt itself; `status` is its status.
    """

    def __init__(
        self, message: str, request_id: str, attempts: int, last: SemifError | None
    ) -> None:
        status = last.status if last is not None else None
        detail = f"; last: {last.code}: {last.message}" if last is not None else ""
        super().__init__(status, "deadline_exceeded", message + detail, request_id, attempts)
        self.last = last
