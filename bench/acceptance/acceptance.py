"""The contract's acceptance checks, run against a live server: `python -m bench <check> --url URL`.

Checks: parity, noise, negative, shared, speed, vram, boundary; plus `reference`,
which writes SemIf's own predictions for a row set, computed in this process on
the model the server reports. Each check prints a table and a verdict, writes a
JSON outcome with --out, and exits 1 when it fails. The bearer token is read
from SEMIF_API_TOKEN. With no --rows, the bench's own rows (bench/data) are used.

Tolerances. Agreement is compared by option id. `--max-gap` (default 1e-3) is
the largest probability difference two runs of the same model in the same
numeric type may show; on the CPU tiny model the measured gaps are ~1e-7.
Loosen it (e.g. 0.02) when comparing against predictions made on other hardware.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.acceptance import compare
from bench.acceptance.compare import Comparison, keyed
from bench.common import datasets
from bench.common.loadgen import Connection, Target, call, median, spread
from bench.common.report import Outcome, Progress, emit, fmt, note

MAX_GAP = 1e-3
# The negative control's score break: the shuffled run must miss parity's gap by 10x.
SCORE_BREAK_FACTOR = 10.0
GIB = 1 << 30
CAP_HEADROOM = 1.10  # allocator fragmentation between calls
CAP_STEP_GIB = 0.25
TOKENS_RE = re.compile(r"(\d+) input tokens exceed")


class CheckError(RuntimeError):
    """The server answered something a check cannot use (reported as a FAIL)."""


# -- talking to the server ---------------------------------------------------------


async def health(target: Target) -> dict[str, Any]:
    response = await call(target, "GET", "/health", timeout=10.0)
    if response.status != 200:
        raise CheckError(f"/health answered {response.status}")
    return response.json()


async def decide_all(target: Target, rows: list[datasets.Row], label: str) -> dict[str, Any]:
    """/decide for every row, one keep-alive connection; any non-200 is a CheckError."""
    progress = Progress(label, len(rows))
    connection = await Connection.open(target)
    results = []
    try:
        for row in rows:
            response = await connection.request(target, "POST", "/decide", row)
            if response.status != 200:
                raise CheckError(
                    f"/decide {row['id']!r} answered {response.status}: {response.body[:300]!r}"
                )
            results.append(response.json())
            progress.tick()
    finally:
        await connection.close()
    return keyed(results)


async def shared_once(
    connection: Connection, target: Target, state: Any, decisions: list[datasets.Row]
) -> list[Any]:
    """One /decide/shared; its results in request order."""
    response = await connection.request(
        target, "POST", "/decide/shared", datasets.shared_body(state, decisions)
    )
    if response.status != 200:
        raise CheckError(f"/decide/shared answered {response.status}: {response.body[:300]!r}")
    results = response.json()["results"]
    if [r["id"] for r in results] != [d["id"] for d in decisions]:
        raise CheckError("/decide/shared returned results out of request order")
    return results


async def shared_all(target: Target, rows: list[datasets.Row], label: str) -> dict[str, Any]:
    """The same rows through /decide/shared: one request per distinct state."""
    groups = datasets.by_state(rows)
    progress = Progress(label, len(groups))
    connection = await Connection.open(target)
    results = []
    try:
        for group in groups:
            results += await shared_once(connection, target, group[0]["state"], group)
            progress.tick()
    finally:
        await connection.close()
    return keyed(results)


def ids(rows: list[datasets.Row]) -> list[str]:
    return [row["id"] for row in rows]


def comparison_table(name: str, result: Comparison) -> list[tuple[str, str]]:
    return [
        (
            f"{name}: top-choice agreement",
            f"{result.agreeing}/{result.rows} = {result.agreement:.4f}",
        ),
        (f"{name}: max probability gap", f"{fmt(result.max_gap, 6)} (row {result.worst})"),
    ]


def within(result: Comparison, min_agreement: float, max_gap: float) -> bool:
    """Parity's criterion: nothing missing, agreement at least min, gap at most max."""
    return not result.missing and result.agreement >= min_agreement and result.max_gap <= max_gap


# -- the checks --------------------------------------------------------------------


async def parity(args: argparse.Namespace, target: Target) -> Outcome:
    """/decide over the rows against reference predictions (SemIf's direct.score output)."""
    rows = datasets.rows(args.rows)
    if args.reference is not None:
        reference = keyed(datasets.read_jsonl(args.reference))
        source = str(args.reference)
    else:
        served_by = await health(target)
        note(
            f"parity: no --reference; computing SemIf's predictions in-process on {served_by.get('model')}"
        )
        reference = keyed(make_reference(served_by, rows))
        source = f"in-process {served_by['scorer']} direct.score on {served_by['model']}@{served_by['revision']}"
    served = await decide_all(target, rows, "parity /decide")
    result = compare.compare(reference, served, ids(rows))
    passed = within(result, args.min_agreement, args.max_gap)
    criterion = f"every row answered; top-choice agreement >= {args.min_agreement}; max gap <= {args.max_gap}"
    table = [("reference", source), *comparison_table("served vs reference", result)]
    return Outcome(
        "parity",
        passed,
        _verdict(passed, result),
        criterion,
        {**result.figures(), "reference": source},
        table,
    )


def _verdict(passed: bool, result: Comparison) -> str:
    text = f"agreement {result.agreement:.4f} over {result.rows} rows, max gap {fmt(result.max_gap, 6)}"
    if result.missing:
        text += f"; {len(result.missing)} rows missing"
    return text if passed else text + " (outside the criterion)"


async def noise(args: argparse.Namespace, target: Target) -> Outcome:
    """The noise floor: the same /decide run twice (A vs A)."""
    rows = datasets.rows(args.rows)
    first = await decide_all(target, rows, "noise run A")
    second = await decide_all(target, rows, "noise run A'")
    result = compare.compare(first, second, ids(rows))
    passed = within(result, args.min_agreement, args.max_gap)
    criterion = f"A vs A: top-choice agreement >= {args.min_agreement}; max gap <= {args.max_gap}"
    return Outcome(
        "noise",
        passed,
        "A vs A " + _verdict(passed, result),
        criterion,
        result.figures(),
        comparison_table("A vs A", result),
    )


async def negative(args: argparse.Namespace, target: Target) -> Outcome:
    """Shuffled option descriptions must break agreement (see NEGATIVE_CRITERION)."""
    rows = datasets.rows(args.rows)
    shuffled_rows = rows if args.identical else [datasets.shift_descriptions(row) for row in rows]
    first = await decide_all(target, rows, "negative run A")
    floor = compare.compare(first, await decide_all(target, rows, "negative run A'"), ids(rows))
    shuffled = compare.compare(
        first, await decide_all(target, shuffled_rows, "negative shuffled"), ids(rows)
    )
    top_break = shuffled.agreement <= floor.agreement / 2
    score_break = shuffled.max_gap >= SCORE_BREAK_FACTOR * args.max_gap
    passed = not shuffled.missing and (top_break or (score_break and not args.require_top))
    figures = {
        "floor": floor.figures(),
        "shuffled": shuffled.figures(),
        "top_choice_break": top_break,
        "score_break": score_break,
        "identical": args.identical,
    }
    table = [
        *comparison_table("A vs A", floor),
        *comparison_table("shuffled vs A", shuffled),
        ("top-choice break", str(top_break)),
        ("score break", str(score_break)),
    ]
    return Outcome(
        "negative",
        passed,
        _negative_verdict(top_break, score_break, passed),
        NEGATIVE_CRITERION.format(factor=SCORE_BREAK_FACTOR, gap=args.max_gap),
        figures,
        table,
    )


NEGATIVE_CRITERION = (
    "descriptions shifted by one (a derangement; ids and positions fixed). Agreement is broken when parity "
    "would reject the shuffled run by a clear margin: the top choice by option id agrees on at most half as many "
    "rows as A vs A (a model that reads the descriptions), or the max probability gap is >= {factor:g} x the parity "
    "tolerance {gap:g} (a model whose top choice follows positions, as the random-weight tiny model's does); "
    "--require-top accepts only the first"
)


def _negative_verdict(top_break: bool, score_break: bool, passed: bool) -> str:
    if top_break:
        return "shuffled descriptions broke top-choice agreement"
    if score_break and passed:
        return (
            "shuffled descriptions broke score agreement only: the top choice follows positions "
            "(expected of a model that picks by position, like the random-weight tiny model or SmolLM2-135M; "
            "on a production model, investigate)"
        )
    return "shuffled descriptions did NOT break agreement: parity cannot tell a wrong answer from a right one"


async def shared(args: argparse.Namespace, target: Target) -> Outcome:
    """The same rows through /decide and /decide/shared agree within the A-vs-A floor."""
    rows = datasets.rows(args.rows)
    direct = await decide_all(target, rows, "shared: /decide A")
    floor = compare.compare(direct, await decide_all(target, rows, "shared: /decide A'"), ids(rows))
    result = compare.compare(
        direct, await shared_all(target, rows, "shared: /decide/shared"), ids(rows)
    )
    allowance = max(floor.max_gap, args.max_gap)
    passed = (
        not result.missing and result.agreement >= floor.agreement and result.max_gap <= allowance
    )
    criterion = (
        f"shared vs direct agreement >= A-vs-A agreement; max gap <= max(A-vs-A gap, {args.max_gap}) "
        "(a float floor: prefill+suffix and one forward sum in different orders)"
    )
    table = [
        *comparison_table("A vs A", floor),
        *comparison_table("shared vs direct", result),
        ("allowed gap", fmt(allowance, 6)),
    ]
    figures = {
        "floor": floor.figures(),
        "shared_vs_direct": result.figures(),
        "allowed_gap": allowance,
    }
    return Outcome(
        "shared", passed, "shared vs direct " + _verdict(passed, result), criterion, figures, table
    )


async def speed(args: argparse.Namespace, target: Target) -> Outcome:
    """21 binary criteria over one state: 21 x /decide against 1 x /decide/shared."""
    spec = datasets.load_json(datasets.SPEED21)
    decisions, rows = spec["decisions"], datasets.with_state(spec["state"], spec["decisions"])
    connection = await Connection.open(target)
    direct_s, shared_s = [], []
    progress = Progress("speed", args.n)
    try:
        await _time_direct(connection, target, rows[:1])  # warm-up, not counted
        await shared_once(connection, target, spec["state"], decisions[:1])
        for rep in range(args.n):  # alternate which goes first, so drift hits both alike
            if rep % 2:
                shared_s.append(await _time_shared(connection, target, spec["state"], decisions))
            direct_s.append(await _time_direct(connection, target, rows))
            if not rep % 2:
                shared_s.append(await _time_shared(connection, target, spec["state"], decisions))
            progress.tick()
    finally:
        await connection.close()
    ratio = median(direct_s) / median(shared_s)
    passed = args.n >= 3
    figures = {
        "n": args.n,
        "criteria": len(rows),
        "decide_x21_s": spread(direct_s),
        "shared_x1_s": spread(shared_s),
        "ratio_decide_over_shared": ratio,
    }
    table = [
        ("N", str(args.n)),
        ("/decide x21 p50 [min, max] s", _spread_text(direct_s)),
        ("/decide/shared x1 p50 [min, max] s", _spread_text(shared_s)),
        ("ratio (p50 x21 / p50 shared)", f"{ratio:.2f}x"),
    ]
    verdict = f"/decide/shared is {ratio:.2f}x the speed of 21 /decide calls (p50 over N={args.n})"
    return Outcome(
        "speed", passed, verdict, "N >= 3 and every request answered 200", figures, table
    )


async def _time_direct(connection: Connection, target: Target, rows: list[datasets.Row]) -> float:
    started = asyncio.get_running_loop().time()
    for row in rows:
        response = await connection.request(target, "POST", "/decide", row)
        if response.status != 200:
            raise CheckError(f"/decide answered {response.status}: {response.body[:300]!r}")
    return asyncio.get_running_loop().time() - started


async def _time_shared(
    connection: Connection, target: Target, state: Any, decisions: list[datasets.Row]
) -> float:
    started = asyncio.get_running_loop().time()
    await shared_once(connection, target, state, decisions)
    return asyncio.get_running_loop().time() - started


def _spread_text(values: list[float]) -> str:
    return f"{median(values):.4f} [{min(values):.4f}, {max(values):.4f}]"


async def vram(args: argparse.Namespace, target: Target) -> Outcome:
    """Peak reserved memory at a max-length input, and the SEMIF_VRAM_CAP_GIB it implies."""
    before = await health(target)
    device = str(before.get("device"))
    cuda = device.startswith("cuda")
    if cuda and "memory_reserved_bytes" not in before:
        return Outcome(
            "vram",
            False,
            "the engine reports no memory_reserved_bytes on /health",
            "CUDA figure present",
            {"device": device},
            [("device", device)],
        )
    row, tokens = await fit_row(target, min(args.tokens, int(before["max_tokens"])))
    samples: list[int] = []
    stop = asyncio.Event()
    poller = asyncio.create_task(
        _poll_reserved(target, stop, samples, args.poll) if cuda else stop.wait()
    )
    try:
        response = await call(target, "POST", "/decide", row, timeout=600.0)
    finally:
        stop.set()
        await poller
    if response.status != 200:
        raise CheckError(
            f"the {tokens}-token /decide answered {response.status}: {response.body[:300]!r}"
        )
    answered = (("input tokens", str(tokens)), ("answered in s", f"{response.latency:.3f}"))
    if not cuda:
        verdict = (
            f"VRAM not applicable: the server runs on {device!r}, which has none, so no figure is invented "
            f"(a {tokens}-token input was answered 200)"
        )
        return Outcome(
            "vram",
            True,
            verdict,
            f"a {tokens}-token /decide answers 200; memory on CUDA only",
            {"device": device, "applicable": False, "input_tokens": tokens},
            [
                ("device", device),
                *answered,
                ("peak reserved", "n/a"),
                ("SEMIF_VRAM_CAP_GIB", "n/a"),
            ],
        )
    return _vram_outcome(args, device, tokens, before, await health(target), samples, answered)


def _vram_outcome(
    args: argparse.Namespace,
    device: str,
    tokens: int,
    before: dict[str, Any],
    after: dict[str, Any],
    samples: list[int],
    answered: tuple[tuple[str, str], ...],
) -> Outcome:
    """The peak from every figure seen (engine peak if offered, else the sampled maximum) and the cap."""
    engine_peak = [int(after[k]) for k in PEAK_KEYS if k in after]
    peak = max(
        [
            *samples,
            int(before["memory_reserved_bytes"]),
            int(after["memory_reserved_bytes"]),
            *engine_peak,
        ]
    )
    cap = recommended_cap_gib(peak)
    figures = {
        "device": device,
        "applicable": True,
        "input_tokens": tokens,
        "reserved_before": before["memory_reserved_bytes"],
        "reserved_after": after["memory_reserved_bytes"],
        "peak_reserved": peak,
        "health_samples": len(samples),
        "engine_peak_reported": bool(engine_peak),
        "recommended_vram_cap_gib": cap,
    }
    table = [
        ("device", device),
        *answered,
        (
            "reserved before / after GiB",
            f"{before['memory_reserved_bytes'] / GIB:.3f} / {after['memory_reserved_bytes'] / GIB:.3f}",
        ),
        ("peak reserved GiB", f"{peak / GIB:.3f}"),
        ("SEMIF_VRAM_CAP_GIB", f"{cap:g}"),
    ]
    verdict = (
        f"peak {peak / GIB:.3f} GiB reserved at {tokens} tokens; set SEMIF_VRAM_CAP_GIB={cap:g}"
    )
    if not engine_peak:
        verdict += f" (peak sampled from /health every {args.poll:g} s: a lower bound)"
    criterion = f"a {tokens}-token /decide answers 200; cap = peak x {CAP_HEADROOM} rounded up to {CAP_STEP_GIB} GiB"
    return Outcome("vram", True, verdict, criterion, figures, table)


# Engine-side peak figures, used when /health offers one (a sampled peak is a lower bound).
PEAK_KEYS = ("max_memory_reserved_bytes", "peak_memory_reserved_bytes")


def recommended_cap_gib(peak_bytes: int) -> float:
    """The peak plus headroom for fragmentation, rounded up to the cap's step."""
    steps = math.ceil(peak_bytes * CAP_HEADROOM / (CAP_STEP_GIB * GIB))
    return max(steps, 1) * CAP_STEP_GIB


async def _poll_reserved(
    target: Target, stop: asyncio.Event, samples: list[int], interval: float
) -> None:
    """Sample /health's reserved memory until `stop` (health answers while a call scores)."""
    connection = await Connection.open(target)
    try:
        while not stop.is_set():
            response = await connection.request(target, "GET", "/health", timeout=10.0)
            samples.append(int(response.json().get("memory_reserved_bytes", 0)))
            try:
                async with asyncio.timeout(interval):
                    await stop.wait()
            except TimeoutError:
                pass
    finally:
        await connection.close()


FILLER = "data "


async def fit_row(
    target: Target, want: int, slack: int = 32, tries: int = 8
) -> tuple[datasets.Row, int]:
    """A /decide row whose prompt has between want - slack and want tokens, found by secant steps."""

    async def measure(words: int) -> tuple[datasets.Row, int]:
        row = {
            "id": f"vram-{words}",
            "state": FILLER * words,
            "question": "Is the state long?",
            "options": [{"id": "yes", "description": "Yes"}, {"id": "no", "description": "No"}],
        }
        return row, await count_tokens(target, row)

    return await secant_fit(measure, want, slack, tries)


async def secant_fit(
    measure: Callable[[int], Awaitable[tuple[Any, int]]], want: int, slack: int, tries: int
) -> tuple[Any, int]:
    """Find an integer size whose measured count lands in [want - slack, want] (count grows with size)."""
    points = [(1, (await measure(1))[1]), (64, (await measure(64))[1])]
    for _ in range(tries):
        (x0, y0), (x1, y1) = points[-2], points[-1]
        rate = (y1 - y0) / (x1 - x0) if x1 != x0 and y1 != y0 else 1.0
        size = max(1, round(x1 + (want - slack / 2 - y1) / rate))
        item, count = await measure(size)
        if want - slack <= count <= want:
            return item, count
        points.append((size, count))
    raise CheckError(
        f"could not build a {want}-token input in {tries} tries (last {points[-1][1]} tokens)"
    )


async def count_tokens(target: Target, row: datasets.Row) -> int:
    """The prompt's token count: input_tokens when scored, or the count a 422 names."""
    response = await call(target, "POST", "/decide", row, timeout=600.0)
    if response.status == 200:
        return int(response.json()["input_tokens"])
    found = (
        TOKENS_RE.search(response.body.decode(errors="replace")) if response.status == 422 else None
    )
    if found is None:
        raise CheckError(f"token probe answered {response.status}: {response.body[:300]!r}")
    return int(found.group(1))


async def boundary(args: argparse.Namespace, target: Target) -> Outcome:
    """INV-7: object states ending in ')', ';', '}' through /decide/shared, against string states."""
    spec = datasets.load_json(datasets.BOUNDARY)
    decisions = spec["decisions"]
    connection = await Connection.open(target)
    cases, table = [], []
    try:
        for case in spec["cases"]:
            cases.append(await _boundary_case(connection, target, case, decisions))
            table.append(_boundary_row(cases[-1], len(decisions)))
    finally:
        await connection.close()
    worst = max((c["max_gap_vs_direct"] for c in cases if c["answered"]), default=math.inf)
    passed = (
        all(c["answered"] and c["same_top"] == len(decisions) for c in cases)
        and worst <= args.max_gap
    )
    criterion = (
        f"every object state answered 200 by /decide/shared with the string state's top choice on every "
        f"decision; object shared vs object /decide gap <= {args.max_gap} (INV-7: same tokens)"
    )
    verdict = f"{sum(c['answered'] for c in cases)}/{len(cases)} object states answered, max gap vs /decide {fmt(worst, 6)}"
    return Outcome("boundary", passed, verdict, criterion, {"cases": cases}, table)


async def _boundary_case(
    connection: Connection, target: Target, case: dict[str, Any], decisions: list[datasets.Row]
) -> dict[str, Any]:
    outcome: dict[str, Any] = {"name": case["name"], "object": case["object"], "text": case["text"]}
    try:
        as_object = await shared_once(connection, target, case["object"], decisions)
    except CheckError as error:
        return {**outcome, "answered": False, "error": str(error)}
    as_text = await shared_once(connection, target, case["text"], decisions)
    direct = []
    for row in datasets.with_state(case["object"], decisions):
        response = await connection.request(target, "POST", "/decide", row)
        if response.status != 200:
            raise CheckError(f"/decide on {case['name']} answered {response.status}")
        direct.append(response.json())
    same = sum(compare.top(o) == compare.top(t) for o, t in zip(as_object, as_text))
    gap = max(compare.gap(o, d) for o, d in zip(as_object, direct))
    return {
        **outcome,
        "answered": True,
        "same_top": same,
        "max_gap_vs_direct": gap,
        "tops": [[compare.top(o), compare.top(t)] for o, t in zip(as_object, as_text)],
    }


def _boundary_row(case: dict[str, Any], total: int) -> tuple[str, str]:
    if not case["answered"]:
        return (f"{case['name']} {case['text']!r}", "REFUSED: " + case["error"][:80])
    return (
        f"{case['name']} {case['text']!r}",
        f"answered; same top as string {case['same_top']}/{total}; gap vs /decide {fmt(case['max_gap_vs_direct'], 6)}",
    )


# -- reference predictions -----------------------------------------------------------


def make_reference(health_facts: dict[str, Any], rows: list[datasets.Row]) -> list[dict[str, Any]]:
    """SemIf's predictions for rows, in this process, on the model /health names."""
    from bench.common import inprocess

    loaded = inprocess.load(inprocess.Facts.from_health(health_facts))
    return inprocess.reference(loaded, rows, Progress("reference", len(rows)))


async def reference(args: argparse.Namespace, target: Target) -> Outcome:
    """Write SemIf's predictions for the rows, computed in-process on the served model (JSONL)."""
    rows = datasets.rows(args.rows)
    served_by = await health(target)
    predictions = make_reference(served_by, rows)
    path = args.out if args.out is not None else DEFAULT_REFERENCE
    datasets.write_jsonl(path, predictions)
    source = f"{served_by['scorer']} direct.score on {served_by['model']}@{served_by['revision']} ({served_by['device']})"
    table = [("rows", str(len(predictions))), ("scorer", source), ("written to", str(path))]
    return Outcome(
        "reference",
        True,
        f"wrote {len(predictions)} predictions to {path}",
        "every row scored",
        {"rows": len(predictions), "source": source, "path": str(path)},
        table,
    )


DEFAULT_REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference.jsonl"

CHECKS: dict[str, Callable[[argparse.Namespace, Target], Awaitable[Outcome]]] = {
    "parity": parity,
    "noise": noise,
    "negative": negative,
    "shared": shared,
    "speed": speed,
    "vram": vram,
    "boundary": boundary,
    "reference": reference,
}


ROW_CHECKS = {"parity", "noise", "negative", "shared", "reference"}
GAP_CHECKS = {"parity", "noise", "negative", "shared", "boundary"}


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0]
    )
    commands = main_parser.add_subparsers(dest="check", required=True, metavar="CHECK")
    for name, fn in CHECKS.items():
        sub = commands.add_parser(name, help=(fn.__doc__ or name).splitlines()[0])
        sub.add_argument(
            "--url", required=True, help="the server, http://127.0.0.1:PORT (loopback only)"
        )
        sub.add_argument(
            "--out",
            type=Path,
            help="write the JSON outcome here (reference: the predictions JSONL)",
        )
        if name in ROW_CHECKS:
            sub.add_argument(
                "--rows",
                type=Path,
                default=datasets.ROWS,
                help="SemIf rows, JSONL (default: bench/data)",
            )
        if name in GAP_CHECKS:
            sub.add_argument(
                "--max-gap",
                type=float,
                default=MAX_GAP,
                help=f"probability tolerance (default {MAX_GAP})",
            )
        if name in ("parity", "noise"):
            sub.add_argument(
                "--min-agreement",
                type=float,
                default=1.0,
                help="top-choice agreement required (default 1)",
            )
        if name == "parity":
            sub.add_argument(
                "--reference",
                type=Path,
                help="reference predictions JSONL (default: computed in-process)",
            )
        if name == "negative":
            sub.add_argument(
                "--identical",
                action="store_true",
                help="do not shuffle (the control must then FAIL)",
            )
            sub.add_argument(
                "--require-top", action="store_true", help="accept only a top-choice break"
            )
        if name == "speed":
            sub.add_argument("-n", type=int, default=5, help="repetitions, >= 3 (default 5)")
        if name == "vram":
            sub.add_argument(
                "--tokens",
                type=int,
                default=4096,
                help="input length (default 4096, capped at max_tokens)",
            )
            sub.add_argument(
                "--poll", type=float, default=0.01, help="seconds between /health samples"
            )
    return main_parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        target = Target.from_url(args.url)
        if not target.token:
            raise CheckError("SEMIF_API_TOKEN is not set")
        outcome = asyncio.run(CHECKS[args.check](args, target))
    except (
        CheckError,
        KeyError,
        ValueError,
        OSError,
        TimeoutError,
        asyncio.IncompleteReadError,
    ) as error:
        outcome = Outcome(
            args.check,
            False,
            f"could not run: {type(error).__name__}: {error}",
            "the check ran",
            {},
        )
    return emit(outcome, None if args.check == "reference" else args.out)
