#!/usr/bin/env bash
# The evidence study's phases for one regime and corpus, in order, each run by
# two sweeps that share its runs (configs/studies/evidence.py). Resumable: run the
# same command again after a stop.
#   experiments/evidence.sh base shakespeare          # or: long python, ... quick
# EVIDENCE_FROM=coarse starts at that phase (the earlier ones' reports committed:
# a fresh checkout has no runs/ to resume from).
set -euo pipefail
regime=${1:?regime: base | long | many}
corpus=${2:?corpus: shakespeare | python}
mode=${3:-}
copies=${EVIDENCE_COPIES:-2}
phases=(regime coarse tune design report)
# The pruned regimes (many, long) have no regime phase: the report's tuned
# H = 60 against H = 10 says whether H matters (evidence.regime_phases).
first=regime
[[ $regime == many || $regime == long ]] && first=coarse
from=${EVIDENCE_FROM:-$first}
while [[ ${phases[0]} != "$from" ]]; do
  phases=("${phases[@]:1}")
  ((${#phases[@]})) || { echo "EVIDENCE_FROM: unknown phase $from" >&2; exit 2; }
done
for phase in "${phases[@]}"; do
  arg="$phase,$regime,$corpus${mode:+,$mode}"
  pids=()
  for ((i = 0; i < copies; i++)); do
    # One copy per core, pinned: on 2 cores a batch of study runs finishes 1.47x
    # sooner than one run at a time on both (docs/parallel_runs.json).
    pin=()
    if command -v taskset > /dev/null && ((copies <= $(nproc))); then pin=(taskset -c "$i"); fi
    "${pin[@]}" python -m experiments.sweep --study "configs/studies/evidence.py:$arg" &
    pids+=($!)
    sleep 1
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
