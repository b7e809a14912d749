"""What the Prometheus, Grafana and soak-plot tests share: the shipped rules and
dashboard as data, the metric names an expression reads, and the names the server exposes.

Names are read from the expressions with PromQL's own lexical rules (strings,
label matchers, ranges and grouping lists removed; a name followed by `(` is a
function), so a typo in a metric name is caught before any Prometheus runs; the
live test then has Prometheus itself parse and evaluate each expression.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bench.common import prometheus
from semif_serve.ops.metrics import CUDA_MEMORY, Metrics

DASHBOARD = prometheus.procs.ROOT / "deploy" / "grafana" / "semif-serve.json"
# Grafana's dashboard variables and built-in, as a query against one replica would see them.
VARIABLES = {
    "$__rate_interval": "1m",
    "${job}": "semif-serve",
    "$job": "semif-serve",
    "${instance}": ".*",
    "$instance": ".*",
}
PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target, not by the server
CUDA_ONLY = {name for name, _ in CUDA_MEMORY.values()}
# What /metrics exposes only with audits on (SEMIF_AUDIT_RATE above 0): a server without them has none.
AUDIT_ONLY = {
    "semif_audits_total",
    "semif_audit_agreements_total",
    "semif_prior_drift",
    "semif_prior_drift_threshold",
    "semif_audits_pending",
    "semif_audit_last_seconds",
    "semif_audit_rows_scored_total",
}

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "inf",
    "nan",
}


def require(name: str) -> str:
    """The binary's path; without it a skip, or a failure under CI=true (CI installs it)."""
    found = prometheus.binary(name)
    if found is None:
        message = f"{name} is not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def rules() -> list[dict[str, Any]]:
    """Every rule of the shipped rules file, recording and alerting."""
    return [
        rule
        for group in prometheus.load_yaml(prometheus.RULES)["groups"]
        for rule in group["rules"]
    ]


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels() -> Iterator[dict[str, Any]]:
    """Every panel that queries (rows hold none)."""
    for panel in dashboard()["panels"]:
        if panel["type"] != "row":
            yield panel


def substitute(expr: str) -> str:
    """A dashboard expression with its variables filled in (longest names first)."""
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric (and recorded series) names an expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings first: they may hold anything
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()[:1]
        word = match.group()
        if following == "(" or word.lower() in _KEYWORDS:
            continue
        if not re.match(
            r"\d", text[max(0, match.start() - 1) : match.start()] or " "
        ):  # not the tail of 1e3, 5m
            names.add(word)
    return names


def selectors(expr: str) -> set[str]:
    """Each series selector of an expression, with its label matchers (`name{code="busy"}`)."""
    names = metric_names(expr)
    return {
        match.group(1) + (match.group(2) or "")
        for match in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?", expr)
        if match.group(1) in names
    }


def exposed() -> set[str]:
    """Every sample name /metrics can carry, CUDA's included: rendered by the server's own
    Metrics after one request (request counters appear with their first route and status)."""
    facts = {key: 1.0 for key in CUDA_MEMORY} | {"scorer": "stub"}
    metrics = Metrics(
        lambda: facts,
        max_queue=2,
        in_progress=lambda: 0,
        open_connections=lambda: 0,
        drain_seconds=lambda: 0.0,
        shutdown_grace=30.0,
        busy_refusals=lambda: {"queue": 0, "wait": 0},
        queued_by_caller=lambda: {"-": 0},
        background_queued=lambda: 0,
        # audits on (SEMIF_AUDIT_RATE): one audited (workload, n), each family with a sample
        audits=lambda: {
            key: {
                ("w", "4", "done")
                if key == "outcomes"
                else ("w" if by_workload else ("w", "4")): 1.0
            }
            for key, by_workload in (
                ("outcomes", False),
                ("agreements", False),
                ("drift", False),
                ("drift_threshold", False),
                ("pending", True),
                ("last", True),
            )
        },
    )
    metrics.scorer_call("audit", 3, 0.0, 0.1, False)  # an audit's rows, counted apart
    metrics.request("/decide", 200, None, 0.001)
    metrics.wait_error(1.0, 1.2)  # the budget's series (SEMIF_MAX_WAIT_S) exist once it is set
    text = metrics.render().decode()
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
