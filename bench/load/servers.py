"""What an open-loop run offers its requests to: our servers and the peer, started on demand, the
System One body they are sent, and a server's serial capacity. `bench openloop` and its
`--two-callers` run share them from here.

Rules: bench-only. Every server starts through bench.common.procs; one that answers another
server's bearer was started on a port taken while it loaded, and is started again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench.common import datasets, procs
from bench.common.loadgen import Connection, Target, call_raw, encode, percentile
from bench.common.report import note
from bench.load.peer_fastjev import HEALTH, SERVED_MODEL

START_ATTEMPTS = 3
CAPACITY_CALLS = 5  # at least this many timed calls after the discarded cold one
ALIAS = "jev-latest"  # the model our servers answer to (their default alias); the peer answers to its own name


def systemone_body(questions: int, model: str) -> dict[str, Any]:
    """A System One request of the first `questions` of the 21 speed criteria (noul questions) over their state."""
    spec = datasets.load_json(datasets.SPEED21)
    if not 1 <= questions <= len(spec["decisions"]):
        raise ValueError(f"a shape has 1..{len(spec['decisions'])} questions, not {questions}")
    chosen = spec["decisions"][:questions]
    return {
        "model": model,
        "state": spec["state"],
        "questions": {
            d["id"]: {
                "type": "noul",
                "instructions": d["question"],
                "criteria": {"true": "Yes", "false": "No"},
            }
            for d in chosen
        },
    }


@dataclass(frozen=True)
class Live:
    """A server ready to be offered load: where, its health path, its model name and its PID (if local)."""

    target: Target
    health: str
    model: str
    pid: int | None


class Servers:
    """Starts each kind of server on demand (a fresh process per cell), or points at `--url`."""

    def __init__(self, args: argparse.Namespace, token: str) -> None:
        self.args, self.token = args, token
        self._model: dict[str, str] | None = None

    def model(self) -> dict[str, str]:
        if self._model is None:
            note("openloop: finding SmolLM2 with semif-serve small-model")
            self._model = procs.small_model()
        return self._model

    def ours_env(self, budget: float | None) -> dict[str, str]:
        args = self.args
        if args.scorer == "stub":
            env = procs.stub_env(args.stub_delay_ms, args.queue)
        else:
            env = {
                **self.model(),
                "SEMIF_MAX_QUEUE": str(args.queue),
                "SEMIF_VERIFY_WEIGHTS": "presence",
            }
        env |= {"SEMIF_ACCESS_LOG": "off", "SEMIF_METRICS": "on"}
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        if budget is not None:
            env["SEMIF_MAX_WAIT_S"] = f"{budget:g}"
        return env

    @contextlib.contextmanager
    def start(self, name: str, budget_s: float | None = None) -> Iterator[Live]:
        """A fresh server `name` (semif-wait with SEMIF_MAX_WAIT_S=budget_s), stopped on exit.

        On a shared machine another process can take the free port while ours loads its model,
        and answer the readiness poll in its place: a server that refuses our bearer on
        GET /v1/models is not ours, so ours is started again on another port.
        """
        if name == "url":
            yield Live(
                Target.from_url(self.args.url, self.token, self.args.remote),
                self.args.health,
                self.args.model_name,
                self.args.pid,
            )
            return
        for _ in range(START_ATTEMPTS):
            with self._started(name, budget_s) as live:
                models = encode(live.target, "GET", "/v1/models", bearer=True)
                if asyncio.run(call_raw(live.target, models, 10.0)).status == 200:
                    note(f"openloop: {name} started on {live.target.url} (pid {live.pid})")
                    yield live
                    return
            note(
                f"openloop: {name}'s port answered another server (taken while ours loaded); starting it again"
            )
        raise RuntimeError(
            f"openloop: {name} never answered on a port of its own in {START_ATTEMPTS} starts"
        )

    @contextlib.contextmanager
    def _started(self, name: str, budget_s: float | None) -> Iterator[Live]:
        if name == "peer":
            if self.args.scorer == "stub":
                raise SystemExit(
                    "openloop: the peer serves a real model; it cannot run with --scorer stub"
                )
            env = {
                **self.model(),
                **({"OMP_NUM_THREADS": str(self.args.threads)} if self.args.threads else {}),
            }
            with procs.peer_fastjev(env, self.token, HEALTH) as server:
                yield Live(server.target, HEALTH, SERVED_MODEL, server.process.pid)
            return
        with procs.semif_serve(
            self.ours_env(budget_s if name == "semif-wait" else None),
            self.token,
            ready_timeout=600.0,
        ) as server:
            yield Live(server.target, "/health", ALIAS, server.process.pid)


async def _serial_calls(
    target: Target, raw: bytes, seconds: float, timeout: float
) -> tuple[float, list[float], float]:
    """(the cold first call's seconds, each later call's, their wall): one connection, one call at a
    time, at least CAPACITY_CALLS after the first and on until `seconds` have passed."""
    connection = await Connection.open(target)
    try:

        async def one() -> float:
            nonlocal connection
            if connection.closed:  # the server may close a keep-alive connection between calls
                connection = await Connection.open(target)
            response = await connection.exchange(raw, timeout)
            if response.status != 200:
                raise RuntimeError(
                    f"capacity run: answered {response.status} (every call must be a 200): "
                    f"{response.body[:300]!r}"
                )
            return response.latency

        cold = await one()
        latencies: list[float] = []
        started = time.perf_counter()
        while len(latencies) < CAPACITY_CALLS or time.perf_counter() - started < seconds:
            latencies.append(await one())
        return cold, latencies, time.perf_counter() - started
    finally:
        await connection.close()


def measure_capacity(live: Live, raw: bytes, seconds: float, timeout: float) -> dict[str, Any]:
    """Requests answered per second, one at a time on one connection: the serial service rate.

    The first call is cold (a fresh server, or a shape it has not seen) and is left out; the rate
    is taken over at least CAPACITY_CALLS after it, so one slow call cannot set it."""
    cold, latencies, wall = asyncio.run(_serial_calls(live.target, raw, seconds, timeout))
    return {
        "requests_per_s": len(latencies) / wall,
        "call_p50_s": percentile(latencies, 50),
        "n": len(latencies),
        "cold_call_s": cold,
    }
