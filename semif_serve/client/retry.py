"""The retry policy, shared by the sync and the async client: what to retry, how long to wait, when to stop.

Rules: every decision about an attempt's outcome lives here, none in the clients, which
only do the I/O (send, read, sleep) and report what happened. No I/O and no httpx here:
the clock and the random source are injected, so the policy is tested without sleeping.

Theory of operation. `RetryPolicy.begin()` opens one logical call: a fresh request id
(sent as `X-Request-Id` on every attempt, so the server's logs tie the retries together)
and a deadline on the monotonic clock. Before each attempt `start()` gives the time left,
which the client uses as that attempt's timeout, or raises `DeadlineExceeded`. After
it, the client reports one of three things:

- `answered(status, headers, body)`: a complete response. 200 gives the JSON back;
  a 429 `busy`, any 503 or a 408 gives a pause; any other status raises its `ApiError`
  at once (a 422 is never sent twice).
- `no_response(message, timed_out, refused)`: nothing came back (refused, reset, closed
  before the status line: a stale keep-alive connection reads like this). Retried, except a
  connection refused at the first attempt: no server listens there, and the caller hears so
  at once, unless the policy is told to wait for a server (`wait_for_server`) that is starting.
- `broken(status, message)`: the response started and then broke. Never retried:
  the server did the work, and the caller should hear that rather than wait.

A pause is full-jitter exponential backoff, `uniform(0, min(cap, base * 2**retry))`;
with `Retry-After` it is the server's number plus that jitter, so a crowd told "1"
does not return in one burst. A pause that would end at or past the deadline is not
taken: the call fails at once with `DeadlineExceeded` naming the last refusal.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .errors import ApiError, DeadlineExceeded, SemifError, TransportError

REQUEST_ID_HEADER = "x-request-id"
# 429 is retried only when the server says its queue is full; a proxy's 429 may mean a quota.
RETRY_STATUSES = {408, 503}
RETRY_429_CODES = {"busy"}


def retryable(error: ApiError) -> bool:
    """The refusals worth sending again: a full queue, any 503, a request that timed out."""
    return error.status in RETRY_STATUSES or (error.status == 429 and error.code in RETRY_429_CODES)


def parse_retry_after(
    value: str | None, now: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> float | None:
    """Seconds from a `Retry-After` value: delta-seconds or an HTTP-date (RFC 9110 10.2.3); None if unusable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now()).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How one logical call may be retried: its total deadline and the backoff's shape."""

    deadline: float = 30.0
    base: float = 0.05
    cap: float = 2.0
    wait_for_server: bool = False  # retry a connection refused at the first attempt too
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    rng: Callable[[], float] = field(default_factory=lambda: random.Random().random, repr=False)

    def __post_init__(self) -> None:
        if not (self.deadline > 0 and self.base > 0 and self.cap >= self.base):
            raise ValueError("RetryPolicy needs deadline > 0, base > 0 and cap >= base")

    def window(self, retry: int) -> float:
        """The largest pause before retry number `retry` (0 for the first)."""
        return min(self.cap, self.base * 2.0 ** min(retry, 62))

    def begin(
        self, request_id: str | None = None, deadline: float | None = None, retry: bool = True
    ) -> Attempts:
        """Open one logical call; `deadline` overrides the policy's for this call only."""
        seconds = self.deadline if deadline is None else deadline
        if not seconds > 0:
            raise ValueError("deadline must be > 0 seconds")
        return Attempts(self, request_id or uuid.uuid4().hex, seconds, retry)


@dataclass(frozen=True)
class Next:
    """After an attempt: `done` with its JSON `value`, or wait `pause` seconds and try again."""

    done: bool
    value: Any = None
    pause: float = 0.0


class Attempts:
    """The state of one logical call across its attempts."""

    def __init__(self, policy: RetryPolicy, request_id: str, deadline: float, retry: bool) -> None:
        self.policy = policy
        self.request_id = request_id
        self.deadline = deadline
        self.retry = retry
        self.started_at = policy.clock()
        self.ends_at = self.started_at + deadline
        self.count = 0
        self.last: SemifError | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {REQUEST_ID_HEADER: self.request_id}

    def remaining(self) -> float:
        return self.ends_at - self.policy.clock()

    def start(self) -> float:
        """Begin an attempt; the seconds it may take (its timeout), or DeadlineExceeded."""
        left = self.remaining()
        if left <= 0:
            raise self.expired("the deadline passed before the next attempt")
        self.count += 1
        return left

    def expired(self, why: str) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"{why} ({self.deadline:g} s, {self.count} attempt(s))",
            self.request_id,
            self.count,
            self.last,
        )

    def answered(
        self, status: int, headers: Mapping[str, str], body: bytes, ok: tuple[int, ...] = (200,)
    ) -> Next:
        """A complete response: the JSON for an `ok` status, a pause, or the error raised."""
        data = _json(body)
        if status in ok:
            if data is _NOT_JSON:
                raise TransportError(
                    "bad_response",
                    f"HTTP {status} with a body that is not JSON",
                    self.request_id,
                    self.count,
                    status,
                )
            if not (isinstance(data, dict) and "error" in data):
                return Next(done=True, value=data)
        error = ApiError.from_envelope(
            status,
            None if data is _NOT_JSON else data,
            self.request_id,
            self.count,
            parse_retry_after(headers.get("retry-after")),
        )
        if not (self.retry and retryable(error)):
            raise error
        return self._pause(error, error.retry_after)

    def no_response(self, message: str, timed_out: bool = False, refused: bool = False) -> Next:
        """Nothing came back from this attempt: retried while time is left, but for a connection
        refused at the first attempt (nothing listens there) unless the policy waits for a server."""
        if timed_out and self.remaining() <= 0:
            raise self.expired("no answer before the deadline")
        error = TransportError("connection_failed", message, self.request_id, self.count)
        first_refusal = refused and self.count == 1 and not self.policy.wait_for_server
        if not self.retry or first_refusal:
            raise error
        return self._pause(error, None)

    def broken(self, status: int, message: str) -> TransportError:
        """A response that started and broke off; the caller raises it (never retried)."""
        return TransportError(
            "incomplete_response",
            f"the server closed the connection mid-response (HTTP {status}): {message}",
            self.request_id,
            self.count,
            status,
        )

    def _pause(self, error: SemifError, retry_after: float | None) -> Next:
        self.last = error
        jitter = self.policy.rng() * self.policy.window(self.count - 1)
        pause = jitter if retry_after is None else retry_after + jitter
        if self.policy.clock() + pause >= self.ends_at:
            asked = f"; the server asked for {retry_after:g} s" if retry_after is not None else ""
            raise self.expired(f"the next attempt could not start before the deadline{asked}")
        return Next(done=False, pause=pause)


_NOT_JSON = object()


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return _NOT_JSON
