"""Load and overhead benchmarks: `python -m bench load` runs them all, one server at a time.

* overhead: the stub with no delay, ours against FastAPI + uvicorn[standard] (bench/load/baseline_fastapi.py)
  twice, with uvicorn's default access log (`baseline_logged`) and without one (`baseline`; bench/load/peers.py),
  ours three times: metrics and the JSON access log on (as deployed), metrics only, both off,
  requests per second and p50/p99 for /health, /decide (2 and 16 options) and
  /decide/shared (21 decisions) at each concurrency, through the same load generator;
  both servers stay up and each cell alternates between them (ours, baseline, baseline,
  ours, ...), so drift on a shared 2-core machine hits both alike.
* admission: the stub with a delay, a burst of 3 x SEMIF_MAX_QUEUE requests: exactly
  SEMIF_MAX_QUEUE in progress (sampled on /health), the rest 429 in well under the delay,
  every request answered exactly once.
* tiny: the tiny model, served /decide/shared (21 criteria) against an in-process
  `score_shared` on the same rows, and order averaging in one request against separate calls.
* small (only with `--only small`: minutes per repetition): the same for SmolLM2-135M-Instruct,
  plus the 21 criteria as 21 separate /decide calls, at `--threads` OMP threads on both sides.

These are benchmarks, not timed tests: targets are compared as ratios from one run
and reported, met or missed, in bench/RESULTS.md (markdown) and a JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.common import datasets, procs
from bench.common.loadgen import Connection, Response, Tally, Target, call, drive, encode, median, spread
from bench.common.report import machine, markdown_table, note, section, splice, write_json
from bench.load import peers

HERE = Path(__file__).resolve().parents[1]  # bench/
ENDPOINTS = ("health", "decide-2", "decide-16", "shared-21")
OVERHEAD_TARGET, OVERHEAD_AIM, TINY_TARGET, SMALL_TARGET = 1.0, 1.5, 1.10, 1.05
STUB = {"SEMIF_SCORER": "stub", "SEMIF_STUB_DELAY_MS": "0", "SEMIF_MAX_QUEUE": "64"}
# Ours as the Containerfile deploys it (metrics, JSON access log) and with both off.
OPS_ON = {"SEMIF_METRICS": "on", "SEMIF_ACCESS_LOG": "on", "SEMIF_LOG_FORMAT": "json"}
OPS_METRICS = {"SEMIF_METRICS": "on", "SEMIF_ACCESS_LOG": "off", "SEMIF_LOG_FORMAT": "json"}
OPS_OFF = {"SEMIF_METRICS": "off", "SEMIF_ACCESS_LOG": "off", "SEMIF_LOG_FORMAT": "json"}
VARIANTS = {"ours": OPS_ON, "ours_metrics": OPS_METRICS, "ours_off": OPS_OFF}
OPS_COST_LIMIT = 0.05  # metrics may cost at most 5% of throughput


# -- request sets --------------------------------------------------------------------


def sixteen_options() -> datasets.Row:
    """A 16-option row (SemIf's maximum), built from the first row's state."""
    base = datasets.rows()[0]
    options = [{"id": f"o{k:02d}", "description": f"Option number {k}"} for k in range(16)]
    return {"id": "sixteen", "state": base["state"], "question": "Which option fits best?", "options": options}


def first_with(count: int) -> datasets.Row:
    """The first bench row with `count` options."""
    return next(row for row in datasets.rows() if len(row["options"]) == count)


def endpoint_requests(target: Target) -> dict[str, list[bytes]]:
    """Each load cell's request, rendered once."""
    spec = datasets.load_json(datasets.SPEED21)
    return {
        "health": [encode(target, "GET", "/health")],
        "decide-2": [encode(target, "POST", "/decide", first_with(2))],
        "decide-16": [encode(target, "POST", "/decide", sixteen_options())],
        "shared-21": [encode(target, "POST", "/decide/shared", datasets.shared_body(spec["state"], spec["decisions"]))],
    }


# -- overhead: ours against FastAPI + uvicorn ---------------------------------------------


def uvicorn_stack() -> dict[str, str]:
    """What uvicorn's `auto` picks in this environment (it imports uvloop/httptools when present)."""
    from importlib.metadata import version

    has = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    return {"loop": "uvloop" if has("uvloop") else "asyncio", "http": "httptools" if has("httptools") else "h11",
            "uvicorn": version("uvicorn"), "fastapi": version("fastapi")}


def ours_stack() -> dict[str, Any]:
    """The event loop and access-log flush our servers run with here (SEMIF_EVENT_LOOP=auto picks
    uvloop when installed, as the bench extra's uvicorn[standard] installs it)."""
    from semif_serve import config

    env = {name: os.environ[name] for name in ("SEMIF_EVENT_LOOP", "SEMIF_LOG_FLUSH_S") if name in os.environ}
    settings = config.load({"SEMIF_API_TOKEN": "x" * config.MIN_TOKEN_LENGTH, **env})
    return {"event_loop": settings.event_loop, "log_flush_s": settings.log_flush_s}


def ours_words(ours: dict[str, Any] | None) -> str:
    """One sentence naming our loop and log flush, for the reports."""
    if not ours:
        return ""
    return (f"Ours runs on event loop `{ours['event_loop']}` (HTTP parsing h11's), access lines buffered and "
            f"flushed every {ours['log_flush_s']:g} s (`SEMIF_LOG_FLUSH_S`). ")


def merge(tallies: list[Tally]) -> Tally:
    """One tally from rounds of the same cell: counts, CPU and latencies pooled, walls added."""
    merged = Tally()
    for tally in tallies:
        merged.sent += tally.sent
        merged.answered += tally.answered
        merged.lost += tally.lost
        merged.duplicates += tally.duplicates
        merged.statuses.update(tally.statuses)
        merged.latencies += tally.latencies
        merged.wall += tally.wall
        merged.client_cpu += tally.client_cpu
    merged.server_cpu = sum(tally.server_cpu for tally in tallies)
    return merged


async def _paired(servers: dict[str, procs.Running], concurrency: list[int], duration: float,
                  rounds: int) -> dict[str, dict[str, list[Tally]]]:
    """Every cell on every server, round by round, the order flipping each round (ABBA...)."""
    requests = {name: endpoint_requests(server.target) for name, server in servers.items()}
    cells: dict[str, dict[str, list[Tally]]] = {}
    names = list(servers)
    for endpoint in ENDPOINTS:
        for conns in concurrency:
            key = f"{endpoint}@{conns}"
            note(f"load overhead: {key}, {rounds} rounds x {duration:g} s on each server")
            cells[key] = {name: [] for name in names}
            for index in range(rounds):
                for name in names if index % 2 == 0 else names[::-1]:
                    server = servers[name]
                    cells[key][name].append(await drive(server.target, requests[name][endpoint], conns, duration,
                                                        server_cpu=server.cpu_seconds))
    return cells


def _ratio(rounds: dict[str, list[Tally]], top: str, bottom: str) -> tuple[float | None, list[float] | None]:
    """Pooled rps ratio of two servers in one cell, and the range of its per-round ratios."""
    a, b = merge(rounds[top]), merge(rounds[bottom])
    per_round = [x.rps / y.rps for x, y in zip(rounds[top], rounds[bottom]) if y.rps]
    return (round(a.rps / b.rps, 3) if b.rps else None,
            [round(min(per_round), 3), round(max(per_round), 3)] if per_round else None)


def _cell(rounds: dict[str, list[Tally]]) -> dict[str, Any]:
    """Pooled figures per server, the pooled ratios and the range of per-round ratios."""
    ratio, ratio_range = _ratio(rounds, "ours", "baseline")
    cell = {"ours": merge(rounds["ours"]).summary(), "baseline": merge(rounds["baseline"]).summary(),
            "ratio": ratio, "ratio_range": ratio_range}
    if "ours_off" in rounds:  # ours with metrics only and with both off, side by side
        cell["ours_off"] = merge(rounds["ours_off"]).summary()
        cell["ours_metrics"] = merge(rounds["ours_metrics"]).summary()
        cell["off_ratio"], cell["off_ratio_range"] = _ratio(rounds, "ours_off", "baseline")
        cell["metrics_ratio"], cell["metrics_ratio_range"] = _ratio(rounds, "ours_metrics", "ours_off")
        cell["ops_ratio"], cell["ops_ratio_range"] = _ratio(rounds, "ours", "ours_off")
    if "baseline_logged" in rounds:  # the like-for-like peer: uvicorn with its default access log
        cell["baseline_logged"] = merge(rounds["baseline_logged"]).summary()
        cell["logged_ratio"], cell["logged_ratio_range"] = _ratio(rounds, "ours", "baseline_logged")
    return cell


def overhead(args: argparse.Namespace, token: str) -> dict[str, Any]:
    """Both servers up at once (the idle one costs nothing), measured in alternation per cell."""
    load_before = os.getloadavg()
    floor = asyncio.run(service_floor())
    with contextlib.ExitStack() as stack:
        servers = peers.start(stack, token, STUB, VARIANTS)
        cells = asyncio.run(_paired(servers, args.concurrency, args.duration, args.rounds))
    return {"cells": {key: _cell(rounds) for key, rounds in cells.items()}, "uvicorn": uvicorn_stack(),
            "ours": ours_stack(), "shared_work_us_per_request": floor,
            "rounds": args.rounds, "duration_s": args.duration, "concurrency": args.concurrency,
            "loadavg_before_after": [load_before[0], os.getloadavg()[0]],
            "profile": profile(args, token) if args.profile else None}


async def service_floor(repeats: int = 200, batches: int = 5) -> dict[str, float]:
    """CPU per request of the work both servers share, without HTTP: `Service.post` over the stub.

    Both servers run exactly this code behind their HTTP stack (same Service, same Engine
    thread, same StubScorer), so it bounds how far apart their per-request costs can be.
    The minimum over batches: on a shared VM, CPU time inflates under contention.
    """
    from semif_serve.config import Settings
    from semif_serve.engine import Engine
    from semif_serve.service import Service
    from semif_serve.stub import StubScorer

    settings = Settings(api_token="-" * 32, scorer="stub")
    engine = Engine(StubScorer(settings))
    await engine.start()
    service = Service(settings, engine)
    spec = datasets.load_json(datasets.SPEED21)
    bodies = {"decide-2": ("decide", first_with(2)), "decide-16": ("decide", sixteen_options()),
              "shared-21": ("shared", datasets.shared_body(spec["state"], spec["decisions"]))}
    floor = {}
    try:
        for endpoint, (name, payload) in bodies.items():
            body = json.dumps(payload).encode()
            await service.post(name, body)
            costs = []
            for _ in range(batches):
                started = time.process_time()
                for _ in range(repeats):
                    await service.post(name, body)
                costs.append((time.process_time() - started) / repeats)
            floor[endpoint] = round(min(costs) * 1e6, 1)
    finally:
        engine.close()
    return floor


def profile(args: argparse.Namespace, token: str) -> dict[str, Any]:
    """Our server's event-loop thread under cProfile while loaded (a separate, unmeasured run)."""
    path = Path(tempfile.mkdtemp(prefix="semif-profile-")) / "server.prof"
    with procs.semif_serve({**STUB, **OPS_ON}, token, profile=path) as server:
        note("load overhead: profiling our server under /decide-2 and shared-21 at 32 connections")
        requests = endpoint_requests(server.target)
        for endpoint in ("decide-2", "shared-21"):
            asyncio.run(drive(server.target, requests[endpoint], 32, args.duration))
    stats = pstats.Stats(str(path))
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(filename).name}:{line}({function})", "calls": calls,
                     "own_s": round(own, 4), "cumulative_s": round(cumulative, 4)})
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return {"file": str(path), "total_s": round(total, 3), "top_own_time": rows[:25]}


# -- admission: 429 past SEMIF_MAX_QUEUE ----------------------------------------------------


async def _exchange(connection: Connection, raw: bytes, timeout: float) -> Response | None:
    try:
        return await connection.exchange(raw, timeout)
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
        return None


async def _sample_health(target: Target, stop: asyncio.Event, samples: list[dict[str, Any]]) -> None:
    """/health every 10 ms until stop: in_progress and max_queue while the burst is in flight."""
    connection = await Connection.open(target)
    try:
        while not stop.is_set():
            health = (await connection.request(target, "GET", "/health", timeout=5.0)).json()
            samples.append({"in_progress": health["in_progress"], "max_queue": health["max_queue"]})
            try:
                async with asyncio.timeout(0.01):
                    await stop.wait()
            except TimeoutError:
                pass
    finally:
        await connection.close()


async def burst(target: Target, queue: int, offered: int, delay: float) -> dict[str, Any]:
    """`offered` simultaneous /decide calls, one per connection, each with its own id."""
    row = first_with(2)
    payloads = [encode(target, "POST", "/decide", {**row, "id": f"burst-{k}"}) for k in range(offered)]
    connections = await asyncio.gather(*(Connection.open(target) for _ in range(offered)))
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_health(target, stop, samples))
    try:
        await asyncio.sleep(0.05)  # a first sample before the burst
        timeout = queue * delay + 10.0
        responses = await asyncio.gather(*(_exchange(c, p, timeout) for c, p in zip(connections, payloads)))
        strays = await asyncio.gather(*(c.stray_bytes() for c in connections))
    finally:
        stop.set()
        await sampler
        await asyncio.gather(*(c.close() for c in connections))
    idle = (await call(target, "GET", "/health")).json()["in_progress"]
    return admission_figures(queue, offered, delay, responses, samples, sum(1 for s in strays if s), idle)


def admission_figures(queue: int, offered: int, delay: float, responses: list[Response | None],
                      samples: list[dict[str, Any]], strays: int, idle: int) -> dict[str, Any]:
    """Judge the burst: exact counts, fast refusals, one answer per request."""
    answered = [r for r in responses if r is not None]
    ok = [r for r in answered if r.status == 200]
    refused = [r for r in answered if r.status == 429]
    ok_ids = [r.json()["id"] for r in ok]
    refusal_max = max((r.latency for r in refused), default=0.0)
    peak = max((s["in_progress"] for s in samples), default=0)
    checks = {
        "max_queue_reported": all(s["max_queue"] == queue for s in samples),
        "peak_in_progress_is_max_queue": peak == queue,
        "admitted_is_max_queue": len(ok) == queue,
        "rest_refused_429": len(refused) == offered - queue,
        "refusals_well_under_delay": refusal_max < delay / 4,
        "none_lost": len(answered) == offered,
        "none_answered_twice": strays == 0 and len(set(ok_ids)) == len(ok_ids),
        "idle_after": idle == 0,
    }
    return {"max_queue": queue, "offered": offered, "delay_s": delay, "answered": len(answered), "ok_200": len(ok),
            "refused_429": len(refused), "other": len(answered) - len(ok) - len(refused),
            "refusal_latency_max_s": refusal_max, "refusal_latency_p50_s": median([r.latency for r in refused]),
            "peak_in_progress": peak, "health_samples": len(samples), "in_progress_after": idle,
            "checks": checks, "passed": all(checks.values())}


def admission(args: argparse.Namespace, token: str) -> dict[str, Any]:
    env = {**STUB, "SEMIF_STUB_DELAY_MS": str(args.delay_ms), "SEMIF_MAX_QUEUE": str(args.queue)}
    with procs.semif_serve(env, token) as server:
        note(f"load admission: burst of {3 * args.queue} against SEMIF_MAX_QUEUE={args.queue}, delay {args.delay_ms} ms")
        return asyncio.run(burst(server.target, args.queue, 3 * args.queue, args.delay_ms / 1000))


# -- tiny model: served against in-process -------------------------------------------------


async def _timed(connection: Connection, target: Target, path: str, payload: Any) -> float:
    response = await connection.request(target, "POST", path, payload, timeout=120.0)
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {response.body[:300]!r}")
    return response.latency


async def _against_inprocess(target: Target, repeats: int, sizes: tuple[int, ...], per_decision: bool,
                             label: str) -> dict[str, Any]:
    """Served /decide/shared (21 criteria) against in-process score_shared on the same rows, interleaved;
    optionally the same 21 criteria as 21 /decide calls; then rotations for each option count in sizes."""
    from bench.common import inprocess

    health = (await call(target, "GET", "/health")).json()
    loaded = inprocess.load(inprocess.Facts.from_health(health))
    spec = datasets.load_json(datasets.SPEED21)
    body, rows = datasets.shared_body(spec["state"], spec["decisions"]), datasets.with_state(spec["state"], spec["decisions"])
    connection = await Connection.open(target)
    try:
        await _timed(connection, target, "/decide/shared", body)  # warm-up, not counted
        inprocess.time_shared(loaded, rows, 1)
        served, local, separate = [], [], []
        for rep in range(repeats):  # interleaved, so drift hits all alike
            served.append(await _timed(connection, target, "/decide/shared", body))
            local += inprocess.time_shared(loaded, rows, 1)
            if per_decision:
                started = time.perf_counter()
                for row in rows:
                    await _timed(connection, target, "/decide", row)
                separate.append(time.perf_counter() - started)
            if rep % 5 == 4 or per_decision:
                note(f"load {label}: shared {rep + 1}/{repeats}")
        averaging = {f"{k}-options": await _rotations(connection, target, first_with(k), repeats) for k in sizes}
    finally:
        await connection.close()
    shared21 = {"served_s": spread(served), "inprocess_s": spread(local), "ratio": median(served) / median(local)}
    if per_decision:
        shared21 |= {"per_decision_s": spread(separate), "per_decision_ratio": median(separate) / median(served)}
    return {"model": health["model"], "revision": health["revision"], "device": health["device"],
            "shared21": shared21, "rotations": averaging, "repeats": repeats}


async def _tiny(target: Target, repeats: int) -> dict[str, Any]:
    return await _against_inprocess(target, repeats, (4, 3), per_decision=False, label="tiny") | {
        "shared21_target": TINY_TARGET}


async def _rotations(connection: Connection, target: Target, row: datasets.Row, repeats: int) -> dict[str, Any]:
    """n rotations in one /decide (`orderings: rotations`) against n separate /decide calls."""
    count = len(row["options"])
    one, separate = [], []
    for _ in range(repeats):
        one.append(await _timed(connection, target, "/decide", {**row, "orderings": "rotations"}))
        started = time.perf_counter()
        for shift in range(count):
            await _timed(connection, target, "/decide", datasets.rotate(row, shift))
        separate.append(time.perf_counter() - started)
    return {"options": count, "rotations": count, "one_request_s": spread(one), "separate_calls_s": spread(separate),
            "speedup": median(separate) / median(one)}


def small(args: argparse.Namespace, token: str) -> dict[str, Any]:
    """SmolLM2-135M on the CPU, OMP_NUM_THREADS=args.threads for the server and this process alike."""
    note("load small: building (or finding) SmolLM2 with semif-serve small-model")
    settings = {**procs.small_model(args.small_dir), "OMP_NUM_THREADS": str(args.threads)}
    os.environ.update(settings)  # before this process first imports torch or transformers
    with procs.semif_serve(settings, token, ready_timeout=600.0) as server:
        result = asyncio.run(_against_inprocess(server.target, args.small_repeats, (3,), per_decision=True, label="small"))
    import torch  # loaded by the in-process side: report what it actually used

    return result | {"shared21_target": SMALL_TARGET, "omp_num_threads": args.threads,
                     "torch_threads": torch.get_num_threads()}


def tiny(args: argparse.Namespace, token: str) -> dict[str, Any]:
    note(f"load tiny: building the tiny model in {args.tiny_dir}")
    # One torch thread in the server and here: on 2 cores the other is the client's.
    settings = {**procs.tiny_model(args.tiny_dir), "OMP_NUM_THREADS": "1"}
    os.environ.update(settings)  # before this process first imports torch or transformers
    with procs.semif_serve(settings, token, ready_timeout=180.0) as server:
        return asyncio.run(_tiny(server.target, args.repeats))


# -- reporting -----------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ms(summary: dict[str, Any]) -> str:
    return f"{summary['p50_ms']:.2f} / {summary['p99_ms']:.2f}"


def overhead_markdown(result: dict[str, Any]) -> list[str]:
    stack = result["uvicorn"]
    rows = []
    for key, cell in result["cells"].items():
        endpoint, conns = key.split("@")
        ours, base = cell["ours"], cell["baseline"]
        flag = "" if ours["lost"] == base["lost"] == 0 and set(ours["statuses"]) == set(base["statuses"]) == {"200"} else " (!)"
        low, high = cell["ratio_range"]
        logged = cell.get("baseline_logged")
        if logged is not None and (logged["lost"] or set(logged["statuses"]) != {"200"}):
            flag = " (!)"
        with_log = () if logged is None else (
            f"{logged['rps']:.0f}", f"**{cell['logged_ratio']:.2f}x** ({cell['logged_ratio_range'][0]:.2f} - "
            f"{cell['logged_ratio_range'][1]:.2f})", _us(logged["server_cpu_us_per_request"]))
        off = cell.get("ours_off")
        extra = () if off is None else (f"{off['rps']:.0f}", f"{cell['off_ratio']:.2f}x",
                                         f"{cell['metrics_ratio']:.3f} ({cell['metrics_ratio_range'][0]:.2f} - {cell['metrics_ratio_range'][1]:.2f})",
                                         f"{cell['ops_ratio']:.3f} ({cell['ops_ratio_range'][0]:.2f} - {cell['ops_ratio_range'][1]:.2f})")
        rows.append((endpoint, conns, f"{ours['rps']:.0f}", _ms(ours), f"{base['rps']:.0f}", _ms(base),
                     f"**{cell['ratio']:.2f}x**{flag}", f"{low:.2f} - {high:.2f}", *with_log, *extra,
                     f"{_us(ours['server_cpu_us_per_request'])} / {_us(base['server_cpu_us_per_request'])}",
                     f"{ours['client_cpu_share']:.2f} / {base['client_cpu_share']:.2f}"))
    has_off = any("ours_off" in cell for cell in result["cells"].values())
    log_headers = ("base-logged rps", "ours / base-logged (per-round)", "base-logged server CPU us/req") if any(
        "baseline_logged" in cell for cell in result["cells"].values()) else ()
    off_headers = ("ours ops-off rps", "ops-off / baseline", "metrics only / off (per-round)",
                   "metrics + log / off (per-round)") if has_off else ()
    table = markdown_table(("endpoint", "conns", "ours rps", "ours p50 / p99 ms", "baseline rps",
                            "baseline p50 / p99 ms", "ours / baseline", "per-round range", *log_headers, *off_headers,
                            "server CPU us/req (ours / base)", "load-gen CPU share (ours / base)"), rows)
    floor = ", ".join(f"{k} {v:.0f} us" for k, v in result["shared_work_us_per_request"].items())
    return [f"## HTTP overhead on the stub (no delay): ours vs FastAPI + uvicorn[standard]",
            "", f"Baseline: FastAPI {stack.get('fastapi', '?')} on one uvicorn {stack.get('uvicorn', '?')} worker; its `auto` "
            f"choice here is loop `{stack['loop']}`, HTTP `{stack['http']}`; \"baseline\" runs it with no access log "
            f"({peers.QUIET_FLAGS}), \"base-logged\" with {peers.LOGGED_FLAGS} (a text line per request, to a file), "
            f"the like-for-like peer of ours with its log on. {ours_words(result.get('ours'))}\"Ours\" runs as deployed, with metrics and "
            "the JSON access log on (`SEMIF_METRICS=on SEMIF_ACCESS_LOG=on SEMIF_LOG_FORMAT=json`, log to a file); "
            "\"ops-off\" is the same server with both off, and a third copy runs metrics only; the on / off columns are "
            "throughput ratios against ops-off (1.0 = free). "
            "The servers run at once (the idle one costs nothing) and each cell alternates between "
            f"them: {result['rounds']} rounds x {result['duration_s']:g} s per server, order flipped every round (ABBA). "
            "Keep-alive connections, one request in flight each; rps pooled over the rounds. Load average "
            f"{result['loadavg_before_after'][0]:.2f} before, {result['loadavg_before_after'][1]:.2f} after. "
            "Target: ratio >= 1.0 on /decide and /decide/shared at every concurrency, aim 1.5.",
            "", table, "",
            f"Work both servers share per request, measured in-process without HTTP (`Service.post` over the stub on "
            f"the engine thread; CPU time, the least of 5 batches): {floor}. Server CPU per request minus this is the HTTP stack's cost:", "",
            *stack_markdown(result), *profile_markdown(result.get("profile"))]


def stack_cpu(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per endpoint, over all its cells: each server's CPU per request beyond the shared work."""
    out = {}
    for endpoint, shared in result["shared_work_us_per_request"].items():
        cells = [c for k, c in result["cells"].items() if k.startswith(endpoint + "@")]
        mean = {side: sum(c[side]["server_cpu_us_per_request"] or 0.0 for c in cells) / len(cells)
                for side in ("ours", "baseline")}
        out[endpoint] = {"shared": shared, "ours_total": mean["ours"], "baseline_total": mean["baseline"],
                         "ours_http": mean["ours"] - shared, "baseline_http": mean["baseline"] - shared,
                         "ceiling": mean["baseline"] / shared}
    return out


def stack_markdown(result: dict[str, Any]) -> list[str]:
    rows = [(endpoint, f"{f['shared']:.0f}", f"{f['ours_http']:.0f}", f"{f['baseline_http']:.0f}",
             f"{f['ours_http'] / f['baseline_http']:.2f}" if f["baseline_http"] > 0 else "-", f"{f['ceiling']:.2f}x")
            for endpoint, f in stack_cpu(result).items()]
    return [markdown_table(("endpoint", "shared work us", "ours HTTP us", "baseline HTTP us", "ours / baseline HTTP",
                            "best ratio if ours' HTTP cost 0"), rows),
            "", "(CPU per request averaged over the concurrencies; the last column is baseline CPU / shared work, "
            "the throughput ratio a free HTTP stack would reach. Indicative: CPU time on this shared VM moves by "
            "about 20% from run to run.)", ""]


def profile_markdown(found: dict[str, Any] | None) -> list[str]:
    if not found:
        return []
    rows = [(r["function"], r["calls"], f"{r['own_s']:.3f}", f"{r['cumulative_s']:.3f}") for r in found["top_own_time"][:15]]
    return ["Our server's event-loop thread under cProfile (decide-2 then shared-21, 32 connections; a separate, "
            f"unmeasured run; {found['total_s']:.2f} s profiled):", "",
            markdown_table(("function", "calls", "own s", "cumulative s"), rows), ""]


def admission_markdown(result: dict[str, Any]) -> list[str]:
    rows = [(name, "yes" if ok else "NO") for name, ok in result["checks"].items()]
    head = (f"Burst of {result['offered']} /decide against SEMIF_MAX_QUEUE={result['max_queue']}, stub delay "
            f"{result['delay_s'] * 1000:.0f} ms: {result['ok_200']} answered 200, {result['refused_429']} refused 429 "
            f"(max {result['refusal_latency_max_s'] * 1000:.1f} ms, p50 {result['refusal_latency_p50_s'] * 1000:.1f} ms), "
            f"peak in_progress on /health {result['peak_in_progress']} over {result['health_samples']} samples.")
    return ["## Admission: 429 past SEMIF_MAX_QUEUE", "", head, "", markdown_table(("check", "holds"), rows), ""]


def _spread_row(what: str, seconds: dict[str, float]) -> tuple[str, str, str]:
    return what, f"{seconds['p50'] * 1e3:.1f}", f"{seconds['min'] * 1e3:.1f} - {seconds['max'] * 1e3:.1f}"


def small_markdown(result: dict[str, Any]) -> list[str]:
    shared = result["shared21"]
    notes = [f"/decide/shared x1 is {shared['per_decision_ratio']:.2f}x faster than /decide x21 (p50)",
             f"threads: OMP_NUM_THREADS={result['omp_num_threads']} for the server and the in-process side "
             f"(torch.get_num_threads() = {result['torch_threads']} in-process)"]
    return model_markdown(result, "SmolLM2-135M-Instruct", [_spread_row("/decide x21, same criteria, served",
                                                                      shared["per_decision_s"])], notes)


def tiny_markdown(result: dict[str, Any]) -> list[str]:
    return model_markdown(result, "Tiny model")


def model_markdown(result: dict[str, Any], title: str, extra_rows: list[tuple[str, str, str]] | None = None,
                   notes: list[str] | None = None) -> list[str]:
    shared = result["shared21"]
    rows = [_spread_row("/decide/shared, 21 criteria, served", shared["served_s"]),
            _spread_row("score_shared, same rows, in-process", shared["inprocess_s"]), *(extra_rows or [])]
    for name, rot in result["rotations"].items():
        rows.append(_spread_row(f"{name}: {rot['rotations']} rotations in one /decide", rot["one_request_s"]))
        rows.append(_spread_row(f"{name}: {rot['rotations']} separate /decide calls", rot["separate_calls_s"]))
    ratios = [f"served / in-process p50: **{shared['ratio']:.3f}x** (target <= {result['shared21_target']}x)"]
    ratios += [f"{name}: one request is {rot['speedup']:.2f}x faster than {rot['rotations']} separate calls"
               for name, rot in result["rotations"].items()]
    return [f"## {title} ({result['device']}): served against in-process", "",
            f"{result['model']}@{result['revision'][:12]}, N = {result['repeats']} each, interleaved.", "",
            markdown_table(("what", "p50 ms", "min - max ms"), rows), "", *[f"- {r}" for r in ratios + (notes or [])], ""]


TITLE = "# semif-serve benchmark results"


def markdown_sections(results: dict[str, Any]) -> dict[str, str]:
    """This bench's marked sections of RESULTS.md, by name: only these are rewritten (see `write_markdown`)."""
    info = results["machine"]
    sections = {"load-machine": "\n".join([
        f"Machine: `{info['uname_m']}`, {info['nproc']} CPUs, Python {info['python']}; run {info['date']} "
        f"with `python -m bench load`, load average {' / '.join(map(str, info.get('loadavg', [])))} (1/5/15 min) "
        f"when it began on this shared machine; thread settings {info.get('threads', {})}. The server under test runs as its own process; the load generator "
        "(bench/common/loadgen.py, asyncio over raw keep-alive sockets) is the same for both servers."])}
    for name, render in (("overhead", overhead_markdown), ("admission", admission_markdown), ("tiny", tiny_markdown),
                         ("small", small_markdown)):
        if name in results:
            sections[f"load-{name}"] = "\n".join(render(results[name]))
    sections["load-verdicts"] = "\n".join(["## Verdicts", "", *[f"- {v}" for v in results["verdicts"]]])
    return sections


def markdown(results: dict[str, Any]) -> str:
    """The whole report of one run, as printed on stdout."""
    return "\n\n".join([TITLE, *markdown_sections(results).values()]) + "\n"


def write_markdown(old: str, results: dict[str, Any]) -> str:
    """`old` with only this bench's marked sections replaced (appended when absent): the sections other
    benches and people own (wrk, ops-cost, scaling out, the weights check, real-model runs) stay as they are,
    and a section this run did not measure (`--only`) keeps its earlier figures and its verdicts."""
    text = old if old.strip() else TITLE + "\n"
    results = {**results, "verdicts": merged_verdicts(section(text, "load-verdicts") or "", results)}
    for name, body in markdown_sections(results).items():
        text = splice(text, name, body)
    return text


def merged_verdicts(old: str, results: dict[str, Any]) -> list[str]:
    """This run's verdicts, and the earlier ones (from the old section's lines) of each section it did not run,
    in section order. Every verdict line starts with its section's name and a colon, which is how it is found."""
    earlier: dict[str, list[str]] = {}
    for line in old.splitlines():
        name = line[2:].split(":", 1)[0] if line.startswith("- ") else ""
        if name in SECTIONS and name not in results:
            earlier.setdefault(name, []).append(line[2:])
    ours = {name: [v for v in results["verdicts"] if v.startswith(name + ":")] for name in SECTIONS}
    return [line for name in SECTIONS for line in (ours[name] if name in results else earlier.get(name, []))]


def verdicts(results: dict[str, Any]) -> list[str]:
    """Targets met or missed, stated plainly; each line starts with its section's name (see merged_verdicts)."""
    out = []
    if "overhead" in results:
        cells = {k: v for k, v in results["overhead"]["cells"].items() if not k.startswith("health")}
        worst_key, worst = min(cells.items(), key=lambda kv: kv[1]["ratio"])
        met = all(c["ratio"] >= OVERHEAD_TARGET for c in cells.values())
        aim = all(c["ratio"] >= OVERHEAD_AIM for c in cells.values())
        capped = [f"{endpoint} {f['ceiling']:.2f}x" for endpoint, f in stack_cpu(results["overhead"]).items()
                  if f["ceiling"] < OVERHEAD_AIM]
        every = results["overhead"]["cells"]
        low_key, low = min(every.items(), key=lambda kv: kv[1]["ratio"])
        out.append(f"overhead: with metrics and the access log on, ours >= baseline in every cell, /health included: "
                   f"{'MET' if all(c['ratio'] >= OVERHEAD_TARGET for c in every.values()) else 'MISSED'} "
                   f"(lowest {low['ratio']:.2f}x at {low_key})")
        if all("logged_ratio" in c for c in every.values()):
            logged_key, logged = min(every.items(), key=lambda kv: kv[1]["logged_ratio"])
            out.append(f"overhead: with metrics and the access log on, ours >= baseline_logged (uvicorn with its default access "
                       f"log, the like-for-like peer) in every cell: "
                       f"{'MET' if logged['logged_ratio'] >= OVERHEAD_TARGET else 'MISSED'} (lowest "
                       f"{logged['logged_ratio']:.2f}x at {logged_key}, per-round {logged['logged_ratio_range'][0]:.2f} - "
                       f"{logged['logged_ratio_range'][1]:.2f})")
        if all("ops_ratio" in c for c in every.values()):
            for key, what in (("metrics_ratio", "metrics"), ("ops_ratio", "metrics + JSON access log")):
                worst_cell, worst_value = min(every.items(), key=lambda kv: kv[1][key])
                verdict = "MET" if worst_value[key] >= 1 - OPS_COST_LIMIT else "MISSED"
                out.append(f"overhead: {what} cost <= {OPS_COST_LIMIT:.0%} of throughput in every cell"
                           f"{'' if what == 'metrics' else ' (the 5% budget is the metrics one; shown for the log)'}: "
                           f"{verdict} (worst {worst_value[key]:.3f} at {worst_cell}, per-round "
                           f"{worst_value[key + '_range'][0]:.2f} - {worst_value[key + '_range'][1]:.2f})")
        out.append(f"overhead: ours >= baseline on every /decide and /decide/shared cell: {'MET' if met else 'MISSED'} "
                   f"(lowest {worst['ratio']:.2f}x at {worst_key}, per-round {worst['ratio_range'][0]:.2f} - "
                   f"{worst['ratio_range'][1]:.2f}); aim 1.5x everywhere: {'met' if aim else 'not met'}"
                   + (f"; out of reach even with a free HTTP stack at {', '.join(capped)}" if capped else ""))
    if "admission" in results:
        out.append(f"admission: {'PASS' if results['admission']['passed'] else 'FAIL'}")
    if "tiny" in results:
        ratio = results["tiny"]["shared21"]["ratio"]
        out.append(f"tiny: served /decide/shared within {TINY_TARGET}x of in-process: "
                   f"{'MET' if ratio <= TINY_TARGET else 'MISSED'} ({ratio:.3f}x)")
    if "small" in results:
        ratio = results["small"]["shared21"]["ratio"]
        out.append(f"small: served /decide/shared within {SMALL_TARGET}x of in-process: "
                   f"{'MET' if ratio <= SMALL_TARGET else 'MISSED'} ({ratio:.3f}x)")
    return out


# -- entry point -----------------------------------------------------------------------------


SECTIONS: dict[str, Callable[[argparse.Namespace, str], dict[str, Any]]] = {
    "overhead": overhead, "admission": admission, "tiny": tiny, "small": small,
}
DEFAULT_SECTIONS = ("overhead", "admission", "tiny")  # `small` takes minutes per repetition: ask for it


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench load", description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(DEFAULT_SECTIONS),
                   help=f"comma-separated sections of {', '.join(SECTIONS)} (default {','.join(DEFAULT_SECTIONS)})")
    p.add_argument("--duration", type=float, default=1.0, help="seconds per server per round of a cell (default 1)")
    p.add_argument("--rounds", type=int, default=6, help="overhead rounds per cell, order flipped each (default 6)")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32],
                   help="connections per cell (default 1,8,32)")
    p.add_argument("--profile", action="store_true", help="also profile our server under load (cProfile)")
    p.add_argument("--queue", type=int, default=8, help="SEMIF_MAX_QUEUE for the admission burst (default 8)")
    p.add_argument("--delay-ms", type=int, default=250, help="stub delay for the admission burst (default 250)")
    p.add_argument("--repeats", type=int, default=20, help="tiny-model repetitions per measurement (default 20)")
    p.add_argument("--tiny-dir", type=Path, default=procs.ROOT / ".tiny-model", help="where to build the tiny model")
    p.add_argument("--small-dir", type=Path, default=None, help="HF_HOME for SmolLM2 (default: small-model's own cache)")
    p.add_argument("--small-repeats", type=int, default=5, help="SmolLM2 repetitions per measurement (default 5)")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for the SmolLM2 server and in-process side")
    p.add_argument("--out", type=Path, default=HERE / "results" / "load.json", help="JSON results")
    p.add_argument("--md", type=Path, default=HERE / "RESULTS.md", help="markdown results (default bench/RESULTS.md)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    chosen = [s for s in args.only.split(",") if s]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        print(f"unknown section(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    token = procs.token()
    results: dict[str, Any] = {"machine": machine()}
    for name in chosen:
        results[name] = SECTIONS[name](args, token)
    results["verdicts"] = verdicts(results)
    write_json(args.out, results)
    old = args.md.read_text(encoding="utf-8") if args.md.exists() else ""
    args.md.write_text(write_markdown(old, results), encoding="utf-8")
    print(markdown(results))
    failed = "admission" in results and not results["admission"]["passed"]
    return 1 if failed else 0
