#!/usr/bin/env bash
# A study's phases, in order, each run by two sweeps that share its runs (the runs
# are locked, so each one trains once). Resumable: run the same command again
# after a stop; a phase whose runs are all finished only writes its report.
#   experiments/phases.sh configs/studies/gossip_g1.py coarse tune report
#   experiments/phases.sh configs/studies/noloco_n1.py coarse,k8 tune,k8 report,k8
# PHASES_COPIES sets the sweeps per phase (default 2), PHASES_STAGGER the seconds
# between their starts (default 1). A sweep that fails stops
# the script before the next phase, which would read the failed phase's report.
set -euo pipefail
study=${1:?usage: experiments/phases.sh STUDY_FILE PHASE_ARG [PHASE_ARG ...]}
shift
(($#)) || { echo "experiments/phases.sh: no phase given for $study" >&2; exit 2; }
[[ -f $study ]] || { echo "experiments/phases.sh: no study file $study" >&2; exit 2; }
copies=${PHASES_COPIES:-2}
stagger=${PHASES_STAGGER:-1}
for arg in "$@"; do
  pids=()
  for ((i = 0; i < copies; i++)); do
    # One copy per core, pinned: on 2 cores a batch of study runs finishes 1.47x
    # sooner than one run at a time on both (docs/parallel_runs.json).
    pin=()
    if command -v taskset > /dev/null && ((copies <= $(nproc))); then pin=(taskset -c "$i"); fi
    "${pin[@]}" python -m experiments.sweep --study "$study:$arg" &
    pids+=($!)
    sleep "$stagger"
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done
