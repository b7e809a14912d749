#!/usr/bin/env bash
# The CUDA check on a lent device machine, run from the repository root:
#   bench/gpu/gpu_check.sh             on the card (SEMIF_DEVICE=cuda), at most about 5 minutes
#   bench/gpu/gpu_check.sh --dry-run   the same steps on the CPU, CUDA-only ones skipped
# Records go to $OUT (the device tool's folder) or bench/results/gpu_check: records.jsonl
# (one JSON line per check), summary.txt, gpu_check.log and the servers' logs.
# Needs no network. Wheels the device image lacks travel in .whl/ (bench/gpu/gpu_wheels.sh makes
# it here); when present they are installed into /tmp/site and put on PYTHONPATH. Other
# arguments go to `python -m bench gpu-check` (see its --help).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# This checkout's semif_serve and bench, whether or not the package is installed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
out=${OUT:-bench/results/gpu_check}
mkdir -p "$out"
# A hard stop well inside the device tool's 10-minute command limit; the Python side keeps
# its own softer budget (--budget-s, 300 s on the card) so the summary is normally written.
timeout --kill-after=10 "${GPU_CHECK_TIMEOUT_S:-360}" "$py" -m bench gpu-check --out "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
