#!/usr/bin/env bash
# A first look at one GPU or TPU in under 8 minutes: the throughput rows at a
# GPU-sized model (K = 8), a short training run of configs/default.py:gpu on
# synthetic tokens, MFU against the measured bf16 matmul rate and the nominal
# peak, and peak memory; the report goes to --out_dir (benchmarks/device_check.py
# has the details, docs/device.md the call on the accelerator machine).
#
#   benchmarks/device_check.sh --out_dir DIR            # on the accelerator
#   benchmarks/device_check.sh --dry_run --out_dir DIR  # toy sizes on CPU (CI)
#
# Runs on the interpreter's own packages: `--python=PY` (or $PYTHON; default
# python3). A module of benchmarks/device_wheels.txt that it lacks is installed
# from the wheels in `--wheels=DIR` (default .whl, made by
# benchmarks/device_bundle.sh) into a temporary folder on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
wheels=.whl
args=()
for arg in "$@"; do
  case $arg in
    --python=*) python=${arg#*=} ;;
    --wheels=*) wheels=${arg#*=} ;;
    *) args+=("$arg") ;;
  esac
done
# The lines of device_wheels.txt whose module this interpreter cannot find.
missing=$("$python" - <<'EOF'
import importlib.util

for line in open("benchmarks/device_wheels.txt"):
  if line.strip() and not line.startswith("#"):
    spec, module = line.split()
    if importlib.util.find_spec(module) is None:
      print(spec)
EOF
)
if [[ -n $missing ]]; then
  files=()
  for spec in $missing; do
    name=${spec%%==*} version=${spec#*==}
    found=$(ls "$wheels/${name//-/_}-$version-"*.whl 2>/dev/null | head -1 || true)
    if [[ -z $found ]]; then
      echo "[device_check] $spec is missing and no wheel of it is in $wheels:" \
        "run benchmarks/device_bundle.sh where pip works, and carry $wheels" >&2
      exit 1
    fi
    files+=("$found")
  done
  site=$(mktemp -d "${TMPDIR:-/tmp}/device_site.XXXXXX")
  echo "[device_check] installing into $site:" "${files[@]##*/}"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$site" "${files[@]}"
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
# JAX takes 75% of a GPU's memory at start by default: the throughput rows run
# in a child process beside this one, and the peak reported should be the run's.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
exec "$python" -m benchmarks.device_check "${args[@]}"
