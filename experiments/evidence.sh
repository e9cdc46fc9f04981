#!/usr/bin/env bash
# The evidence study's phases for one regime and corpus, in order, each run by
# two sweeps that share its runs (configs/studies/evidence.py, through
# experiments/phases.sh). Resumable: run the same command again after a stop.
#   experiments/evidence.sh base shakespeare          # or: long python, ... quick
# EVIDENCE_FROM=coarse starts at that phase (the earlier ones' reports committed:
# a fresh checkout has no runs/ to resume from); EVIDENCE_COPIES sets the sweeps
# per phase (default 2).
set -euo pipefail
regime=${1:?regime: base | long | many}
corpus=${2:?corpus: shakespeare | python}
mode=${3:-}
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
args=()
for phase in "${phases[@]}"; do args+=("$phase,$regime,$corpus${mode:+,$mode}"); done
PHASES_COPIES=${EVIDENCE_COPIES:-2} exec "$(dirname "$0")/phases.sh" configs/studies/evidence.py "${args[@]}"
