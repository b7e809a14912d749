"""Podman flags that run the image the way deploy/kubernetes/deployment.yaml declares it.

Rules: this module only translates the manifest into `podman run` arguments and probe
targets; it runs nothing and knows none of the check's steps (check.sh does). Every
field of the pod and container it reads is either mirrored or listed in NOT_MIRRORED
with the reason; any other field is an error, so a setting added to the manifest makes
the container check fail until someone decides how podman mirrors it. The two cannot
drift apart silently. Needs PyYAML (a dependency of transformers).

Usage (one argument per line, for bash's `mapfile -t`):
  python -m deploy.container.kube flags --models DIR --secrets DIR --publish 127.0.0.1:8001 --cpu
  python -m deploy.container.kube secret-files
  python -m deploy.container.kube health-path
  python -m deploy.container.kube metrics-port
  python -m deploy.container.kube liveness
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

DEPLOYMENT = Path(__file__).resolve().parent.parent / "kubernetes" / "deployment.yaml"
# Fields podman cannot or need not mirror on one host, and why.
NOT_MIRRORED = {
    "name": "the check names its own containers",
    "image": "the check runs the image it just built",
    "imagePullPolicy": "the image is local",
    "affinity": "node selection (GPU memory) is the scheduler's",
    "automountServiceAccountToken": "podman mounts no service-account token",
    "enableServiceLinks": "podman injects no service variables",
    "seccompProfile": "podman applies its default seccomp profile, as RuntimeDefault asks",
}
# Settings that only mean something on a CUDA device: a CPU run leaves them out (the
# server refuses SEMIF_VRAM_CAP_GIB with SEMIF_DEVICE=cpu).
GPU_ONLY_ENV = ("SEMIF_VRAM_CAP_GIB",)
# Mirrored fields. Of `resources` only the memory limit has a podman meaning on a CPU host
# (GPU count and scheduler requests do not); podman has no preStop, so `lifecycle` only
# shortens the stop timeout (stop_timeout).
POD_FIELDS = {"terminationGracePeriodSeconds", "securityContext", "containers", "volumes"}
CONTAINER_FIELDS = {
    "ports",
    "env",
    "resources",
    "securityContext",
    "volumeMounts",
    "startupProbe",
    "readinessProbe",
    "livenessProbe",
    "lifecycle",
}


def load(path: Path = DEPLOYMENT) -> dict[str, Any]:
    """The Deployment's pod spec, refusing fields this module does not translate."""
    (deployment,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Deployment"]
    return checked(deployment["spec"]["template"]["spec"])


def checked(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod spec, once every field of it and of its container is known here."""
    _known(pod, POD_FIELDS, "pod spec")
    (container,) = pod["containers"]
    _known(container, CONTAINER_FIELDS, "container")
    return pod


def _known(section: dict[str, Any], fields: set[str], where: str) -> None:
    unknown = set(section) - fields - set(NOT_MIRRORED)
    if unknown:
        raise ValueError(
            f"deployment.yaml {where} sets {sorted(unknown)}, which deploy/container/kube.py does not mirror"
        )


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["containers"]
    return container


def container_port(pod: dict[str, Any], port: int | str) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in _container(pod)["ports"] if p.get("name") == port]
    return int(number)


def user_flags(pod: dict[str, Any]) -> list[str]:
    """runAsUser/runAsGroup, and the container's privilege settings."""
    pod_security = pod["securityContext"]
    # fsGroup is mirrored by the group of the Secret's files (secret_files), not by a flag.
    _known(
        pod_security, {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup"}, "pod securityContext"
    )
    if not pod_security.get("runAsNonRoot") or pod_security["runAsUser"] == 0:
        raise ValueError("deployment.yaml must run as a non-root uid")
    security = _container(pod)["securityContext"]
    _known(
        security,
        {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities"},
        "container securityContext",
    )
    flags = ["--user", f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}"]
    if security.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    for capability in security.get("capabilities", {}).get("drop", []):
        flags += ["--cap-drop", capability.lower()]
    if security.get("readOnlyRootFilesystem"):
        # podman's --read-only adds its own tmpfs on /tmp, /var/tmp and /run; the manifest
        # mounts only what its volumes say, so those are turned off.
        flags += ["--read-only", "--read-only-tmpfs=false"]
    return flags


def secret_files(pod: dict[str, Any]) -> list[tuple[str, str, int]]:
    """Each file a Secret volume projects, as (path under the --secrets folder, mode, group):
    what the check must write so that the bind mount holds what the kubelet would (the file
    owned by root, its group the pod's fsGroup, the volume's defaultMode)."""
    group = int(pod["securityContext"].get("fsGroup", 0))
    files = []
    for volume in pod["volumes"]:
        if "secret" in volume:
            secret = volume["secret"]
            mode = f"{int(secret.get('defaultMode', 0o644)):04o}"
            for item in secret["items"]:
                files.append((f"{secret['secretName']}/{item['path']}", mode, group))
    return files


def mount_flags(pod: dict[str, Any], models: Path, secrets: Path | None) -> list[str]:
    """Each volumeMount: the PVC becomes a read-only bind of `models`, a Secret a read-only bind
    of its folder under `secrets`, an emptyDir a tmpfs."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    flags = []
    for mount in _container(pod)["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            if secrets is None:
                raise ValueError(f"volume {mount['name']!r} is a Secret: pass --secrets DIR")
            folder = secrets / volume["secret"]["secretName"]
            flags += ["--volume", f"{folder}:{mount['mountPath']}:ro"]
        elif "persistentVolumeClaim" in volume:
            read_only = mount.get("readOnly") and volume["persistentVolumeClaim"].get("readOnly")
            flags += ["--volume", f"{models}:{mount['mountPath']}:{'ro' if read_only else 'rw'}"]
        elif "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "")
            options = "rw,mode=1777" + (f",size={size.removesuffix('i').lower()}" if size else "")
            flags += ["--tmpfs", f"{mount['mountPath']}:{options}"]
        else:
            raise ValueError(f"volume {mount['name']!r} is not a PVC, a Secret or an emptyDir")
    return flags


def env_flags(pod: dict[str, Any], cpu: bool) -> list[str]:
    """Plain values as KEY=VALUE. Secrets come as files (a Secret volume), never as a value
    here: a `valueFrom` is refused rather than dropped."""
    flags = []
    for item in _container(pod)["env"]:
        if cpu and item["name"] in GPU_ONLY_ENV:
            continue
        if "value" not in item:
            raise ValueError(f"env {item['name']!r} is not a plain value")
        flags += ["--env", f"{item['name']}={item['value']}"]
    return flags


def stop_timeout(pod: dict[str, Any]) -> int:
    """Seconds podman waits after SIGTERM: the kubelet's grace counts from the start of
    preStop, and podman sends SIGTERM at once."""
    pre_stop = (
        _container(pod).get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    )
    return int(pod["terminationGracePeriodSeconds"]) - int(pre_stop)


def flags(
    pod: dict[str, Any], models: Path, publish: str | None, cpu: bool, secrets: Path | None = None
) -> list[str]:
    """Every `podman run` argument the manifest implies."""
    container = _container(pod)
    # `publish` is the Service's way in, the `http` port; the metrics port is Prometheus' inside
    # the cluster and is not published (the check scrapes it from inside the container).
    ports = [] if publish is None else [f"--publish={publish}:{container_port(pod, 'http')}"]
    memory = container.get("resources", {}).get("limits", {}).get("memory")
    limits = [] if memory is None else ["--memory", memory.removesuffix("i").lower()]
    return (
        user_flags(pod)
        + mount_flags(pod, models, secrets)
        + env_flags(pod, cpu)
        + ports
        + limits
        + ["--stop-timeout", str(stop_timeout(pod))]
    )


def health_path(pod: dict[str, Any]) -> tuple[str, int]:
    """The one (path, port) every httpGet probe asks."""
    targets = {
        (probe["httpGet"]["path"], container_port(pod, probe["httpGet"]["port"]))
        for name in ("startupProbe", "readinessProbe", "livenessProbe")
        if "httpGet" in (probe := _container(pod).get(name, {}))
    }
    (target,) = targets
    return target


def liveness(pod: dict[str, Any]) -> list[str]:
    """The liveness probe's exec command, to run with `podman exec`."""
    return list(_container(pod)["livenessProbe"]["exec"]["command"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.container.kube", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="what", required=True)
    run = sub.add_parser("flags", help="podman run arguments")
    run.add_argument(
        "--models", type=Path, required=True, help="host directory for the models volume"
    )
    run.add_argument(
        "--secrets",
        type=Path,
        required=True,
        help="host directory holding each Secret's files (see secret-files)",
    )
    run.add_argument("--publish", help="host address:port to publish the container port on")
    run.add_argument(
        "--cpu", action="store_true", help="leave out settings that apply only to CUDA"
    )
    sub.add_parser("health-path", help="path and port of the httpGet probes")
    sub.add_parser("metrics-port", help="the container port named metrics (SEMIF_METRICS_PORT)")
    sub.add_parser("liveness", help="the liveness probe's command")
    sub.add_parser(
        "secret-files", help="each Secret file to write under --secrets: path, mode, group"
    )
    args = parser.parse_args(argv)
    pod = load()
    if args.what == "flags":
        lines = flags(pod, args.models, args.publish, args.cpu, args.secrets)
    elif args.what == "health-path":
        lines = [str(part) for part in health_path(pod)]
    elif args.what == "secret-files":
        lines = [f"{path} {mode} {group}" for path, mode, group in secret_files(pod)]
    elif args.what == "metrics-port":
        lines = [str(container_port(pod, "metrics"))]
    else:
        lines = liveness(pod)
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
