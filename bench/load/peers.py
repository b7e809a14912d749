"""The line-up of the overhead comparisons: which servers run side by side, and what each one is.

Rules: `python -m bench wrk` starts its servers from here (`python -m bench load`'s
overhead section, which did too, is retired), over the stub and ours' ops settings
defined here; every server starts through bench.common.procs (never here), and this
module names each stack in plain words (server, event loop, HTTP parser, access log,
metrics) for the reports. It knows no load generator and no figures.

Theory: ours runs once per ops setting in VARIANTS (as deployed, metrics
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
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from bench.common import procs

# Every server scores with the stub, no delay, 64 slots: wrk's 32 connections are never refused.
STUB = procs.stub_env(queue=64)
# Ours as the Containerfile deploys it (metrics, JSON access log) and with both off.
OPS_ON = {"SEMIF_METRICS": "on", "SEMIF_ACCESS_LOG": "on", "SEMIF_LOG_FORMAT": "json"}
OPS_METRICS = {"SEMIF_METRICS": "on", "SEMIF_ACCESS_LOG": "off", "SEMIF_LOG_FORMAT": "json"}
OPS_OFF = {"SEMIF_METRICS": "off", "SEMIF_ACCESS_LOG": "off", "SEMIF_LOG_FORMAT": "json"}
VARIANTS = {"ours": OPS_ON, "ours_metrics": OPS_METRICS, "ours_off": OPS_OFF}
# Baseline name -> whether uvicorn writes its access log (its default) or not.
BASELINES: dict[str, bool] = {"baseline_logged": True, "baseline": False}
# The short label each server goes by in the reports' column headers.
LABELS = {
    "ours": "on",
    "ours_metrics": "metrics",
    "ours_off": "off",
    "baseline_logged": "base-logged",
    "baseline": "base",
}
QUIET_FLAGS = "--no-access-log --log-level warning"
LOGGED_FLAGS = "uvicorn's defaults: --log-level info, access log on"


def start(stack: contextlib.ExitStack, token: str) -> dict[str, procs.Running]:
    """Ours once per VARIANTS, then both baselines, all over STUB; each stopped when `stack` closes."""
    servers = {
        name: stack.enter_context(procs.semif_serve({**STUB, **env}, token))
        for name, env in VARIANTS.items()
    }
    for name, access_log in BASELINES.items():
        servers[name] = stack.enter_context(
            procs.fastapi_baseline(STUB, token, access_log=access_log)
        )
    return servers


def uvicorn_stack() -> dict[str, str]:
    """What uvicorn's `auto` picks in this environment (it imports uvloop/httptools when present)."""
    from importlib.metadata import version

    def has(name):
        return importlib.util.find_spec(name) is not None

    return {
        "loop": "uvloop" if has("uvloop") else "asyncio",
        "http": "httptools" if has("httptools") else "h11",
        "uvicorn": version("uvicorn"),
        "fastapi": version("fastapi"),
    }


def ours_stack() -> dict[str, Any]:
    """The event loop and access-log flush our servers run with here (SEMIF_EVENT_LOOP=auto picks
    uvloop when installed, as the bench extra's uvicorn[standard] installs it)."""
    from semif_serve import config

    env = {
        name: os.environ[name]
        for name in ("SEMIF_EVENT_LOOP", "SEMIF_LOG_FLUSH_S")
        if name in os.environ
    }
    settings = config.load({"SEMIF_API_TOKEN": "x" * config.MIN_TOKEN_LENGTH, **env})
    return {"event_loop": settings.event_loop, "log_flush_s": settings.log_flush_s}


def _on(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "off") == "on"


def stacks(
    variants: Mapping[str, Mapping[str, str]],
    uvicorn: Mapping[str, str],
    ours: Mapping[str, Any] | None,
) -> dict[str, dict[str, str]]:
    """Each server's stack in words: server, event loop, HTTP parser, access log, metrics.

    `uvicorn` is what uvicorn's `auto` picks here (uvicorn_stack), `ours` our
    loop and log flush (ours_stack), `variants` ours' environment per name (VARIANTS).
    """
    loop = ours["event_loop"] if ours else "?"
    flush = f", buffered, flushed every {ours['log_flush_s']:g} s" if ours else ""
    out = {}
    for name, env in variants.items():
        log = f"on (JSON{flush})" if _on(env, "SEMIF_ACCESS_LOG") else "off"
        out[name] = {
            "server": "semif-serve",
            "loop": loop,
            "http": "h11",
            "access_log": log,
            "metrics": "on" if _on(env, "SEMIF_METRICS") else "off",
        }
    base = (
        f"FastAPI {uvicorn.get('fastapi', '?')} on uvicorn {uvicorn.get('uvicorn', '?')} (1 worker)"
    )
    for name, access_log in BASELINES.items():
        log = (
            f"on (text, a line per request, flushed each; {LOGGED_FLAGS})"
            if access_log
            else f"off ({QUIET_FLAGS})"
        )
        out[name] = {
            "server": base,
            "loop": uvicorn.get("loop", "?"),
            "http": uvicorn.get("http", "?"),
            "access_log": log,
            "metrics": "none",
        }
    return out


def stacks_rows(named: Mapping[str, Mapping[str, str]]) -> list[tuple[str, ...]]:
    """Rows for a table under STACK_HEADERS, one per server."""
    return [
        (
            name,
            LABELS.get(name, name),
            s["server"],
            s["loop"],
            s["http"],
            s["access_log"],
            s["metrics"],
        )
        for name, s in named.items()
    ]


STACK_HEADERS = (
    "name",
    "in the tables",
    "server",
    "event loop",
    "HTTP parser",
    "access log",
    "metrics",
)
