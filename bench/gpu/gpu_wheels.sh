#!/usr/bin/env bash
# Prepare .whl/ (git-ignored) here, for bench/gpu/gpu_check.sh on the device machine.
# The device image has Python 3.12, torch 2.11+cu130, transformers 5.17 and h11 but not the
# scorer package: fastjev==0.2.0 (pure Python, no base dependencies). h11 travels too, pinned
# to what pyproject.toml allows (>=0.16.0,<0.17), because the image's version is not recorded.
# Flags as the device tool's README gives them; pure-Python wheels match every platform.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
rm -rf .whl
mkdir .whl
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl fastjev==0.2.0 h11==0.16.0
ls -l .whl
