"""deploy/container/kube.py: the podman flags the container check runs the image with are
the ones deploy/kubernetes/deployment.yaml declares, and they agree with the Containerfile.

The flags are derived from the manifest, so these tests hold the translation: what the
image needs (its uid, port, model path, health route) must be what the manifest asks,
and a manifest field nobody translated stops the check instead of being dropped.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.container import kube

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = (ROOT / "Containerfile").read_text()
MODELS = Path("/srv/models")
SECRETS = Path("/srv/secrets")


@pytest.fixture()
def pod() -> dict[str, Any]:
    return kube.load()


def pairs(flags: list[str], name: str) -> list[str]:
    """The values given to each occurrence of a two-word flag."""
    return [flags[i + 1] for i, flag in enumerate(flags) if flag == name]


def image_env(name: str) -> str:
    (value,) = re.findall(rf"^\s+{name}=(\S+?)\s*\\?$", CONTAINERFILE, re.MULTILINE)
    return value


def test_the_user_is_the_images_non_root_uid(pod: dict[str, Any]) -> None:
    flags = kube.flags(pod, MODELS, None, cpu=True, secrets=SECRETS)
    (user,) = re.findall(r"^USER (\S+)$", CONTAINERFILE, re.MULTILINE)
    assert pairs(flags, "--user") == [user] and not user.startswith("0")


def test_root_is_read_only_and_only_the_manifests_volumes_are_mounted(pod: dict[str, Any]) -> None:
    flags = kube.flags(pod, MODELS, None, cpu=True, secrets=SECRETS)
    assert "--read-only" in flags and "--read-only-tmpfs=false" in flags
    assert pairs(flags, "--volume") == [
        f"{MODELS}:{image_env('HF_HOME')}:ro",
        f"{SECRETS}/semif-serve-tokens:/etc/semif/tokens:ro",
    ]
    assert pairs(flags, "--tmpfs") == ["/tmp:rw,mode=1777,size=1g"]
    assert pairs(flags, "--cap-drop") == ["all"] and pairs(flags, "--security-opt") == [
        "no-new-privileges"
    ]


def test_env_is_the_manifests_and_the_tokens_come_as_a_file(pod: dict[str, Any]) -> None:
    gpu, cpu = (
        pairs(kube.flags(pod, MODELS, None, cpu=c, secrets=SECRETS), "--env") for c in (False, True)
    )
    assert "SEMIF_API_TOKENS_FILE=/etc/semif/tokens/callers" in cpu
    assert not any(e.split("=")[0] in ("SEMIF_API_TOKEN", "SEMIF_API_KEY") for e in cpu)
    assert f"SEMIF_PORT={image_env('SEMIF_PORT')}" in cpu
    assert set(gpu) - set(cpu) == {"SEMIF_VRAM_CAP_GIB=14"}  # the server refuses it on CPU


def test_probes_ask_the_images_port_and_healthcheck_route(pod: dict[str, Any]) -> None:
    path, port = kube.health_path(pod)
    assert (path, str(port)) == ("/health", image_env("SEMIF_PORT"))
    assert re.search(rf"^EXPOSE {port}$", CONTAINERFILE, re.MULTILINE)
    (healthcheck,) = [line for line in CONTAINERFILE.splitlines() if "urlopen(" in line]
    assert f"'{path}'" in healthcheck
    assert kube.liveness(pod)[0] == "python" and f"'{path}'" in kube.liveness(pod)[-1]


def test_published_port_and_stop_timeout(pod: dict[str, Any]) -> None:
    flags = kube.flags(pod, MODELS, "127.0.0.1:18741", cpu=True, secrets=SECRETS)
    assert [flag for flag in flags if flag.startswith("--publish")] == [
        "--publish=127.0.0.1:18741:8000"
    ]  # http alone
    assert pairs(flags, "--stop-timeout") == [
        "40"
    ]  # 45 s grace, less the 5 s preStop podman cannot run
    assert "--publish" not in " ".join(kube.flags(pod, MODELS, None, cpu=True, secrets=SECRETS))


@pytest.mark.parametrize("where", ["pod", "container", "container securityContext"])
def test_an_untranslated_manifest_field_stops_the_check(pod: dict[str, Any], where: str) -> None:
    changed = copy.deepcopy(pod)
    section = {
        "pod": changed,
        "container": changed["containers"][0],
        "container securityContext": changed["containers"][0]["securityContext"],
    }[where]
    section["procMount"] = "Unmasked"
    with pytest.raises(ValueError, match="procMount"):
        kube.checked(changed)
        kube.flags(changed, MODELS, None, cpu=True, secrets=SECRETS)


def test_a_root_manifest_is_refused(pod: dict[str, Any]) -> None:
    changed = copy.deepcopy(pod)
    changed["securityContext"]["runAsUser"] = 0
    with pytest.raises(ValueError, match="non-root"):
        kube.flags(changed, MODELS, None, cpu=True, secrets=SECRETS)


def test_the_secret_files_are_the_kubelets(pod: dict[str, Any]) -> None:
    """What the check writes under --secrets is what the kubelet projects: the item's path in
    the Secret's folder, the volume's defaultMode, the pod's fsGroup."""
    assert kube.secret_files(pod) == [("semif-serve-tokens/callers", "0440", 10001)]


def test_a_secret_volume_needs_its_folder(pod: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="--secrets"):
        kube.flags(pod, MODELS, None, cpu=True)


def test_a_token_in_an_environment_variable_is_refused(pod: dict[str, Any]) -> None:
    """A Secret passed as a variable never changes in a running pod: the check does not mirror it."""
    changed = copy.deepcopy(pod)
    changed["containers"][0]["env"].append(
        {"name": "SEMIF_API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "token"}}}
    )
    with pytest.raises(ValueError, match="SEMIF_API_TOKEN"):
        kube.flags(changed, MODELS, None, cpu=True, secrets=SECRETS)
