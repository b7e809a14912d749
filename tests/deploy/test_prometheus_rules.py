"""deploy/prometheus/ checked by the real promtool (Debian's prometheus 2.42), offline.

`promtool check config` / `check rules` on the shipped files; `promtool test rules`
with, for every alert, a synthetic series that must fire it and one that must not;
every name an expression reads is one the server exposes (or a recorded series, or
Prometheus' `up`); the scrape configs reach each replica directly and carry no token.
Without promtool these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.common import prometheus
from semif_serve.config import Settings
from tests import promql

K8S_CONFIG = prometheus.DEPLOY / "prometheus-kubernetes.yml"
DEPLOYMENT = prometheus.procs.ROOT / "deploy" / "kubernetes" / "deployment.yaml"
OPERATING = prometheus.procs.ROOT / "docs" / "operating.md"
SERIES = {"job": "semif-serve"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promql.require("promtool"), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_check_rules_passes() -> None:
    done = promtool("check", "rules", str(prometheus.RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(promql.rules())} rules found" in done.stdout


def test_promtool_check_config_passes_for_the_static_replicas() -> None:
    done = promtool("check", "config", str(prometheus.CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr


def test_kubernetes_scrape_config_passes_promtool(tmp_path: Path) -> None:
    """Checked as shipped where promtool knows Kubernetes discovery; Debian's build leaves it
    out, so there every other line is checked with the discovery block swapped for a target."""
    done = promtool("check", "config", str(K8S_CONFIG))
    if "field kubernetes_sd_configs not found" in done.stdout + done.stderr:
        config = prometheus.load_yaml(K8S_CONFIG)
        (job,) = config["scrape_configs"]
        job.pop("kubernetes_sd_configs")
        job["static_configs"] = [{"targets": ["10.0.0.1:8000"]}]
        config["rule_files"] = [str(prometheus.RULES)]
        copy = tmp_path / "prometheus-kubernetes.yml"
        copy.write_text(yaml.safe_dump(config))
        done = promtool("check", "config", str(copy))
    assert done.returncode == 0, done.stdout + done.stderr


def test_kubernetes_discovery_matches_the_deployment() -> None:
    """The pod selector is the Deployment's pod label, and the kept port is its named container port."""
    deployment = next(
        d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    env = {item["name"]: item.get("value") for item in container["env"]}
    (job,) = prometheus.load_yaml(K8S_CONFIG)["scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"  # each replica, never the Service that balances over them
    (selector,) = sd["selectors"]
    key, value = selector["label"].split("=")
    assert pod["metadata"]["labels"][key] == value
    keep = {
        tuple(rule["source_labels"]): rule["regex"]
        for rule in job["relabel_configs"]
        if rule.get("action") == "keep"
    }
    assert keep[("__meta_kubernetes_pod_label_" + re.sub(r"[./]", "_", key),)] == value
    port_name = keep[("__meta_kubernetes_pod_container_port_name",)]
    assert ports[port_name] == int(
        env["SEMIF_METRICS_PORT"]
    )  # the port that stays open through a drain
    assert job["metrics_path"] == "/metrics"


def test_static_targets_are_the_replicas_metrics_ports_never_the_edge() -> None:
    """The operating guide's nginx example: scrape the SEMIF_METRICS_PORT of each replica it starts on
    the --replica hosts, never a client port nor the --listen address."""
    (job,) = prometheus.load_yaml(prometheus.CONFIG)["scrape_configs"]
    (static,) = job["static_configs"]
    guide = OPERATING.read_text()
    command = re.search(r"python -m deploy\.nginx\.render (.*?)>", guide, re.S)
    loop = re.search(
        r"for card in ([\d ]+); do\n.*?SEMIF_PORT=\$\(\((\d+) \+ card\)\) "
        r"SEMIF_METRICS_PORT=\$\(\((\d+) \+ card\)\)",
        guide,
        re.S,
    )
    assert command is not None and loop is not None
    cards = [int(card) for card in loop.group(1).split()]
    replicas = re.findall(r"--replica (\S+)", command.group(1))
    (listen,) = re.findall(r"--listen (\S+)", command.group(1))
    assert replicas == [
        f"127.0.0.1:{int(loop.group(2)) + card}" for card in cards
    ]  # the loop starts the replicas
    assert (
        static["targets"] == [f"127.0.0.1:{int(loop.group(3)) + card}" for card in cards]
        and len(cards) == 3
    )
    ports = {target.split(":")[1] for target in static["targets"]}
    assert (
        not ports & {replica.split(":")[1] for replica in replicas}
        and listen.split(":")[1] not in ports
    )


@pytest.mark.parametrize("config", [prometheus.CONFIG, K8S_CONFIG], ids=["static", "kubernetes"])
def test_scrape_configs_carry_no_credentials(config: Path) -> None:
    (job,) = prometheus.load_yaml(config)["scrape_configs"]
    assert job["job_name"] == SERIES["job"]  # the rules select this job
    assert not {"authorization", "bearer_token", "bearer_token_file", "basic_auth", "oauth2"} & set(
        job
    )


def test_every_name_an_expression_reads_is_exposed_recorded_or_up() -> None:
    exposed, recorded = promql.exposed(), promql.recorded()
    known = exposed | recorded | promql.PROMETHEUS_OWN
    expressions = {
        f"{rule.get('record') or rule['alert']} #{number}": rule["expr"]
        for number, rule in enumerate(promql.rules())
    }
    expressions |= {
        f"panel {panel['title']}": promql.substitute(target["expr"])
        for panel in promql.panels()
        for target in panel["targets"]
    }
    read: set[str] = set()
    for where, expr in expressions.items():
        names = promql.metric_names(expr)
        assert names or expr.startswith("vector("), where  # only the budget is a constant
        assert names <= known, (
            f"{where} reads {sorted(names - known)}, which the server does not expose"
        )
        read |= names
    assert recorded <= read  # every recording rule is used by an alert or a panel


def test_the_name_check_catches_a_name_the_server_does_not_expose() -> None:
    assert promql.metric_names(
        'sum by (job) (rate(semif_http_request_total{route="/x"}[1m])) > 0.5'
    ) == {"semif_http_request_total"}
    assert "semif_http_request_total" not in promql.exposed()


def test_every_alert_has_a_for_a_severity_and_what_to_do() -> None:
    assert set(promql.alerts()) == set(CASES)
    for name, rule in promql.alerts().items():
        assert "for" in rule, name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"] and "First" in rule["annotations"]["description"], (
            name
        )


def test_the_stall_window_outlasts_the_body_deadline() -> None:
    """A POST still sending its body holds a slot without a scorer call: the body deadline ends it first."""
    (window,) = re.findall(r"\[(\d+)s\]", promql.alerts()["SemifScorerStalled"]["expr"])
    assert int(window) > Settings.body_timeout


# -- promtool test rules -----------------------------------------------------------------------


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    matchers = ", ".join(f'{key}="{value}"' for key, value in {**SERIES, **labels}.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


def histogram(name: str, instance: str, counts: dict[str, str]) -> list[dict[str, str]]:
    """Cumulative bucket series of one histogram child (kind direct)."""
    return [
        series(f"{name}_bucket", values, instance=instance, kind="direct", le=le)
        for le, values in counts.items()
    ]


AUDITED = {"workload": "triage", "n": "4"}  # one audited (workload, n)
# Each alert: input series (15 s apart), the evaluation time, and the instances it must fire
# for. Instance `fires` should fire it; `quiet` must not.
CASES: dict[str, tuple[list[dict[str, str]], str, list[dict[str, str]]]] = {
    "SemifInstanceDown": (
        [series("up", "0x30", instance="fires"), series("up", "1x30", instance="quiet")],
        "4m",
        [{"instance": "fires"}],
    ),
    "SemifQueueSaturated": (
        [
            series("semif_requests_in_progress", "2x30", instance="fires"),
            series("semif_max_queue", "2x30", instance="fires"),
            series("semif_requests_in_progress", "1x30", instance="quiet"),
            series("semif_max_queue", "2x30", instance="quiet"),
        ],
        "6m",
        [{"instance": "fires"}],
    ),
    "SemifBusyRefusals": (
        [
            series("semif_refusals_total", "0+3x60", instance="fires", code="busy"),
            series(
                "semif_http_requests_total",
                "0+3x60",
                instance="fires",
                route="/decide",
                status="429",
            ),
            series(
                "semif_http_requests_total",
                "0+7x60",
                instance="fires",
                route="/decide",
                status="200",
            ),
            series("semif_refusals_total", "0+0x60", instance="quiet", code="busy"),
            series(
                "semif_http_requests_total",
                "0+10x60",
                instance="quiet",
                route="/decide",
                status="200",
            ),
        ],
        "11m",
        [{"instance": "fires"}],
    ),
    "SemifScorerSlow": (
        # every call between 5 and 10 s (p99 ~9.95 s) vs every call under 5 s (p99 ~4.95 s)
        histogram(
            "semif_scorer_call_duration_seconds",
            "fires",
            {"5.0": "0x60", "10.0": "0+1x60", "+Inf": "0+1x60"},
        )
        + histogram(
            "semif_scorer_call_duration_seconds",
            "quiet",
            {"5.0": "0+1x60", "10.0": "0+1x60", "+Inf": "0+1x60"},
        ),
        "11m",
        [{"instance": "fires", "kind": "direct", "quantile": "0.99"}],
    ),
    "SemifOutOfMemory": (
        [
            series("semif_out_of_memory_events_total", "0x8 1x20", instance="fires"),
            series("semif_out_of_memory_events_total", "0x30", instance="quiet"),
        ],
        "3m",
        [{"instance": "fires"}],
    ),
    "SemifScoringFailed": (
        # exported at 0 from the start, so the first failure is an increase
        [
            series("semif_refusals_total", "0x8 1x20", instance="fires", code="scoring_failed"),
            series("semif_refusals_total", "0x30", instance="quiet", code="scoring_failed"),
            series("semif_refusals_total", "0+1x30", instance="quiet", code="busy"),
        ],
        "3m",
        [{"instance": "fires", "code": "scoring_failed"}],
    ),
    "SemifScorerStalled": (
        # stuck: requests waiting, no call finishing; busy but moving; idle
        [
            series("semif_requests_in_progress", "1x30", instance="fires"),
            series(
                "semif_scorer_call_duration_seconds_count", "5x30", instance="fires", kind="direct"
            ),
            series("semif_requests_in_progress", "1x30", instance="quiet"),
            series(
                "semif_scorer_call_duration_seconds_count",
                "5+1x30",
                instance="quiet",
                kind="direct",
            ),
            series("semif_requests_in_progress", "0x30", instance="idle"),
            series(
                "semif_scorer_call_duration_seconds_count", "5x30", instance="idle", kind="direct"
            ),
        ],
        "2m",
        [{"instance": "fires"}],
    ),
    "SemifDrainTooLong": (
        # draining for 2 min against a 30 s grace; a drain that ended at 30 s; one within its
        # own longer grace (the bound is each replica's own gauge); one serving
        [
            series("semif_drain_elapsed_seconds", "0+15x30", instance="fires"),
            series("semif_shutdown_grace_seconds", "30x30", instance="fires"),
            series("semif_drain_elapsed_seconds", "0x4 15 30", instance="quiet"),
            series("semif_shutdown_grace_seconds", "30x6", instance="quiet"),
            series("semif_drain_elapsed_seconds", "0+15x30", instance="long_grace"),
            series("semif_shutdown_grace_seconds", "600x30", instance="long_grace"),
            series("semif_drain_elapsed_seconds", "0x30", instance="serving"),
            series("semif_shutdown_grace_seconds", "30x30", instance="serving"),
        ],
        "2m",
        [{"instance": "fires"}],
    ),
    # Audits (SEMIF_AUDIT_RATE): drift over its threshold with enough audits; under it; over it
    # with too few audits behind it
    "SemifPriorDrift": (
        [
            series("semif_prior_drift", "9x150", **AUDITED, instance="fires"),
            series("semif_prior_drift_threshold", "3x150", **AUDITED, instance="fires"),
            series("semif_audits_total", "40x150", **AUDITED, instance="fires", outcome="done"),
            series("semif_prior_drift", "2.9x150", **AUDITED, instance="quiet"),
            series("semif_prior_drift_threshold", "3x150", **AUDITED, instance="quiet"),
            series("semif_audits_total", "40x150", **AUDITED, instance="quiet", outcome="done"),
            series("semif_prior_drift", "9x150", **AUDITED, instance="few"),
            series("semif_prior_drift_threshold", "3x150", **AUDITED, instance="few"),
            series("semif_audits_total", "20x150", **AUDITED, instance="few", outcome="done"),
        ],
        "32m",
        [{"instance": "fires", **AUDITED}],
    ),
    # half the audited answers agree; all agree; half agree, but too few audits to judge
    "SemifDebiasDisagreement": (
        [
            series("semif_audit_agreements_total", "0+1x200", **AUDITED, instance="fires"),
            series("semif_audits_total", "0+2x200", **AUDITED, instance="fires", outcome="done"),
            series("semif_audit_agreements_total", "0+2x200", **AUDITED, instance="quiet"),
            series("semif_audits_total", "0+2x200", **AUDITED, instance="quiet", outcome="done"),
            series("semif_audit_agreements_total", "0+0.02x200", **AUDITED, instance="few"),
            series("semif_audits_total", "0+0.04x200", **AUDITED, instance="few", outcome="done"),
        ],
        "46m",
        [{"instance": "fires", **AUDITED}],
    ),
    # audits waiting and none done; waiting and being done; none waiting
    "SemifAuditStarved": (
        [
            series("semif_audits_pending", "3x200", instance="fires", workload="triage"),
            series("semif_audits_total", "5x200", **AUDITED, instance="fires", outcome="done"),
            series("semif_audits_pending", "3x200", instance="quiet", workload="triage"),
            series("semif_audits_total", "5+1x200", **AUDITED, instance="quiet", outcome="done"),
            series("semif_audits_pending", "0x200", instance="idle", workload="triage"),
            series("semif_audits_total", "5x200", **AUDITED, instance="idle", outcome="done"),
        ],
        "46m",
        [{"instance": "fires", "workload": "triage"}],
    ),
}


def rendered(template: str, labels: dict[str, str]) -> str:
    """An annotation as Prometheus renders it: the rules' templates name only labels."""
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda match: labels[match.group(1)], template)


def expected(rule: dict[str, Any], instance_labels: dict[str, str]) -> dict[str, Any]:
    labels = {**SERIES, **instance_labels, **rule["labels"]}
    return {
        "exp_labels": labels,
        "exp_annotations": {
            key: rendered(value, labels) for key, value in rule["annotations"].items()
        },
    }


def unit_tests(
    cases: dict[str, tuple[list[dict[str, str]], str, list[dict[str, str]]]],
) -> dict[str, Any]:
    alerts = promql.alerts()
    return {
        "rule_files": [str(prometheus.RULES)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "name": name,
                "interval": "15s",
                "input_series": inputs,
                "alert_rule_test": [
                    {
                        "eval_time": at,
                        "alertname": name,
                        "exp_alerts": [expected(alerts[name], labels) for labels in firing],
                    }
                ],
            }
            for name, (inputs, at, firing) in cases.items()
        ],
    }


def run_unit_tests(tmp_path: Path, cases: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "semif-serve.rules.test.yml"
    path.write_text(yaml.safe_dump(unit_tests(cases), sort_keys=False))
    return promtool("test", "rules", str(path))


def test_promtool_unit_tests_fire_every_alert_on_its_series_and_only_there(tmp_path: Path) -> None:
    done = run_unit_tests(tmp_path, CASES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_unit_test_that_expects_silence_from_the_firing_series_fails(
    tmp_path: Path, name: str
) -> None:
    """Each case can fail: claiming the firing instance stays silent is refused by promtool."""
    inputs, at, _ = CASES[name]
    done = run_unit_tests(tmp_path, {name: (inputs, at, [])})
    assert done.returncode != 0 and "FAILED" in done.stdout + done.stderr
