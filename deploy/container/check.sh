#!/usr/bin/env bash
# The container check: build the CPU variant of the Containerfile and run it as an
# operator would, with the settings deploy/kubernetes/deployment.yaml declares.
#
# Rules: this script only orchestrates podman and names the step; the manifest's flags
# come from deploy/container/kube.py (never written out here), and every assertion that
# needs a Python is in deploy/container/probe.py (stdlib only, so the image's own Python
# runs it too). Each step prints `== step`; a failure ends the run with exit 1 and one
# line `container check FAILED at <step>: <what>`. Nothing is left running: the trap
# removes the containers and the host server it started.
#
# Cached in $SEMIF_CONTAINER_CACHE (default ~/.cache/semif-serve/container): the torch
# CPU wheel (downloaded once on the host) and the tiny model; podman's own store keeps
# the debootstrap base and the build layers, so a second run rebuilds nothing that did
# not change. A restricted host (hybrid cgroups, no CAP_SYS_RESOURCE, as on CI) needs
# runc and explicit ulimits; HEALTHCHECK survives only in docker format.
#
#   deploy/container/check.sh            # after .ci/run's venv: SEMIF_VENV=.venv
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${SEMIF_VENV:-.venv}
CACHE=${SEMIF_CONTAINER_CACHE:-$HOME/.cache/semif-serve/container}
BASE=localhost/semif-serve-base:bookworm
IMAGE=localhost/semif-serve:cpu
TORCH_VERSION=2.13.0+cpu   # the `cpu` extra's torch, as a local CPU build
HOST_PORT=18741            # the container's port, published on loopback
OUTSIDE_PORT=18742         # the same snapshot served by the host venv
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=32768:32768)
NAMES=(semif-check-tiny semif-check-offline semif-check-drain)
PY="$VENV/bin/python"
WORK=$(mktemp -d)
STEP=setup
OUTSIDE_PID=

fail() { echo "container check FAILED at $STEP: $*" >&2; STEP=reported; exit 1; }
step() { STEP=$1; echo "== $1 ($(date -u +%T))"; }
cleanup() {
    local rc=$?
    for name in "${NAMES[@]}"; do "${PODMAN[@]}" rm --force --time 0 "$name" >/dev/null 2>&1 || true; done
    if [ -n "$OUTSIDE_PID" ]; then kill "$OUTSIDE_PID" 2>/dev/null || true; wait "$OUTSIDE_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
    if [ "$rc" -ne 0 ] && [ "$STEP" != reported ]; then echo "container check FAILED at $STEP (exit $rc)" >&2; fi
}
trap cleanup EXIT
probe() { "$PY" -m deploy.container.probe "$@"; }
inside() { local name=$1; shift; "${PODMAN[@]}" exec -i --env SEMIF_API_TOKEN "$name" python - "$@" < deploy/container/probe.py; }
# The client's token (probe.py's bearer, passed by name, never on a command line); the
# container reads it from the tokens file the kubernetes-flags step writes, as from its Secret.
SEMIF_API_TOKEN=$("$PY" -c "import secrets; print(secrets.token_urlsafe(36))")
export SEMIF_API_TOKEN

step install
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc debootstrap >/dev/null
fi
podman --version

step base
# No registry is reachable from CI: a Debian 12 base with python3.11 from the apt mirror.
if ! "${PODMAN[@]}" image exists "$BASE"; then
    root="$WORK/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3 \
        bookworm "$root" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 \
        || { tail -n 5 "$WORK/debootstrap.log" >&2; fail "debootstrap"; }
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" -c . | "${PODMAN[@]}" import --change 'CMD ["python3"]' - "$BASE" >/dev/null
    rm -rf "$root"
fi

step wheelhouse
# torch's CPU build, fetched once on the host: pip inside the build would resolve
# torch==2.13.0 to the CUDA build (GBs of nvidia wheels).
wheelhouse="$CACHE/wheelhouse"
mkdir -p "$wheelhouse"
if ! compgen -G "$wheelhouse/torch-${TORCH_VERSION}-*.whl" >/dev/null; then
    "$VENV/bin/pip" download -q --retries 1 --no-deps --only-binary :all: -d "$wheelhouse" \
        --extra-index-url https://download.pytorch.org/whl/cpu "torch==$TORCH_VERSION" || fail "pip download torch==$TORCH_VERSION"
fi

step build
ca=/etc/ssl/certs/ca-certificates.crt   # the host's CA bundle: pip inside the build trusts what the host trusts
started=$SECONDS
"${PODMAN[@]}" build --format docker --layers -t "$IMAGE" -f Containerfile \
    --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_VERSION="$TORCH_VERSION" --build-arg TORCH_INDEX= \
    --build-arg SCORER=fastjev --build-arg SCORER_EXTRA=fastjev --build-arg PIP_CERT=/run/host-ca.crt \
    -v "$wheelhouse:/wheelhouse:ro" -v "$ca:/run/host-ca.crt:ro" . >"$WORK/build.log" 2>&1 \
    || { tail -n 20 "$WORK/build.log" >&2; fail "podman build"; }
echo "built in $((SECONDS - started)) s; $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1 / 1e9}')"

step tiny-model
models="$CACHE/tiny"
mkdir -p "$models"
"$VENV/bin/semif-serve" tiny-model --out "$models" >"$WORK/tiny.env"
chmod -R a+rX "$models"   # uid 10001 reads it through the read-only mount
model=$(sed -n 's/^SEMIF_MODEL=//p' "$WORK/tiny.env")
revision=$(sed -n 's/^SEMIF_REVISION=//p' "$WORK/tiny.env")
if [ -z "$model" ] || [ -z "$revision" ]; then fail "tiny-model printed no SEMIF_MODEL/SEMIF_REVISION"; fi
TINY=(--env SEMIF_DEVICE=cpu --env SEMIF_MODEL="$model" --env SEMIF_REVISION="$revision")

step kubernetes-flags
# Each Secret file as the kubelet projects it: owned by root, the pod's fsGroup, its defaultMode.
secrets="$WORK/secrets"
mapfile -t SECRET_FILES < <("$PY" -m deploy.container.kube secret-files)
[ "${#SECRET_FILES[@]}" = 1 ] || fail "expected one Secret file (the tokens file), got ${#SECRET_FILES[@]}"
read -r file mode group <<<"${SECRET_FILES[0]}"
mkdir -p "$secrets/$(dirname "$file")"
printf 'check %s\n' "$SEMIF_API_TOKEN" >"$secrets/$file"
chown "0:$group" "$secrets/$file" && chmod "$mode" "$secrets/$file"
mapfile -t KUBE < <("$PY" -m deploy.container.kube flags --models "$models" --secrets "$secrets" --publish "127.0.0.1:$HOST_PORT" --cpu)
[ "${#KUBE[@]}" -gt 0 ] || fail "deploy/container/kube.py could not mirror deployment.yaml"
mapfile -t KUBE_OFFLINE < <("$PY" -m deploy.container.kube flags --models "$models" --secrets "$secrets" --cpu)
mapfile -t HEALTH < <("$PY" -m deploy.container.kube health-path)
mapfile -t LIVENESS < <("$PY" -m deploy.container.kube liveness)
metrics_port=$("$PY" -m deploy.container.kube metrics-port)
health_path=${HEALTH[0]}
[ "${HEALTH[1]}" = 8000 ] || fail "the probes ask port ${HEALTH[1]}, the image listens on 8000"
printf '%s ' "${KUBE[@]}"; echo

step start
"${PODMAN[@]}" run -d --name semif-check-tiny "${LIMITS[@]}" "${KUBE[@]}" "${TINY[@]}" "$IMAGE" >/dev/null
started=$SECONDS
probe wait "http://127.0.0.1:$HOST_PORT$health_path" --seconds 180 || fail "$health_path never answered 200"
echo "ready $((SECONDS - started)) s after start"

step non-root
[ "$("${PODMAN[@]}" inspect --format '{{.HostConfig.ReadonlyRootfs}}' semif-check-tiny)" = true ] || fail "root filesystem not read-only"
inside semif-check-tiny confined --uid 10001 --read-only / --read-only /opt/venv --read-only /models --writable /tmp \
    || fail "not confined"

step health
"${PODMAN[@]}" healthcheck run semif-check-tiny || fail "podman healthcheck run: not healthy (HEALTHCHECK dropped? build in docker format)"
health=$("${PODMAN[@]}" inspect --format '{{.State.Health.Status}}' semif-check-tiny)
[ "$health" = healthy ] || fail "podman reports the container $health, not healthy"
echo "HEALTHCHECK: $health"
"${PODMAN[@]}" exec semif-check-tiny "${LIVENESS[@]}" || fail "the liveness probe's command failed"
# The manifest's metrics port (SEMIF_METRICS_PORT), scraped from inside like Prometheus in the pod network.
"${PODMAN[@]}" exec semif-check-tiny python -c "import http.client; c = http.client.HTTPConnection('127.0.0.1', $metrics_port, timeout=4); c.request('GET', '/metrics'); r = c.getresponse(); body = r.read(); assert r.status == 200 and b'semif_drain_elapsed_seconds 0.0' in body, r.status" \
    || fail "/metrics did not answer on the metrics port $metrics_port"
echo "metrics port $metrics_port: /metrics 200"

step reload
# docs/operating.md's podman line: SIGHUP to the container's PID 1 by the container's name. The
# callers come from the tokens file the Secret mounts, so the reload logs the file re-read with its
# callers, and the server keeps serving.
reloaded='SIGHUP: [^ ]* reloaded: [0-9]+ callers'
"${PODMAN[@]}" kill --signal HUP semif-check-tiny >/dev/null || fail "podman kill --signal HUP"
for _ in $(seq 50); do
    "${PODMAN[@]}" logs semif-check-tiny 2>&1 | grep -Eq "$reloaded" && break
    sleep 0.2
done
"${PODMAN[@]}" logs semif-check-tiny 2>&1 | grep -Eq "$reloaded" \
    || { "${PODMAN[@]}" logs semif-check-tiny 2>&1 | tail -n 5 >&2; fail "SIGHUP: no reload line in the log"; }
probe wait "http://127.0.0.1:$HOST_PORT$health_path" --seconds 10 || fail "SIGHUP stopped the server"
echo "SIGHUP by podman kill: reloaded, still serving"

step parity
probe decide "http://127.0.0.1:$HOST_PORT" --out "$WORK/inside.json" || fail "/decide in the container"
HF_HOME="$models" HF_HUB_OFFLINE=1 SEMIF_SCORER=fastjev SEMIF_PORT=$OUTSIDE_PORT SEMIF_DEVICE=cpu \
    SEMIF_MODEL="$model" SEMIF_REVISION="$revision" "$VENV/bin/semif-serve" 2>"$WORK/outside.log" &
OUTSIDE_PID=$!
probe wait "http://127.0.0.1:$OUTSIDE_PORT/health" --seconds 180 || { tail -n 5 "$WORK/outside.log" >&2; fail "the host server never became healthy"; }
probe decide "http://127.0.0.1:$OUTSIDE_PORT" --out "$WORK/outside.json" || fail "/decide on the host"
probe same "$WORK/inside.json" "$WORK/outside.json" || fail "the container and the host venv disagree"
kill "$OUTSIDE_PID"; wait "$OUTSIDE_PID" || true; OUTSIDE_PID=

step logs
"${PODMAN[@]}" stop semif-check-tiny >/dev/null
"${PODMAN[@]}" logs semif-check-tiny >"$WORK/tiny.log" 2>&1
probe logs "$WORK/tiny.log" || fail "stderr is not clean JSON"

step offline
"${PODMAN[@]}" run -d --name semif-check-offline --network none "${LIMITS[@]}" "${KUBE_OFFLINE[@]}" "${TINY[@]}" "$IMAGE" >/dev/null
inside semif-check-offline wait "http://127.0.0.1:8000$health_path" --seconds 180 || fail "--network none: never healthy"
interfaces=$("${PODMAN[@]}" exec semif-check-offline ls /sys/class/net | tr '\n' ' ')
[ "$interfaces" = "lo " ] || fail "--network none, yet the container has interfaces: $interfaces"
inside semif-check-offline decide http://127.0.0.1:8000 || fail "--network none: /decide"
"${PODMAN[@]}" rm --force --time 0 semif-check-offline >/dev/null
echo "served with no network: interfaces $interfaces"

step drain
for i in "${!KUBE[@]}"; do [ "${KUBE[$i]}" != --stop-timeout ] || grace=${KUBE[$((i + 1))]}; done
"${PODMAN[@]}" run -d --name semif-check-drain "${LIMITS[@]}" "${KUBE[@]}" \
    --env SEMIF_SCORER=stub --env SEMIF_STUB_DELAY_MS=8000 "$IMAGE" >/dev/null
probe wait "http://127.0.0.1:$HOST_PORT$health_path" --seconds 60 || fail "the stub never became healthy"
probe decide "http://127.0.0.1:$HOST_PORT" --out "$WORK/drain.json" & in_flight=$!
for _ in $(seq 100); do   # up to 20 s for the request to hold its admission slot
    curl -s "http://127.0.0.1:$HOST_PORT/metrics" | grep -q '^semif_requests_in_progress 1' && break
    sleep 0.2
done
curl -s "http://127.0.0.1:$HOST_PORT/metrics" | grep -q '^semif_requests_in_progress 1' || fail "the stub request never was in flight"
started=$SECONDS
"${PODMAN[@]}" stop semif-check-drain >/dev/null
took=$((SECONDS - started))
wait "$in_flight" || fail "the in-flight request did not finish 200"
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' semif-check-drain)
[ "$code" = 0 ] || fail "exit code $code after podman stop, not 0"
[ "$took" -lt "$grace" ] || fail "stop took $took s, the grace is $grace s"
echo "in-flight request 200; exit 0 after $took s (grace $grace s)"

step minimal
"${PODMAN[@]}" run --rm -i "${LIMITS[@]}" --network none "$IMAGE" python - minimal < deploy/container/probe.py \
    || fail "the runtime image is not minimal"
echo "image size: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.2f GB", $1 / 1e9}')"

STEP=passed
echo "container check passed"
