"""`Client` and `AsyncClient`: the three endpoints over httpx, with the shared retry policy.

Rules: the two classes do only I/O: build the request, send it, read the body, sleep.
Every decision about an outcome (retry, pause, give up, which error) is
`retry.Attempts`'s, so sync and async cannot drift apart; what each endpoint sends
and how its answer is read is `_Base`'s, likewise shared. httpx owns HTTP and
keep-alive pooling; nothing here parses HTTP. Nothing here imports torch or the
server.

Theory of operation. A call is one `Call` (method, path, JSON body, reader). Each
attempt is sent with `stream=True`, so a failure before the status line (retried as
a connection failure) is told apart from one while the body arrives (an
`incomplete_response`, never retried). Each attempt's httpx timeouts are the time left
on the call's deadline. The async client also bounds the whole attempt with
`asyncio.timeout`, a hard stop; the sync client checks the clock between body chunks,
so a server that dribbles one response can overrun the deadline by at most one read.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from . import bodies, results
from .bodies import Options, Question, State
from .errors import MissingToken, TransportError
from .retry import Attempts, Next, RetryPolicy

TOKEN_ENV = "SEMIF_API_TOKEN"


# What a call's 2xx body is read into.
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One logical call: what to send, how to read a 2xx body, and its retry settings."""

    method: str
    path: str
    body: Any
    read: Callable[[Any], R]
    ok: tuple[int, ...] = (200,)
    bearer: bool = True  # the endpoint needs the token
    retry: bool = True
    deadline: float | None = None
    request_id: str | None = None


def _describe(error: Exception) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _refused(error: BaseException) -> bool:
    """Whether the connection was refused (nothing listens there): httpx and httpcore wrap the OSError."""
    seen: BaseException | None = error
    while seen is not None and not isinstance(seen, ConnectionRefusedError):
        seen = seen.__cause__ or seen.__context__
    return seen is not None


def _object(value: Any) -> dict[str, Any]:
    """A JSON object as it came (a body of another shape is a bad response)."""
    if not isinstance(value, dict):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    return value


class _Base:
    """The endpoints as `Call`s and the settings both clients share."""

    def __init__(
        self, url: str, token: str | None, deadline: float, retry: RetryPolicy | None
    ) -> None:
        self.url = url
        self.policy = retry if retry is not None else RetryPolicy(deadline=deadline)
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        self._headers = {"authorization": f"Bearer {token}"} if token else {}

    def _begin(self, call: Call[Any]) -> Attempts:
        """Open a call's attempts; a call that needs the token and has none is refused here, unsent."""
        attempts = self.policy.begin(call.request_id, call.deadline, call.retry)
        if call.bearer and not self._headers:
            raise MissingToken(
                f"{call.method} {call.path} needs the server's bearer token: "
                f"pass token= or set {TOKEN_ENV}",
                attempts.request_id,
            )
        return attempts

    def _no_response(self, error: httpx.TransportError, attempts: Attempts) -> Next:
        """An attempt that got no response, described for the caller and handed to the policy."""
        refused = _refused(error)
        message = (
            f"cannot connect to {self.url}: is the server running?" if refused else _describe(error)
        )
        return attempts.no_response(message, isinstance(error, httpx.TimeoutException), refused)

    @staticmethod
    def _decide(
        state: State,
        question: str,
        options: Options,
        id: str,
        orderings: str | None,
        workload: str | None,
        deadline: float | None,
        request_id: str | None,
    ) -> Call[results.Decided]:
        body = bodies.decide(
            state, question, options, id=id, orderings=orderings, workload=workload
        )
        return Call(
            "POST", "/decide", body, results.decided, deadline=deadline, request_id=request_id
        )

    @staticmethod
    def _shared(
        state: State,
        decisions: Sequence[Question],
        workload: str | None,
        deadline: float | None,
        request_id: str | None,
    ) -> Call[results.Shared]:
        body = bodies.shared(state, decisions, workload=workload)
        return Call(
            "POST",
            "/decide/shared",
            body,
            results.Shared.from_json,
            deadline=deadline,
            request_id=request_id,
        )

    @staticmethod
    def _health(deadline: float | None, request_id: str | None) -> Call[results.Health]:
        # A probe: one attempt, and a draining server's 503 body is its answer, not an error.
        return Call(
            "GET",
            "/health",
            None,
            results.Health.from_json,
            ok=(200, 503),
            bearer=False,
            retry=False,
            deadline=deadline,
            request_id=request_id,
        )

    @staticmethod
    def _audit(deadline: float | None, request_id: str | None) -> Call[dict[str, Any]]:
        # Extension: what audits counted, as the server's JSON (the export reads it whole).
        return Call("GET", "/v1/audit", None, _object, deadline=deadline, request_id=request_id)

    @staticmethod
    def _request(
        http: httpx.Client | httpx.AsyncClient, call: Call[Any], attempts: Attempts, timeout: float
    ) -> httpx.Request:
        return http.build_request(
            call.method,
            call.path,
            json=call.body,
            headers=attempts.headers,
            timeout=httpx.Timeout(timeout),
        )

    @staticmethod
    def _finish(call: Call[R], step: Next, attempts: Attempts) -> R:
        try:
            return call.read(step.value)
        except (TypeError, KeyError, ValueError) as error:
            raise TransportError(
                "bad_response",
                f"the answer does not have the contract's shape: {error}",
                attempts.request_id,
                attempts.count,
                200,
            ) from None


class Client(_Base):
    """A blocking client with a keep-alive pool; use it in a `with` block or call `close()`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        deadline: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, deadline, retry)
        self._http = httpx.Client(base_url=url, headers=self._headers, transport=transport)

    def decide(
        self,
        state: State,
        question: str,
        options: Options,
        *,
        id: str = "decision",
        orderings: str | None = None,
        workload: str | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
    ) -> results.Decided:
        """POST /decide: a `Result`, or an `Averaged` one when `orderings` is set."""
        return self._run(
            self._decide(state, question, options, id, orderings, workload, deadline, request_id)
        )

    def decide_shared(
        self,
        state: State,
        decisions: Sequence[Question],
        *,
        workload: str | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
    ) -> results.Shared:
        """POST /decide/shared: every decision over one state, in one scorer call."""
        return self._run(self._shared(state, decisions, workload, deadline, request_id))

    def health(
        self, *, deadline: float | None = None, request_id: str | None = None
    ) -> results.Health:
        """GET /health, one attempt; `status` is "draining" while the server shuts down."""
        return self._run(self._health(deadline, request_id))

    def audit(
        self, *, deadline: float | None = None, request_id: str | None = None
    ) -> dict[str, Any]:
        """GET /v1/audit (extension): what audits counted per (workload, n), and the calibration served."""
        return self._run(self._audit(deadline, request_id))

    def _run(self, call: Call[R]) -> R:
        attempts = self._begin(call)
        while True:
            timeout = attempts.start()
            step = self._attempt(
                self._request(self._http, call, attempts, timeout), attempts, call.ok
            )
            if step.done:
                return self._finish(call, step, attempts)
            time.sleep(step.pause)

    def _attempt(self, request: httpx.Request, attempts: Attempts, ok: tuple[int, ...]) -> Next:
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            return self._no_response(error, attempts)
        try:
            chunks = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if attempts.remaining() <= 0:
                    raise attempts.expired("the response was still arriving at the deadline")
        except httpx.TimeoutException:
            raise attempts.expired("the response was still arriving at the deadline") from None
        except httpx.TransportError as error:
            raise attempts.broken(response.status_code, _describe(error)) from None
        finally:
            response.close()
        return attempts.answered(response.status_code, response.headers, b"".join(chunks), ok)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio client with a keep-alive pool; use it in an `async with` block or await `aclose()`."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        deadline: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, deadline, retry)
        self._http = httpx.AsyncClient(base_url=url, headers=self._headers, transport=transport)

    async def decide(
        self,
        state: State,
        question: str,
        options: Options,
        *,
        id: str = "decision",
        orderings: str | None = None,
        workload: str | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
    ) -> results.Decided:
        """POST /decide: a `Result`, or an `Averaged` one when `orderings` is set."""
        return await self._run(
            self._decide(state, question, options, id, orderings, workload, deadline, request_id)
        )

    async def decide_shared(
        self,
        state: State,
        decisions: Sequence[Question],
        *,
        workload: str | None = None,
        deadline: float | None = None,
        request_id: str | None = None,
    ) -> results.Shared:
        """POST /decide/shared: every decision over one state, in one scorer call."""
        return await self._run(self._shared(state, decisions, workload, deadline, request_id))

    async def health(
        self, *, deadline: float | None = None, request_id: str | None = None
    ) -> results.Health:
        """GET /health, one attempt; `status` is "draining" while the server shuts down."""
        return await self._run(self._health(deadline, request_id))

    async def audit(
        self, *, deadline: float | None = None, request_id: str | None = None
    ) -> dict[str, Any]:
        """GET /v1/audit (extension): what audits counted per (workload, n), and the calibration served."""
        return await self._run(self._audit(deadline, request_id))

    async def _run(self, call: Call[R]) -> R:
        attempts = self._begin(call)
        while True:
            timeout = attempts.start()
            request = self._request(self._http, call, attempts, timeout)
            try:
                async with asyncio.timeout(timeout):  # a hard stop, whatever the server dribbles
                    step = await self._attempt(request, attempts, call.ok)
            except TimeoutError:
                raise attempts.expired("no complete answer before the deadline") from None
            if step.done:
                return self._finish(call, step, attempts)
            await asyncio.sleep(step.pause)

    async def _attempt(
        self, request: httpx.Request, attempts: Attempts, ok: tuple[int, ...]
    ) -> Next:
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as error:
            return self._no_response(error, attempts)
        try:
            body = await response.aread()
        except httpx.TimeoutException:
            raise attempts.expired("the response was still arriving at the deadline") from None
        except httpx.TransportError as error:
            raise attempts.broken(response.status_code, _describe(error)) from None
        finally:
            await response.aclose()
        return attempts.answered(response.status_code, response.headers, body, ok)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
