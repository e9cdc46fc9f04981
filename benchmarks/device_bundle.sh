#!/usr/bin/env bash
# The wheels the accelerator machine's image lacks and the device check needs
# (benchmarks/device_wheels.txt), for CPython 3.12 on x86-64 Linux, into .whl/
# (git-ignored): a `run` call names .whl in its carry (docs/device.md). Fails
# if they come to more than 50 MiB (what travels is 64 MiB in all).
#
#   benchmarks/device_bundle.sh
#   benchmarks/device_bundle.sh --dest DIR --python-version 3.11   # another Python
#
# Needs pip and the package registry; $PYTHON (default python3) runs pip.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.whl
version=3.12
python=${PYTHON:-python3}
while [[ $# -gt 0 ]]; do
  case $1 in
    --dest) dest=$2; shift 2 ;;
    --python-version) version=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
specs=$(awk '!/^#/ && NF {print $1}' benchmarks/device_wheels.txt)
mkdir -p "$dest"
rm -f "$dest"/*.whl  # one version of each: two would stop the install there
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
# shellcheck disable=SC2086  # one word per spec
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$version" \
  --implementation cp "${platforms[@]}" -d "$dest" $specs
bytes=$(cat "$dest"/*.whl | wc -c)
ls -l "$dest"/*.whl | awk '{print $5, $NF}'
echo "[device_bundle] $(ls "$dest"/*.whl | wc -l) wheels, $((bytes / 1024)) KiB in $dest"
if (( bytes > 50 * 1024 * 1024 )); then
  echo "[device_bundle] more than 50 MiB: too much to travel" >&2
  exit 1
fi
