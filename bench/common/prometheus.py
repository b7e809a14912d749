"""A real Prometheus as a child process, scraping servers the bench or a test started.

Rules: this module starts and stops Prometheus and asks its HTTP API (httpx); it
knows nothing of traffic or verdicts (the soak and tests/deploy/ decide those). The
configuration is always the shipped one (deploy/prometheus/prometheus.yml and its
rules), with only what a local run must change: the targets, the intervals, and
the `for:` of alerts a test needs to see fire soon. Those changes are made on
copies in the run's own folder, never on the shipped files.

Theory: Prometheus listens on a free loopback port with its own tsdb in a fresh
folder, so it never collides with a system Prometheus (Debian's package may run
one on :9090); it is stopped with SIGTERM in a `finally`, SIGKILL if it lingers,
like every server the bench starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from . import procs

DEPLOY = procs.ROOT / "deploy" / "prometheus"
CONFIG = DEPLOY / "prometheus.yml"
RULES = DEPLOY / "semif-serve.rules.yml"
PROMETHEUS_ENV = "SEMIF_PROMETHEUS"  # path of the prometheus binary, when it is not on PATH


def binary(name: str = "prometheus") -> str | None:
    """`prometheus` or `promtool` from PATH or Debian's /usr/bin; SEMIF_PROMETHEUS overrides the server."""
    override = os.environ.get(PROMETHEUS_ENV) if name == "prometheus" else None
    for candidate in (override, shutil.which(name), f"/usr/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert(name: str) -> dict[str, Any]:
    """The shipped alerting rule `name`, as written in the rules file."""
    for group in load_yaml(RULES)["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return rule
    raise KeyError(f"{RULES} has no alert {name}")


def rules_with(for_overrides: Mapping[str, str], interval: str) -> dict[str, Any]:
    """The shipped rules evaluated every `interval` (each group's own interval would override the
    global one), with the `for:` of the named alerts replaced (a test's copy)."""
    rules = load_yaml(RULES)
    for group in rules["groups"]:
        group["interval"] = interval
        for rule in group["rules"]:
            if rule.get("alert") in for_overrides:
                rule["for"] = for_overrides[rule["alert"]]
    return rules


def config_for(targets: list[str], interval: str, rules_file: Path) -> dict[str, Any]:
    """The shipped static scrape config, aimed at `targets` with `interval` and `rules_file`."""
    config = load_yaml(CONFIG)
    config["global"].update(
        scrape_interval=interval, evaluation_interval=interval, scrape_timeout=interval
    )
    config["rule_files"] = [str(rules_file)]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": targets}]
    return config


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus: its API's base URL and its log."""

    url: str
    log: Path

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector; a PromQL error raises with Prometheus' message."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        return _data(httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10.0))["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return _data(httpx.get(f"{self.url}/api/v1/query_range", params=params, timeout=30.0))[
            "result"
        ]

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts now pending or firing (state, labels)."""
        return _data(httpx.get(f"{self.url}/api/v1/alerts", timeout=10.0))["alerts"]

    def rules(self) -> list[dict[str, Any]]:
        """Every rule group as Prometheus loaded it, with each rule's health and last error."""
        return _data(httpx.get(f"{self.url}/api/v1/rules", timeout=10.0))["groups"]

    def targets_up(self) -> int:
        """How many of its scrape targets answered their last scrape."""
        return sum(1 for sample in self.query("up == 1"))

    def wait_scraped(self, targets: int, timeout: float = 15.0) -> None:
        """Until every target has answered a scrape (Prometheus applies new targets every few seconds)."""
        deadline = time.monotonic() + timeout
        while self.targets_up() < targets:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Prometheus scraped {self.targets_up()} of {targets} targets in {timeout:.0f} s"
                )
            time.sleep(0.2)


def _data(response: httpx.Response) -> Any:
    body = response.json()
    if response.status_code != 200 or body.get("status") != "success":
        raise ValueError(
            f"Prometheus answered {response.status_code}: {body.get('errorType')}: {body.get('error')}"
        )
    return body["data"]


@contextlib.contextmanager
def running(
    targets: list[str],
    interval: str = "1s",
    for_overrides: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
    workdir: Path | None = None,
) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` and evaluating the shipped rules (copies, `for:` overridden) every `interval`."""
    found = binary()
    if found is None:
        raise FileNotFoundError(
            "prometheus is not installed (apt-get install prometheus, or set SEMIF_PROMETHEUS)"
        )
    directory = (
        Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="semif-prometheus-"))
    )
    rules_file = directory / "semif-serve.rules.yml"
    rules_file.write_text(yaml.safe_dump(rules_with(for_overrides or {}, interval)))
    config_file = directory / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config_for(targets, interval, rules_file)))
    port = procs.free_port()
    log = directory / "prometheus.log"
    argv = [
        found,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={directory / 'data'}",
        f"--web.listen-address={procs.HOST}:{port}",
        "--log.level=warn",
    ]
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            argv,
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            prometheus = Prometheus(f"http://{procs.HOST}:{port}", log)
            _wait_ready(prometheus, process, ready_timeout)
            yield prometheus
        finally:
            procs._stop(process)
    if workdir is None:
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(prometheus: Prometheus, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Poll /-/ready until 200; fail fast with its log if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"prometheus exited with {process.returncode}:\n{prometheus.log.read_text()[-2000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{prometheus.url}/-/ready", timeout=2.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(
        f"prometheus not ready within {timeout:.0f} s:\n{prometheus.log.read_text()[-2000:]}"
    )
