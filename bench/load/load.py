"""Load benchmarks: `python -m bench load` runs them, one server at a time.

The overhead against the peers is `python -m bench wrk` (bench/load/wrk.py): wrk, a C load
generator, drives the same cells and servers with far less CPU than a Python one.

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
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import datasets, procs
from bench.common.loadgen import Connection, Response, Target, call, encode, median, spread
from bench.common.report import machine, markdown_table, note, section, splice, write_json

HERE = Path(__file__).resolve().parents[1]  # bench/
# Served /decide/shared p50 over in-process score_shared p50 on the same rows, at most.
TINY_SERVED_VS_INPROCESS_MAX, SMALL_SERVED_VS_INPROCESS_MAX = 1.10, 1.05


# -- admission: 429 past SEMIF_MAX_QUEUE ----------------------------------------------------


async def _exchange(connection: Connection, raw: bytes, timeout: float) -> Response | None:
    try:
        return await connection.exchange(raw, timeout)
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
        return None


async def _sample_health(
    target: Target, stop: asyncio.Event, samples: list[dict[str, Any]]
) -> None:
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
    row = datasets.first_with(2)
    payloads = [
        encode(target, "POST", "/decide", {**row, "id": f"burst-{k}"}) for k in range(offered)
    ]
    connections = await asyncio.gather(*(Connection.open(target) for _ in range(offered)))
    samples: list[dict[str, Any]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_sample_health(target, stop, samples))
    try:
        await asyncio.sleep(0.05)  # a first sample before the burst
        timeout = queue * delay + 10.0
        responses = await asyncio.gather(
            *(_exchange(c, p, timeout) for c, p in zip(connections, payloads))
        )
        strays = await asyncio.gather(*(c.stray_bytes() for c in connections))
    finally:
        stop.set()
        await sampler
        await asyncio.gather(*(c.close() for c in connections))
    idle = (await call(target, "GET", "/health")).json()["in_progress"]
    return admission_figures(
        queue, offered, delay, responses, samples, sum(1 for s in strays if s), idle
    )


def admission_figures(
    queue: int,
    offered: int,
    delay: float,
    responses: list[Response | None],
    samples: list[dict[str, Any]],
    strays: int,
    idle: int,
) -> dict[str, Any]:
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
    return {
        "max_queue": queue,
        "offered": offered,
        "delay_s": delay,
        "answered": len(answered),
        "ok_200": len(ok),
        "refused_429": len(refused),
        "other": len(answered) - len(ok) - len(refused),
        "refusal_latency_max_s": refusal_max,
        "refusal_latency_p50_s": median([r.latency for r in refused]),
        "peak_in_progress": peak,
        "health_samples": len(samples),
        "in_progress_after": idle,
        "checks": checks,
        "passed": all(checks.values()),
    }


def admission(args: argparse.Namespace, token: str) -> dict[str, Any]:
    with procs.semif_serve(procs.stub_env(args.delay_ms, args.queue), token) as server:
        note(
            f"load admission: burst of {3 * args.queue} against SEMIF_MAX_QUEUE={args.queue}, delay {args.delay_ms} ms"
        )
        return asyncio.run(burst(server.target, args.queue, 3 * args.queue, args.delay_ms / 1000))


# -- tiny model: served against in-process -------------------------------------------------


async def _timed(connection: Connection, target: Target, path: str, payload: Any) -> float:
    response = await connection.request(target, "POST", path, payload, timeout=120.0)
    if response.status != 200:
        raise RuntimeError(f"{path} answered {response.status}: {response.body[:300]!r}")
    return response.latency


async def _against_inprocess(
    target: Target, repeats: int, sizes: tuple[int, ...], per_decision: bool, label: str
) -> dict[str, Any]:
    """Served /decide/shared (21 criteria) against in-process score_shared on the same rows, interleaved;
    optionally the same 21 criteria as 21 /decide calls; then rotations for each option count in sizes."""
    from bench.common import inprocess

    health = (await call(target, "GET", "/health")).json()
    loaded = inprocess.load(inprocess.Facts.from_health(health))
    spec = datasets.load_json(datasets.SPEED21)
    body, rows = (
        datasets.shared_body(spec["state"], spec["decisions"]),
        datasets.with_state(spec["state"], spec["decisions"]),
    )
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
        averaging = {
            f"{k}-options": await _rotations(connection, target, datasets.first_with(k), repeats)
            for k in sizes
        }
    finally:
        await connection.close()
    shared21 = {
        "served_s": spread(served),
        "inprocess_s": spread(local),
        "ratio": median(served) / median(local),
    }
    if per_decision:
        shared21 |= {
            "per_decision_s": spread(separate),
            "per_decision_ratio": median(separate) / median(served),
        }
    return {
        "model": health["model"],
        "revision": health["revision"],
        "device": health["device"],
        "shared21": shared21,
        "rotations": averaging,
        "repeats": repeats,
    }


async def _tiny(target: Target, repeats: int) -> dict[str, Any]:
    return await _against_inprocess(target, repeats, (4, 3), per_decision=False, label="tiny") | {
        "shared21_target": TINY_SERVED_VS_INPROCESS_MAX
    }


async def _rotations(
    connection: Connection, target: Target, row: datasets.Row, repeats: int
) -> dict[str, Any]:
    """n rotations in one /decide (`orderings: rotations`) against n separate /decide calls."""
    count = len(row["options"])
    one, separate = [], []
    for _ in range(repeats):
        one.append(await _timed(connection, target, "/decide", {**row, "orderings": "rotations"}))
        started = time.perf_counter()
        for shift in range(count):
            await _timed(connection, target, "/decide", datasets.rotate(row, shift))
        separate.append(time.perf_counter() - started)
    return {
        "options": count,
        "rotations": count,
        "one_request_s": spread(one),
        "separate_calls_s": spread(separate),
        "speedup": median(separate) / median(one),
    }


def small(args: argparse.Namespace, token: str) -> dict[str, Any]:
    """SmolLM2-135M on the CPU, OMP_NUM_THREADS=args.threads for the server and this process alike."""
    note("load small: building (or finding) SmolLM2 with semif-serve small-model")
    settings = {**procs.small_model(args.small_dir), "OMP_NUM_THREADS": str(args.threads)}
    os.environ.update(settings)  # before this process first imports torch or transformers
    with procs.semif_serve(settings, token, ready_timeout=600.0) as server:
        result = asyncio.run(
            _against_inprocess(
                server.target, args.small_repeats, (3,), per_decision=True, label="small"
            )
        )
    import torch  # loaded by the in-process side: report what it actually used

    return result | {
        "shared21_target": SMALL_SERVED_VS_INPROCESS_MAX,
        "omp_num_threads": args.threads,
        "torch_threads": torch.get_num_threads(),
    }


def tiny(args: argparse.Namespace, token: str) -> dict[str, Any]:
    note(f"load tiny: building the tiny model in {args.tiny_dir}")
    # One torch thread in the server and here: on 2 cores the other is the client's.
    settings = {**procs.tiny_model(args.tiny_dir), "OMP_NUM_THREADS": "1"}
    os.environ.update(settings)  # before this process first imports torch or transformers
    with procs.semif_serve(settings, token, ready_timeout=180.0) as server:
        return asyncio.run(_tiny(server.target, args.repeats))


# -- reporting -----------------------------------------------------------------------------


def admission_markdown(result: dict[str, Any]) -> list[str]:
    rows = [(name, "yes" if ok else "NO") for name, ok in result["checks"].items()]
    head = (
        f"Burst of {result['offered']} /decide against SEMIF_MAX_QUEUE={result['max_queue']}, stub delay "
        f"{result['delay_s'] * 1000:.0f} ms: {result['ok_200']} answered 200, {result['refused_429']} refused 429 "
        f"(max {result['refusal_latency_max_s'] * 1000:.1f} ms, p50 {result['refusal_latency_p50_s'] * 1000:.1f} ms), "
        f"peak in_progress on /health {result['peak_in_progress']} over {result['health_samples']} samples."
    )
    return [
        "## Admission: 429 past SEMIF_MAX_QUEUE",
        "",
        head,
        "",
        markdown_table(("check", "holds"), rows),
        "",
    ]


def _spread_row(what: str, seconds: dict[str, float]) -> tuple[str, str, str]:
    return (
        what,
        f"{seconds['p50'] * 1e3:.1f}",
        f"{seconds['min'] * 1e3:.1f} - {seconds['max'] * 1e3:.1f}",
    )


def small_markdown(result: dict[str, Any]) -> list[str]:
    shared = result["shared21"]
    notes = [
        f"/decide/shared x1 is {shared['per_decision_ratio']:.2f}x faster than /decide x21 (p50)",
        f"threads: OMP_NUM_THREADS={result['omp_num_threads']} for the server and the in-process side "
        f"(torch.get_num_threads() = {result['torch_threads']} in-process)",
    ]
    return model_markdown(
        result,
        "SmolLM2-135M-Instruct",
        [_spread_row("/decide x21, same criteria, served", shared["per_decision_s"])],
        notes,
    )


def tiny_markdown(result: dict[str, Any]) -> list[str]:
    return model_markdown(result, "Tiny model")


def model_markdown(
    result: dict[str, Any],
    title: str,
    extra_rows: list[tuple[str, str, str]] | None = None,
    notes: list[str] | None = None,
) -> list[str]:
    shared = result["shared21"]
    rows = [
        _spread_row("/decide/shared, 21 criteria, served", shared["served_s"]),
        _spread_row("score_shared, same rows, in-process", shared["inprocess_s"]),
        *(extra_rows or []),
    ]
    for name, rot in result["rotations"].items():
        rows.append(
            _spread_row(
                f"{name}: {rot['rotations']} rotations in one /decide", rot["one_request_s"]
            )
        )
        rows.append(
            _spread_row(
                f"{name}: {rot['rotations']} separate /decide calls", rot["separate_calls_s"]
            )
        )
    ratios = [
        f"served / in-process p50: **{shared['ratio']:.3f}x** (target <= {result['shared21_target']}x)"
    ]
    ratios += [
        f"{name}: one request is {rot['speedup']:.2f}x faster than {rot['rotations']} separate calls"
        for name, rot in result["rotations"].items()
    ]
    return [
        f"## {title} ({result['device']}): served against in-process",
        "",
        f"{result['model']}@{result['revision'][:12]}, N = {result['repeats']} each, interleaved.",
        "",
        markdown_table(("what", "p50 ms", "min - max ms"), rows),
        "",
        *[f"- {r}" for r in ratios + (notes or [])],
        "",
    ]


TITLE = "# semif-serve benchmark results"


def markdown_sections(results: dict[str, Any]) -> dict[str, str]:
    """This bench's marked sections of RESULTS.md, by name: only these are rewritten (see `write_markdown`)."""
    info = results["machine"]
    sections = {
        "load-machine": "\n".join(
            [
                f"Machine: `{info['uname_m']}`, {info['nproc']} CPUs, Python {info['python']}; run {info['date']} "
                f"with `python -m bench load`, load average {' / '.join(map(str, info.get('loadavg', [])))} (1/5/15 min) "
                f"when it began on this shared machine; thread settings {info.get('threads', {})}. The server under test runs as its own process; the client "
                "is bench/common/loadgen.py (asyncio over raw keep-alive sockets). The overhead against the peers is the wrk "
                "section below (`python -m bench wrk`)."
            ]
        )
    }
    for name, render in (
        ("admission", admission_markdown),
        ("tiny", tiny_markdown),
        ("small", small_markdown),
    ):
        if name in results:
            sections[f"load-{name}"] = "\n".join(render(results[name]))
    sections["load-verdicts"] = "\n".join(
        ["## Verdicts", "", *[f"- {v}" for v in results["verdicts"]]]
    )
    return sections


def markdown(results: dict[str, Any]) -> str:
    """The whole report of one run, as printed on stdout."""
    return "\n\n".join([TITLE, *markdown_sections(results).values()]) + "\n"


def write_markdown(old: str, results: dict[str, Any]) -> str:
    """`old` with only this bench's marked sections replaced (appended when absent): the sections other
    benches and people own (wrk, ops-cost, scaling out, the weights check, real-model runs) stay as they are,
    and a section this run did not measure (`--only`) keeps its earlier figures and its verdicts."""
    text = old if old.strip() else TITLE + "\n"
    results = {
        **results,
        "verdicts": merged_verdicts(section(text, "load-verdicts") or "", results),
    }
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
    return [
        line
        for name in SECTIONS
        for line in (ours[name] if name in results else earlier.get(name, []))
    ]


def verdicts(results: dict[str, Any]) -> list[str]:
    """Targets met or missed, stated plainly; each line starts with its section's name (see merged_verdicts)."""
    out = []
    if "admission" in results:
        out.append(f"admission: {'PASS' if results['admission']['passed'] else 'FAIL'}")
    for name, bound in (
        ("tiny", TINY_SERVED_VS_INPROCESS_MAX),
        ("small", SMALL_SERVED_VS_INPROCESS_MAX),
    ):
        if name in results:
            ratio = results[name]["shared21"]["ratio"]
            out.append(
                f"{name}: served /decide/shared within {bound}x of in-process: "
                f"{'MET' if ratio <= bound else 'MISSED'} ({ratio:.3f}x)"
            )
    return out


# -- entry point -----------------------------------------------------------------------------


SECTIONS: dict[str, Callable[[argparse.Namespace, str], dict[str, Any]]] = {
    "admission": admission,
    "tiny": tiny,
    "small": small,
}
DEFAULT_SECTIONS = ("admission", "tiny")  # `small` takes minutes per repetition: ask for it


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench load", description=__doc__.splitlines()[0])
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_SECTIONS),
        help=f"comma-separated sections of {', '.join(SECTIONS)} (default {','.join(DEFAULT_SECTIONS)})",
    )
    p.add_argument(
        "--queue", type=int, default=8, help="SEMIF_MAX_QUEUE for the admission burst (default 8)"
    )
    p.add_argument(
        "--delay-ms", type=int, default=250, help="stub delay for the admission burst (default 250)"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=20,
        help="tiny-model repetitions per measurement (default 20)",
    )
    p.add_argument(
        "--tiny-dir",
        type=Path,
        default=procs.ROOT / ".tiny-model",
        help="where to build the tiny model",
    )
    p.add_argument(
        "--small-dir",
        type=Path,
        default=None,
        help="HF_HOME for SmolLM2 (default: small-model's own cache)",
    )
    p.add_argument(
        "--small-repeats",
        type=int,
        default=5,
        help="SmolLM2 repetitions per measurement (default 5)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS for the SmolLM2 server and in-process side",
    )
    p.add_argument("--out", type=Path, default=HERE / "results" / "load.json", help="JSON results")
    p.add_argument(
        "--md",
        type=Path,
        default=HERE / "RESULTS.md",
        help="markdown results (default bench/RESULTS.md)",
    )
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
