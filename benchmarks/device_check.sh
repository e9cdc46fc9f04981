#!/usr/bin/env bash
# A first look at one GPU or TPU in under 5 minutes: the throughput rows at a
# GPU-sized model (K = 8), a short training run of configs/default.py:gpu, MFU
# against the device's nominal bf16 peak and peak memory; the report goes to
# docs/device/<device kind>.{json,md} (benchmarks/device_check.py has the details).
#
#   benchmarks/device_check.sh               # on the accelerator
#   benchmarks/device_check.sh --dry_run     # toy sizes on CPU (CI), seconds
#   benchmarks/device_check.sh --out_dir /tmp/device
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m benchmarks.device_check "$@"
