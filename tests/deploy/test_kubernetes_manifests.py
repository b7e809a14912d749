"""deploy/kubernetes: schema-valid offline, and its numbers agree with each other and
with the Containerfile and the server's settings.

kubernetes-validate (the `test` extra) ships the Kubernetes JSON schemas, so this needs
no cluster and no network; strict mode also refuses misspelt fields. The consistency
tests read the manifests as data: a grace period shorter than preStop plus the drain, a
probe on the wrong port or a selector that matches nothing fails here, not in production.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from semif_serve import config
from semif_serve.service import callers


def required(name: str) -> ModuleType:
    """A module from the `test` extra: skipped without it, except under CI=true, where it fails."""
    try:
        return importlib.import_module(name)
    except ImportError:
        message = f"{name} is not installed (pip install -e '.[test]' brings kubernetes-validate)"
        if os.environ.get("CI") == "true":
            raise RuntimeError(message) from None
        pytest.skip(message, allow_module_level=True)


yaml = required("yaml")
kubernetes_validate = required("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
# The oldest release whose schema has the preStop `sleep` action in beta (on by default), and the newest shipped.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def documents() -> dict[str, dict[str, Any]]:
    """Every manifest by kind."""
    found = {}
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found[document["kind"]] = document
    return found


@pytest.fixture(scope="module")
def kinds() -> dict[str, dict[str, Any]]:
    return documents()


@pytest.fixture(scope="module")
def container(kinds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (only,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_the_three_objects_are_there(kinds: dict[str, dict[str, Any]]) -> None:
    assert set(kinds) == {"Deployment", "Service", "PodDisruptionBudget"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", sorted(MANIFESTS.glob("*.yaml")), ids=lambda p: p.name)
def test_manifest_is_schema_valid(path: Path, version: str) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(document, version, strict=True)


def test_strict_validation_refuses_a_misspelt_field(kinds: dict[str, dict[str, Any]]) -> None:
    """The validator is not a rubber stamp: one wrong letter in a security field fails."""
    broken = yaml.safe_load((MANIFESTS / "deployment.yaml").read_text())
    security = broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    security["readOnlyRootFileSystem"] = security.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_grace_period_outlasts_prestop_and_the_drain(
    kinds: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = float(env_of(container)["SEMIF_SHUTDOWN_GRACE_S"])
    config.load(
        {"SEMIF_API_TOKEN": "x" * 32, "SEMIF_SHUTDOWN_GRACE_S": str(drain)}
    )  # a value the server accepts
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain
    # preStop itself must leave the server time to drain.
    assert pre_stop < pod["terminationGracePeriodSeconds"] - drain


def test_one_gpu_per_pod_and_the_card_holds_the_vram_cap(
    kinds: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert resources["requests"].get("nvidia.com/gpu", 1) == resources["limits"]["nvidia.com/gpu"]
    cap_gib = float(env_of(container)["SEMIF_VRAM_CAP_GIB"])
    terms = kinds["Deployment"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    (memory,) = [
        e for term in terms for e in term["matchExpressions"] if e["key"] == "nvidia.com/gpu.memory"
    ]
    assert memory["operator"] == "Gt"
    smallest_card_mib = int(memory["values"][0]) + 1
    assert cap_gib * 1024 <= smallest_card_mib


def test_non_root_read_only_root_and_the_image_user(
    kinds: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    containerfile = (ROOT / "Containerfile").read_text()
    uid = re.search(r"useradd [^\n]*--uid (\d+)", containerfile).group(1)
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert re.search(rf"^USER {uid}(:\d+)?$", containerfile, re.M)


def test_tokens_file_from_a_secret_volume_the_server_accepts(
    kinds: dict[str, dict[str, Any]], container: dict[str, Any], tmp_path: Path
) -> None:
    """The callers come from a Secret mounted as a folder (a subPath mount never sees an update,
    an environment variable never changes in a running pod), in a mode the server's own reader
    accepts and the server's group can read, and no token rides in an environment variable."""
    env = env_of(container)
    assert not env.keys() & {"SEMIF_API_TOKEN", "SEMIF_API_KEY"}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and "subPath" not in mount
    (item,) = volume["secret"]["items"]
    assert env["SEMIF_API_TOKENS_FILE"] == f"{mount['mountPath']}/{item['path']}"
    mode = volume["secret"]["defaultMode"]
    assert (
        mode & 0o040 and pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    )
    tokens = tmp_path / "callers"
    tokens.write_text("ranker " + "r" * 32 + "\n")
    tokens.chmod(mode)
    assert callers.load(str(tokens)).identify(b"r" * 32) == "ranker"


def test_model_cache_read_only(kinds: dict[str, dict[str, Any]], container: dict[str, Any]) -> None:
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (models,) = [v for v in pod["volumes"] if v["name"] == "models"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "models"]
    assert models["persistentVolumeClaim"]["readOnly"] is True and mount["readOnly"] is True
    # The image reads the cache from HF_HOME; the mount must be there.
    assert re.search(
        rf"HF_HOME={re.escape(mount['mountPath'])}\b", (ROOT / "Containerfile").read_text()
    )


def test_probes_ports_and_selectors_line_up(
    kinds: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    ports = {port["name"]: port for port in container["ports"]}
    port, metrics = ports.pop("http"), ports.pop("metrics")
    assert not ports  # nothing else is opened
    assert (
        metrics["containerPort"]
        == int(env_of(container)["SEMIF_METRICS_PORT"])
        != port["containerPort"]
    )
    image_port = re.search(r"SEMIF_PORT=(\d+)", (ROOT / "Containerfile").read_text()).group(1)
    assert port["containerPort"] == int(env_of(container)["SEMIF_PORT"]) == int(image_port)
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": port["name"]}
    liveness = " ".join(container["livenessProbe"]["exec"]["command"])
    assert "/health" in liveness and f"'127.0.0.1', {port['containerPort']}," in liveness
    assert container["livenessProbe"]["timeoutSeconds"] > 4  # the probe's own client timeout
    labels = kinds["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (
        kinds["Service"]["spec"]["selector"],
        kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
        kinds["Deployment"]["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items()
    (service_port,) = kinds["Service"]["spec"][
        "ports"
    ]  # callers reach http only, never the metrics port
    assert service_port["targetPort"] == port["name"]


def test_disruptions_take_one_pod_at_a_time(kinds: dict[str, dict[str, Any]]) -> None:
    deployment = kinds["Deployment"]["spec"]
    assert (
        kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"]
        == deployment["strategy"]["rollingUpdate"]["maxUnavailable"]
        == 1
    )
    assert deployment["replicas"] >= 2  # with one, any disruption is an outage


def test_liveness_outlasts_a_drain(container: dict[str, Any]) -> None:
    """A draining server has closed its listener, so every probe is refused until it exits
    (at most SEMIF_SHUTDOWN_GRACE_S): liveness must not give up on it before then."""
    liveness = container["livenessProbe"]
    drain = float(env_of(container)["SEMIF_SHUTDOWN_GRACE_S"])
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > drain


def test_liveness_passes_on_any_answer_and_fails_on_none(
    container: dict[str, Any], tmp_path: Path
) -> None:
    """The manifest's own liveness command against a real server: it passes on 200 and on a
    503 (over SEMIF_MAX_CONNECTIONS, where an httpGet probe would fail and restart a healthy
    server), and fails once the server has stopped listening (draining, or gone)."""
    import asyncio
    import signal
    import subprocess
    import sys

    from bench.common import procs
    from bench.common.loadgen import Connection, call

    command = container["livenessProbe"]["exec"]["command"]
    assert command[0] == "python"
    token = "k8s-token-" + "0123456789abcdef" * 2
    env = {"SEMIF_SCORER": "stub", "SEMIF_MAX_CONNECTIONS": "1", "SEMIF_SHUTDOWN_GRACE_S": "10"}

    def live(port: int) -> int:
        argv = [sys.executable, *(part.replace("8000", str(port)) for part in command[1:])]
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode

    async def while_full(server: procs.Running) -> tuple[int, int]:
        held = await Connection.open(server.target)  # the one connection allowed
        try:
            await held.request(server.target, "GET", "/health")
            health = await call(server.target, "GET", "/health")  # what readiness would see
            return health.status, await asyncio.to_thread(live, server.target.port)
        finally:
            await held.close()

    with procs.semif_serve(env, token, log_dir=tmp_path) as server:
        assert live(server.target.port) == 0
        assert asyncio.run(while_full(server)) == (503, 0)
        os.killpg(server.process.pid, signal.SIGTERM)
        server.process.wait(15)
        assert live(server.target.port) != 0
