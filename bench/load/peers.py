"""The line-up of the overhead comparisons: which servers run side by side, and what each one is.

Rules: `python -m bench load` (its overhead section) and `python -m bench wrk` start
the same servers from here, so the two benches compare the same things; every
server starts through bench.common.procs (never here), and this module names each stack
in plain words (server, event loop, HTTP parser, access log, metrics) for the
reports. It knows no load generator and no figures.

Theory: ours runs once per ops setting the caller passes (as deployed, metrics
only, both off). FastAPI on uvicorn[standard] runs twice: `baseline` with no
access log (`--no-access-log --log-level warning`), the quietest uvicorn can be,
and `baseline_logged` with uvicorn's defaults (`--log-level info`, one access line
per request on stdout), which is what an operator who deploys uvicorn gets and
the like-for-like peer of ours with its access log on. Every server's log (our
stderr, uvicorn's stdout and stderr) goes to a file, so neither writes to a
terminal.
"""

from __future__ import annotations

import contextlib
from typing import Any, Mapping

from bench.common import procs

# Baseline name -> whether uvicorn writes its access log (its default) or not.
BASELINES: dict[str, bool] = {"baseline_logged": True, "baseline": False}
# The short label each server goes by in the reports' column headers.
LABELS = {"ours": "on", "ours_metrics": "metrics", "ours_off": "off", "baseline_logged": "base-logged", "baseline": "base"}
QUIET_FLAGS = "--no-access-log --log-level warning"
LOGGED_FLAGS = "uvicorn's defaults: --log-level info, access log on"


def start(stack: contextlib.ExitStack, token: str, stub: Mapping[str, str],
          variants: Mapping[str, Mapping[str, str]]) -> dict[str, procs.Running]:
    """Ours once per variant, then both baselines, all over `stub`; each stopped when `stack` closes."""
    servers = {name: stack.enter_context(procs.semif_serve({**stub, **env}, token)) for name, env in variants.items()}
    for name, access_log in BASELINES.items():
        servers[name] = stack.enter_context(procs.fastapi_baseline(stub, token, access_log=access_log))
    return servers


def _on(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "off") == "on"


def stacks(variants: Mapping[str, Mapping[str, str]], uvicorn: Mapping[str, str],
           ours: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """Each server's stack in words: server, event loop, HTTP parser, access log, metrics.

    `uvicorn` is what uvicorn's `auto` picks here (load.uvicorn_stack), `ours` our
    loop and log flush (load.ours_stack), `variants` ours' environment per name.
    """
    loop = ours["event_loop"] if ours else "?"
    flush = f", buffered, flushed every {ours['log_flush_s']:g} s" if ours else ""
    out = {}
    for name, env in variants.items():
        log = f"on (JSON{flush})" if _on(env, "SEMIF_ACCESS_LOG") else "off"
        out[name] = {"server": "semif-serve", "loop": loop, "http": "h11", "access_log": log,
                     "metrics": "on" if _on(env, "SEMIF_METRICS") else "off"}
    base = f"FastAPI {uvicorn.get('fastapi', '?')} on uvicorn {uvicorn.get('uvicorn', '?')} (1 worker)"
    for name, access_log in BASELINES.items():
        log = f"on (text, a line per request, flushed each; {LOGGED_FLAGS})" if access_log else f"off ({QUIET_FLAGS})"
        out[name] = {"server": base, "loop": uvicorn.get("loop", "?"), "http": uvicorn.get("http", "?"),
                     "access_log": log, "metrics": "none"}
    return out


def stacks_rows(named: Mapping[str, Mapping[str, str]]) -> list[tuple[str, ...]]:
    """Rows for a table under STACK_HEADERS, one per server."""
    return [(name, LABELS.get(name, name), s["server"], s["loop"], s["http"], s["access_log"], s["metrics"])
            for name, s in named.items()]


STACK_HEADERS = ("name", "in the tables", "server", "event loop", "HTTP parser", "access log", "metrics")
