"""The one HTTP client of the bench: raw keep-alive sockets under asyncio.

Every Python-side tool (acceptance checks, the 429 check, the model timings,
soak, scale) talks to a server through this module; the overhead against the
peers is measured with wrk instead (bench/load/wrk.py). It is deliberately small (no h11, no parsing beyond the status
line and Content-Length) so that on a 2-core machine the load generator costs
far less CPU than the server it measures. Closed loop (`drive`: N connections, each
waiting for its answer) and open loop (`open_loop`: Poisson arrivals, each sent at its
time whatever the completions, with health probes beside it). Every exchange runs under a deadline;
loopback only unless the caller opts in (`remote=True`, openloop's `--remote`), so a benchmark can
never be pointed at another host by mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
DEFAULT_TIMEOUT = 30.0
TOKEN_ENV = "SEMIF_API_TOKEN"


@dataclass(frozen=True)
class Target:
    """Where a server listens, and the bearer token to present."""

    host: str
    port: int
    token: str

    @classmethod
    def from_url(cls, url: str, token: str | None = None, remote: bool = False) -> Target:
        """Parse http://HOST:PORT over plain HTTP; HOST must be loopback unless `remote` says another
        host is meant (a replica in the fleet: the bearer token then crosses the network)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"--url must be http://HOST:PORT, got {url!r}")
        if parts.hostname not in LOOPBACK and not remote:
            raise ValueError(
                f"--url must be http://127.0.0.1:PORT (loopback only, unless --remote), got {url!r}"
            )
        token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        return cls(parts.hostname, parts.port, token)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class Response:
    """One answer: status, body and the seconds from the first byte sent to the last read."""

    status: int
    body: bytes
    latency: float
    head: bytes = b""  # the status line and headers, for checks that read a header

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode("latin-1")
        return None

    def json(self) -> Any:
        return json.loads(self.body)


def encode(
    target: Target,
    method: str,
    path: str,
    payload: Any = None,
    bearer: bool = False,
    request_id: str | None = None,
) -> bytes:
    """A complete request, rendered once so the load loop only writes bytes (a GET carries the bearer
    if asked; `request_id` goes out as X-Request-Id, which the server's access log keeps)."""
    body = (
        b""
        if payload is None
        else payload
        if isinstance(payload, bytes)
        else json.dumps(payload).encode()
    )
    head = [f"{method} {path} HTTP/1.1", f"host: {target.host}:{target.port}"]
    if method != "GET" or bearer:
        head.append(f"authorization: Bearer {target.token}")
    if request_id is not None:
        head.append(f"x-request-id: {request_id}")
    if method != "GET":
        head += ["content-type: application/json", f"content-length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _content_length(head: bytes) -> tuple[int, int, bool]:
    """Status, Content-Length and whether the server will close, from a response head."""
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, close = -1, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
        elif name == b"transfer-encoding":
            raise ValueError("chunked responses are not expected from these servers")
    if length < 0:
        raise ValueError("response without Content-Length")
    return status, length, close


class Connection:
    """One keep-alive connection: write a request, read exactly one response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False

    @classmethod
    async def open(cls, target: Target, timeout: float = 5.0) -> Connection:
        async with asyncio.timeout(timeout):
            return cls(*await asyncio.open_connection(target.host, target.port, limit=1 << 20))

    async def exchange(self, raw: bytes, timeout: float = DEFAULT_TIMEOUT) -> Response:
        """Send one pre-encoded request and read its response, all under one deadline."""
        started = time.perf_counter()
        async with asyncio.timeout(timeout):
            self.writer.write(raw)
            head = await self.reader.readuntil(b"\r\n\r\n")
            status, length, close = _content_length(head[:-4])
            body = await self.reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return Response(status, body, time.perf_counter() - started, head[:-4])

    async def request(
        self,
        target: Target,
        method: str,
        path: str,
        payload: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Response:
        return await self.exchange(encode(target, method, path, payload), timeout)

    async def stray_bytes(self, wait: float = 0.05) -> bytes:
        """Bytes the server sent beyond the responses we read (a duplicate answer), if any."""
        if self.closed:
            return b""
        try:
            async with asyncio.timeout(wait):
                return await self.reader.read(65536)
        except TimeoutError:
            return b""

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        try:
            async with asyncio.timeout(2.0):
                await self.writer.wait_closed()
        except (TimeoutError, ConnectionError):
            pass


async def call(
    target: Target, method: str, path: str, payload: Any = None, timeout: float = DEFAULT_TIMEOUT
) -> Response:
    """One request on a fresh connection (checks, health polls)."""
    return await call_raw(target, encode(target, method, path, payload), timeout)


async def call_raw(target: Target, raw: bytes, timeout: float = DEFAULT_TIMEOUT) -> Response:
    """One pre-encoded request on a fresh connection."""
    connection = await Connection.open(target)
    try:
        return await connection.exchange(raw, timeout)
    finally:
        await connection.close()


# -- load ----------------------------------------------------------------------


@dataclass
class Tally:
    """What one load cell sent and got back; `lost` counts requests with no answer."""

    sent: int = 0
    answered: int = 0
    lost: int = 0
    duplicates: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    client_cpu: float = 0.0

    def record(self, response: Response) -> None:
        self.answered += 1
        self.statuses[response.status] += 1
        self.latencies.append(response.latency)

    @property
    def rps(self) -> float:
        return self.answered / self.wall if self.wall else 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)

    def summary(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "answered": self.answered,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "rps": round(self.rps, 1),
            "p50_ms": round(self.percentile(50) * 1e3, 3),
            "p99_ms": round(self.percentile(99) * 1e3, 3),
            "wall_s": round(self.wall, 3),
            "client_cpu_share": round(self.client_cpu / self.wall, 3) if self.wall else 0.0,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 of 100 samples is the 99th)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> dict[str, Any]:
    """p50 and the range of repeated timings, with the samples themselves."""
    return {
        "p50": median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "all": list(values),
    }


async def _worker(
    connection: Connection,
    requests: Sequence[bytes],
    offset: int,
    until: float,
    tally: Tally | None,
    timeout: float,
) -> None:
    """Send requests back to back on one connection until the deadline."""
    index = offset
    while time.perf_counter() < until and not connection.closed:
        raw = requests[index % len(requests)]
        index += 1
        if tally is not None:
            tally.sent += 1
        try:
            response = await connection.exchange(raw, timeout)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            if tally is not None:
                tally.lost += 1
            await connection.close()
            return
        if tally is not None:
            tally.record(response)


async def drive(
    target: Target,
    requests: Sequence[bytes],
    concurrency: int,
    duration: float,
    warmup: float = 0.3,
    timeout: float = DEFAULT_TIMEOUT,
) -> Tally:
    """Closed-loop load: `concurrency` keep-alive connections, each one request at a time.

    A warm-up on the same connections is discarded; then every request sent in
    `duration` is counted, and afterwards each connection is checked for stray
    bytes, which would be a request answered twice.
    """
    connections = await asyncio.gather(*(Connection.open(target) for _ in range(concurrency)))
    tally = Tally()
    try:
        if warmup > 0:
            until = time.perf_counter() + warmup
            await asyncio.gather(
                *(_worker(c, requests, i, until, None, timeout) for i, c in enumerate(connections))
            )
        cpu, started = time.process_time(), time.perf_counter()
        until = started + duration
        await asyncio.gather(
            *(_worker(c, requests, i, until, tally, timeout) for i, c in enumerate(connections))
        )
        tally.wall = time.perf_counter() - started
        tally.client_cpu = time.process_time() - cpu
        strays = await asyncio.gather(*(c.stray_bytes() for c in connections))
        tally.duplicates = sum(1 for data in strays if data)
    finally:
        await asyncio.gather(*(c.close() for c in connections))
    return tally


# -- open loop -------------------------------------------------------------------


def poisson_arrivals(rate: float, duration: float, seed: str) -> list[float]:
    """Send times (seconds from the start) of a Poisson process at `rate`/s over `duration` s.

    Seeded by a string, so every server offered the same (seed, rate) gets the very same times.
    """
    draw = random.Random(seed)
    times, now = [], draw.expovariate(rate)
    while now < duration:
        times.append(now)
        now += draw.expovariate(rate)
    return times


@dataclass(frozen=True)
class Fate:
    """One open-loop request: when it was due, how late it left, and what came back (status None: no answer)."""

    due: float
    lag: float
    status: int | None
    latency: float
    outcome: str  # "timeout" or "error" when status is None
    body: bytes = b""
    retry_after: str | None = None

    @property
    def done(self) -> float:
        """When its answer (or its abandonment) came, in seconds from the start of the window."""
        return self.due + self.lag + self.latency


@dataclass
class OpenLoopRun:
    """What one open-loop window offered and got back, and what it cost the load generator."""

    offered: int
    duration: float  # the window the arrivals were drawn over
    fates: list[Fate]
    client_cpu: float  # seconds of this process's CPU from the first send to the last answer
    wall: float  # seconds from the first send to the last answer


async def _send(target: Target, raw: bytes, due: float, started: float, timeout: float) -> Fate:
    """One request on a fresh connection (one caller of a fleet), abandoned at `timeout`."""
    sent = time.perf_counter()
    lag = sent - (started + due)
    connection: Connection | None = None
    try:
        async with asyncio.timeout(timeout):
            connection = await Connection.open(target, timeout)
            response = await connection.exchange(raw, timeout)
    except TimeoutError:
        return Fate(due, lag, None, time.perf_counter() - sent, "timeout")
    except (ConnectionError, asyncio.IncompleteReadError, ValueError, OSError):
        return Fate(due, lag, None, time.perf_counter() - sent, "error")
    finally:
        if connection is not None:
            await connection.close()
    return Fate(
        due,
        lag,
        response.status,
        time.perf_counter() - sent,
        "answered",
        response.body,
        response.header("retry-after"),
    )


async def open_loop(
    target: Target,
    raw: bytes | Sequence[bytes],
    arrivals: Sequence[float],
    duration: float,
    timeout: float = DEFAULT_TIMEOUT,
) -> OpenLoopRun:
    """Send `raw` at each arrival time (within `duration` s) whatever the completions (open loop), then
    wait for every answer. A sequence of requests sends its k-th at the k-th arrival (one each).

    Each request leaves on its own connection at its scheduled time; how late it left
    (`lag`) is recorded, so a load generator that cannot keep up shows in its own figures.
    """
    cpu, started = time.process_time(), time.perf_counter()
    each = [raw] * len(arrivals) if isinstance(raw, bytes) else list(raw)
    if len(each) < len(arrivals):
        raise ValueError(f"{len(arrivals)} arrivals, only {len(each)} requests")
    tasks = []
    for due, request in zip(arrivals, each):
        delay = started + due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(_send(target, request, due, started, timeout)))
    fates = list(await asyncio.gather(*tasks))
    return OpenLoopRun(
        len(arrivals), duration, fates, time.process_time() - cpu, time.perf_counter() - started
    )


@dataclass(frozen=True)
class Probe:
    """One health probe: seconds it took (up to its timeout) and whether it failed (no 200 in time)."""

    latency: float
    failed: bool


async def probe_health(
    target: Target, path: str, stop: asyncio.Event, interval: float, timeout: float
) -> list[Probe]:
    """GET `path` on a fresh connection every `interval` s until `stop`, as a kubelet probes a pod."""
    probes: list[Probe] = []
    while not stop.is_set():
        started = time.perf_counter()
        try:
            failed = (await call(target, "GET", path, timeout=timeout)).status != 200
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError, OSError):
            failed = True
        elapsed = time.perf_counter() - started
        probes.append(Probe(min(elapsed, timeout), failed))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, interval - elapsed)):
                await stop.wait()
    return probes
