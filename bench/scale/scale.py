"""Scaling out: stub replicas behind the nginx of deploy/nginx, under load, restarts and kills.

`python -m bench scale` runs every section and writes bench/results/scale.json and a
section of bench/RESULTS.md; tests/deploy/test_scale_nginx.py runs the same scenarios small.

* spread: closed-loop load through nginx; requests per replica from its access log.
* full queues: two replicas' queues filled directly; requests through nginx must all be
  answered by the third. Then one burst, the same size, against one replica direct and
  against nginx over three: the 429s each caller sees.
* rolling restart: load runs while each replica in turn gets SIGTERM, exits, and is
  started again; every request id must be answered exactly once, all 200.
* kill: a burst in flight across the replicas, one replica SIGKILLed mid-request; what the
  caller sees through nginx, and the same kill with the caller on the replica directly.
* throughput: requests per second with 1, 2 and 3 replicas behind nginx and one direct
  (stub with a delay standing in for a card), and one replica direct against behind nginx
  with no delay (what the proxy costs), rounds alternating so drift hits both alike.

Rules: load and verdicts live here; processes in bench/scale/edge.py; the HTTP client is
bench/common/loadgen.py. Every request carries its own id (the row id, which the stub echoes in
the result, and X-Request-Id, which nginx echoes), so "answered exactly once" is
checked per request, not counted in bulk. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import datasets, procs
from bench.common.loadgen import Connection, Response, Target, call, drive, encode
from bench.common.report import machine, markdown_table, note, write_json
from bench.scale import edge

HERE = Path(__file__).resolve().parents[1]  # bench/
ERRORS = (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError)


def decide(target: Target, request_id: str) -> bytes:
    """POST /decide whose row id and X-Request-Id are both `request_id`."""
    raw = encode(target, "POST", "/decide", {**datasets.first_with(2), "id": request_id})
    return raw.replace(b"\r\n", f"\r\nx-request-id: {request_id}".encode() + b"\r\n", 1)


# -- per-request accounting ------------------------------------------------------------------


@dataclass
class Ledger:
    """Every request id sent, how many answers each got, and what the caller saw."""

    sent: list[str] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # no HTTP answer: reset, refused, timeout
    mismatched: int = 0  # an answer whose row id or X-Request-Id is another request's

    def record(self, request_id: str, response: Response, via_edge: bool) -> None:
        self.statuses[response.status] += 1
        self.answers[request_id] += 1
        if via_edge and response.header("x-request-id") != request_id:
            self.mismatched += 1
        if response.status == 200 and response.json()["id"] != request_id:
            self.mismatched += 1

    def summary(self) -> dict[str, Any]:
        unanswered = sum(1 for rid in self.sent if self.answers[rid] == 0)
        twice = sum(1 for count in self.answers.values() if count > 1)
        failures = sum(n for status, n in self.statuses.items() if status != 200) + sum(
            self.errors.values()
        )
        return {
            "sent": len(self.sent),
            "answered": sum(self.answers.values()),
            "unanswered": unanswered,
            "answered_twice": twice,
            "mismatched": self.mismatched,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "errors": dict(self.errors),
            "client_visible_failures": failures,
        }


async def _one(
    target: Target, request_id: str, ledger: Ledger, via_edge: bool, timeout: float
) -> None:
    """One request on its own connection."""
    ledger.sent.append(request_id)
    try:
        connection = await Connection.open(target)
        try:
            ledger.record(
                request_id, await connection.exchange(decide(target, request_id), timeout), via_edge
            )
        finally:
            await connection.close()
    except ERRORS as error:
        ledger.errors[type(error).__name__] += 1


async def burst(
    target: Target, prefix: str, count: int, via_edge: bool, timeout: float = 30.0
) -> Ledger:
    """`count` simultaneous requests, one connection each."""
    ledger = Ledger()
    await asyncio.gather(
        *(_one(target, f"{prefix}-{k}", ledger, via_edge, timeout) for k in range(count))
    )
    return ledger


async def closed_loop(
    target: Target,
    prefix: str,
    concurrency: int,
    stop: asyncio.Event,
    via_edge: bool = True,
    timeout: float = 30.0,
) -> Ledger:
    """`concurrency` keep-alive callers, one request at a time each, until `stop`; a new
    connection whenever one is closed. A request without an HTTP answer is never resent."""
    ledger = Ledger()

    async def caller(index: int) -> None:
        connection: Connection | None = None
        sequence = 0
        while not stop.is_set():
            request_id = f"{prefix}-{index}-{sequence}"
            sequence += 1
            ledger.sent.append(request_id)
            try:
                if connection is None or connection.closed:
                    connection = await Connection.open(target)
                ledger.record(
                    request_id,
                    await connection.exchange(decide(target, request_id), timeout),
                    via_edge,
                )
            except ERRORS as error:
                ledger.errors[type(error).__name__] += 1
                if connection is not None:
                    await connection.close()
                connection = None
        if connection is not None:
            await connection.close()

    await asyncio.gather(*(caller(k) for k in range(concurrency)))
    return ledger


async def in_progress(target: Target) -> int:
    return (await call(target, "GET", "/health", timeout=5.0)).json()["in_progress"]


async def until_in_progress(target: Target, count: int, timeout: float = 10.0) -> None:
    """Poll /health until `count` POSTs are in progress (the queue is as full as we want)."""
    deadline = time.monotonic() + timeout
    while await in_progress(target) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target.url} never reached {count} in progress")
        await asyncio.sleep(0.02)


def served(nginx: edge.Nginx, prefix: str) -> list[edge.Logged]:
    """Access-log lines of the requests whose id starts with `prefix`."""
    return [
        line for line in edge.parse_log(nginx.log_lines()) if line.request_id.startswith(prefix)
    ]


def flush_log(
    nginx: edge.Nginx, prefix: str, expected: int, timeout: float = 5.0
) -> list[edge.Logged]:
    """nginx writes a log line after the response; wait until all `expected` are there."""
    deadline = time.monotonic() + timeout
    while len(lines := served(nginx, prefix)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return lines


# -- the scenarios (each takes running replicas and nginx) -------------------------------------


def spread(
    replicas: list[edge.Replica], nginx: edge.Nginx, concurrency: int, duration: float
) -> dict[str, Any]:
    """Closed-loop load through nginx; how many requests each replica answered."""

    async def run() -> Ledger:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(duration, stop.set)
        return await closed_loop(nginx.target, "spread", concurrency, stop)

    ledger = run_async(run())
    logged = flush_log(nginx, "spread", len(ledger.sent))
    per_replica = Counter(line.served_by for line in logged if line.status == 200)
    return {
        "concurrency": concurrency,
        "duration_s": duration,
        **ledger.summary(),
        "per_replica": [per_replica[r.address] for r in replicas],
    }


def full_queues(replicas: list[edge.Replica], nginx: edge.Nginx, queue: int) -> dict[str, Any]:
    """Fill the first two replicas' queues directly; `queue` requests through nginx meanwhile."""
    full, free = replicas[:2], replicas[2]

    async def run() -> tuple[Ledger, Ledger]:
        fillers = Ledger()
        filling = [
            asyncio.create_task(_one(r.target, f"fill{i}-{k}", fillers, False, 60.0))
            for i, r in enumerate(full)
            for k in range(queue)
        ]
        for replica in full:
            await until_in_progress(replica.target, queue)
        through = await burst(nginx.target, "routed", queue, via_edge=True)
        await asyncio.gather(*filling)
        return fillers, through

    fillers, through = run_async(run())
    logged = flush_log(nginx, "routed", len(through.sent))
    return {
        "queue": queue,
        "fillers": fillers.summary(),
        "through_nginx": through.summary(),
        "served_by_free_replica": sum(
            1 for line in logged if line.served_by == free.address and line.status == 200
        ),
        "tried_full_first": sum(1 for line in logged if len(line.tried) > 1),
    }


def burst_429s(replicas: list[edge.Replica], nginx: edge.Nginx, offered: int) -> dict[str, Any]:
    """The same burst against one replica directly and against nginx over all of them."""
    direct = run_async(burst(replicas[0].target, "direct-burst", offered, via_edge=False))
    run_async(_idle(replicas))
    behind = run_async(burst(nginx.target, "edge-burst", offered, via_edge=True))
    return {
        "offered": offered,
        "replicas_behind_nginx": len(replicas),
        "direct_one_replica": direct.summary(),
        "nginx": behind.summary(),
    }


async def _idle(replicas: list[edge.Replica], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for replica in replicas:
        while await in_progress(replica.target) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)


def rolling_restart(
    replicas: list[edge.Replica], nginx: edge.Nginx, concurrency: int, pause: float
) -> dict[str, Any]:
    """Load through nginx while each replica in turn is SIGTERMed, exits, and starts again."""
    timeline: list[dict[str, Any]] = []

    def restart_each() -> None:
        started = time.monotonic()
        time.sleep(min(pause, 0.5))  # load first reaches every replica
        for replica in replicas:
            mark = time.monotonic()
            replica.stop()
            stopped = time.monotonic()
            replica.start()
            timeline.append(
                {
                    "replica": replica.address,
                    "drain_and_exit_s": round(stopped - mark, 3),
                    "start_to_ready_s": round(time.monotonic() - stopped, 3),
                    "at_s": round(mark - started, 3),
                }
            )
            time.sleep(pause)

    async def run() -> Ledger:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        restarts = loop.run_in_executor(None, restart_each)
        load = asyncio.ensure_future(closed_loop(nginx.target, "rolling", concurrency, stop))
        try:
            await restarts
        finally:
            stop.set()
        return await load

    began = time.monotonic()
    ledger = run_async(run())
    wall = time.monotonic() - began
    logged = flush_log(nginx, "rolling", len(ledger.sent))
    return {
        "concurrency": concurrency,
        "pause_s": pause,
        "wall_s": round(wall, 2),
        **ledger.summary(),
        "retried_by_nginx": sum(1 for line in logged if len(line.tried) > 1),
        "retry_reasons": dict(Counter(s for line in logged for s in line.statuses[:-1])),
        "restarts": timeline,
    }


def kill_mid_request(
    replicas: list[edge.Replica], nginx: edge.Nginx | None, per_replica: int, delay_s: float
) -> dict[str, Any]:
    """SIGKILL the first replica while requests are in flight on it (through nginx, or direct).

    Through nginx, `per_replica` x N requests are spread over N replicas; direct, the
    victim alone gets `per_replica`. The victim is killed once its /health shows them
    in progress, and started again afterwards.
    """
    victim = replicas[0]
    target = nginx.target if nginx is not None else victim.target
    count = per_replica * (len(replicas) if nginx is not None else 1)
    prefix = "kill-edge" if nginx is not None else "kill-direct"

    async def run() -> tuple[Ledger, int]:
        sending = asyncio.ensure_future(
            burst(target, prefix, count, via_edge=nginx is not None, timeout=delay_s * count + 10)
        )
        deadline = time.monotonic() + 10.0
        while await in_progress(victim.target) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(delay_s / 4)  # the first call is well inside the scorer
        busy = await in_progress(victim.target)
        await asyncio.get_running_loop().run_in_executor(None, victim.kill)
        return await sending, busy

    ledger, busy = run_async(run())
    victim.start()
    result: dict[str, Any] = {
        "via": "nginx" if nginx else "direct",
        "requests": count,
        "in_progress_on_victim_at_kill": busy,
        **ledger.summary(),
    }
    if nginx is not None:
        logged = flush_log(nginx, prefix, count)
        cut = [
            line
            for line in logged
            if line.tried and line.tried[0] == victim.address and len(line.tried) > 1
        ]
        result.update(
            {
                "cut_on_victim_and_retried": len(cut),
                "retried_then_200": sum(1 for line in cut if line.status == 200),
                "retry_reasons": dict(Counter(line.statuses[0] for line in cut)),
            }
        )
    return result


def throughput(
    env_delay: dict[str, str],
    token: str,
    log_dir: Path,
    counts: list[int],
    concurrency: int,
    duration: float,
    rounds: int,
) -> dict[str, Any]:
    """rps with 1..N replicas behind nginx and one direct; rounds alternate the order."""

    def requests(target):
        return [encode(target, "POST", "/decide", datasets.first_with(2))]

    cells: dict[str, list[dict[str, Any]]] = {}
    with edge.fleet(max(counts), env_delay, token, log_dir) as replicas:
        for round_ in range(rounds):
            order = ["direct-1", *(f"nginx-{n}" for n in counts)]
            for name in order if round_ % 2 == 0 else order[::-1]:
                if name == "direct-1":
                    target = replicas[0].target
                    tally = asyncio.run(drive(target, requests(target), concurrency, duration))
                else:
                    with edge.nginx(replicas[: int(name.split("-")[1])], token) as front:
                        tally = asyncio.run(
                            drive(front.target, requests(front.target), concurrency, duration)
                        )
                cells.setdefault(name, []).append(tally.summary())
    return {name: _pool(samples) for name, samples in cells.items()}


def _pool(samples: list[dict[str, Any]]) -> dict[str, Any]:
    rps = sorted(s["rps"] for s in samples)
    return {
        "rps_median": rps[len(rps) // 2],
        "rps_rounds": [s["rps"] for s in samples],
        "p50_ms_median": sorted(s["p50_ms"] for s in samples)[len(samples) // 2],
        "p99_ms_median": sorted(s["p99_ms"] for s in samples)[len(samples) // 2],
        "non_200": sum(n for s in samples for k, n in s["statuses"].items() if k != "200"),
        "lost": sum(s["lost"] for s in samples),
        "client_cpu_share": max(s["client_cpu_share"] for s in samples),
    }


def proxy_cost(direct: list[float], behind: list[float]) -> dict[str, Any]:
    """nginx-1 rps over direct-1 rps, round by round (each pair measured back to back)."""
    ratios = sorted(b / d for d, b in zip(direct, behind) if d)
    return {
        "ratio_median": round(ratios[len(ratios) // 2], 3),
        "ratio_min": round(ratios[0], 3),
        "ratio_max": round(ratios[-1], 3),
        "rounds": len(ratios),
    }


def run_async(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- the bench ----------------------------------------------------------------------------------


def conditions() -> dict[str, Any]:
    """Where and under what load the numbers were taken."""
    return {
        **machine(),
        "loadavg_before": os.getloadavg(),
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
        "nginx_workers": 1,
        "nginx": edge.nginx_binary(),
        "note": "2-core machine shared with other engineers; measured under load",
    }


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    token = procs.token()
    log_dir = Path(tempfile.mkdtemp(prefix="semif-scale-"))
    results: dict[str, Any] = {"conditions": conditions()}
    env = procs.stub_env(args.delay_ms, args.queue)
    with edge.fleet(3, env, token, log_dir) as replicas, edge.nginx(replicas, token) as front:
        note("scale: spread")
        results["spread"] = spread(replicas, front, args.concurrency, args.duration)
        note("scale: rolling restart")
        results["rolling_restart"] = rolling_restart(replicas, front, args.concurrency, args.pause)
    # Queues that stay full long enough to route around, and calls long enough to kill mid-way.
    slow = args.slow_delay_ms / 1000
    with (
        edge.fleet(3, procs.stub_env(args.slow_delay_ms, args.queue), token, log_dir) as replicas,
        edge.nginx(replicas, token) as front,
    ):
        note("scale: full queues")
        results["full_queues"] = full_queues(replicas, front, args.queue)
        note("scale: burst 429s")
        results["burst_429s"] = burst_429s(replicas, front, 3 * args.queue)
        note("scale: kill")
        results["kill"] = [
            kill_mid_request(replicas, front, 2, slow),
            kill_mid_request(replicas, None, 2, slow),
        ]
    note("scale: throughput")
    results["throughput_delay"] = throughput(
        procs.stub_env(args.delay_ms, 64),
        token,
        log_dir,
        [1, 2, 3],
        args.concurrency,
        args.duration,
        args.rounds,
    )
    results["throughput_no_delay"] = throughput(
        procs.stub_env(0, 64), token, log_dir, [1], args.concurrency, args.duration, args.rounds
    )
    bare = results["throughput_no_delay"]
    results["proxy_cost_no_delay"] = proxy_cost(
        bare["direct-1"]["rps_rounds"], bare["nginx-1"]["rps_rounds"]
    )
    results["conditions"]["loadavg_after"] = os.getloadavg()
    return results


def markdown(results: dict[str, Any]) -> str:
    c = results["conditions"]
    lines = [
        "## Scaling out: stub replicas behind nginx (`python -m bench scale`)",
        "",
        f"{c['date']}, nproc {c['nproc']}, load average before {tuple(round(x, 2) for x in c['loadavg_before'])} "
        f"and after {tuple(round(x, 2) for x in c['loadavg_after'])}, one nginx worker, stub replicas "
        f"(SEMIF_SCORER=stub), threads {c['threads']}. {c['note']}.",
        "",
    ]
    s = results["spread"]
    lines += [
        f"**Spread** ({s['concurrency']} callers, {s['duration_s']} s): requests per replica "
        f"{s['per_replica']}; {s['client_visible_failures']} failures of {s['sent']}.",
        "",
    ]
    f = results["full_queues"]
    lines += [
        f"**Two full queues** (SEMIF_MAX_QUEUE={f['queue']} filled directly on two replicas): "
        f"{f['through_nginx']['statuses']} through nginx, {f['served_by_free_replica']} of "
        f"{f['through_nginx']['sent']} answered by the third, {f['tried_full_first']} after nginx tried a full one.",
        "",
    ]
    b = results["burst_429s"]
    lines += [
        markdown_table(
            ("same burst of " + str(b["offered"]), "statuses", "no answer"),
            [
                (
                    "one replica, direct",
                    b["direct_one_replica"]["statuses"],
                    b["direct_one_replica"]["errors"] or 0,
                ),
                (
                    f"nginx over {b['replicas_behind_nginx']}",
                    b["nginx"]["statuses"],
                    b["nginx"]["errors"] or 0,
                ),
            ],
        ),
        "",
    ]
    r = results["rolling_restart"]
    lines += [
        f"**Rolling restart** ({r['concurrency']} callers, each replica SIGTERMed and started again in turn, "
        f"{r['wall_s']} s): {r['sent']} requests, {r['unanswered']} unanswered, {r['answered_twice']} answered twice, "
        f"{r['mismatched']} mismatched, statuses {r['statuses']}, errors {r['errors'] or 0}: "
        f"**{r['client_visible_failures']} client-visible failures**; nginx retried {r['retried_by_nginx']} "
        f"(upstream statuses {r['retry_reasons']}).",
        "",
    ]
    rows = []
    for k in results["kill"]:
        saved = (
            f"{k.get('retried_then_200', '-')} of {k.get('cut_on_victim_and_retried', '-')}"
            if k["via"] == "nginx"
            else "-"
        )
        rows.append(
            (
                k["via"],
                k["requests"],
                k["in_progress_on_victim_at_kill"],
                k["statuses"],
                k["errors"] or 0,
                saved,
            )
        )
    lines += [
        markdown_table(
            (
                "SIGKILL one replica mid-request",
                "requests",
                "in progress on it",
                "statuses",
                "no answer",
                "cut and retried → 200",
            ),
            rows,
        ),
        "",
    ]
    rows = [
        (name, v["rps_median"], v["p50_ms_median"], v["p99_ms_median"], v["non_200"] + v["lost"])
        for name, v in results["throughput_delay"].items()
    ]
    rows += [
        (
            f"{name} (no delay)",
            v["rps_median"],
            v["p50_ms_median"],
            v["p99_ms_median"],
            v["non_200"] + v["lost"],
        )
        for name, v in results["throughput_no_delay"].items()
    ]
    lines += [
        markdown_table(
            ("throughput", "rps (median of rounds)", "p50 ms", "p99 ms", "failures"), rows
        ),
        "",
    ]
    cost = results["proxy_cost_no_delay"]
    lines += [
        f"**What the proxy costs** (no delay, CPU-bound: nginx, the replica and the load generator share "
        f"{c['nproc']} cores): one replica behind nginx serves {cost['ratio_median']}x the requests per second "
        f"of the same replica direct (per-round range {cost['ratio_min']}-{cost['ratio_max']}, "
        f"{cost['rounds']} rounds). With the delay standing in for a card: "
        f"{results['throughput_delay']['nginx-1']['rps_median']} rps behind nginx against "
        f"{results['throughput_delay']['direct-1']['rps_median']} direct.",
        "",
    ]
    return "\n".join(lines)


def write_markdown(path: Path, section: str) -> None:
    """Replace this bench's section of RESULTS.md (from its heading to the next `## `), or append it."""
    text = path.read_text() if path.exists() else ""
    heading = section.splitlines()[0]
    start = text.find(heading)
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = text.find("\n## ", start + len(heading))
    path.write_text(text[:start] + section + (text[end + 1 :] if end >= 0 else ""))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__.splitlines()[0])
    p.add_argument(
        "--delay-ms",
        type=int,
        default=20,
        help="stub delay per call, standing in for a card (default 20)",
    )
    p.add_argument("--queue", type=int, default=8, help="SEMIF_MAX_QUEUE per replica (default 8)")
    p.add_argument("--concurrency", type=int, default=12, help="closed-loop callers (default 12)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per load cell (default 3)")
    p.add_argument(
        "--rounds", type=int, default=5, help="throughput rounds, order flipped each (default 5)"
    )
    p.add_argument(
        "--pause",
        type=float,
        default=2.0,
        help="seconds between a replica ready and the next SIGTERM; must exceed nginx's fail_timeout (default 2)",
    )
    p.add_argument(
        "--slow-delay-ms",
        type=int,
        default=500,
        help="stub delay for the full-queue, burst and kill scenarios (default 500)",
    )
    p.add_argument("--out", type=Path, default=HERE / "results" / "scale.json")
    p.add_argument("--md", type=Path, default=HERE / "RESULTS.md")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if edge.nginx_binary() is None:
        note("nginx not found: apt-get install nginx (or set SEMIF_NGINX)")
        return 2
    results = run_all(args)
    write_json(args.out, results)
    section = markdown(results)
    write_markdown(args.md, section)
    print(section)
    r = results["rolling_restart"]
    return (
        0
        if r["client_visible_failures"] == 0 and r["unanswered"] == 0 and r["answered_twice"] == 0
        else 1
    )
