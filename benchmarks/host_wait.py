"""How much host work is there per round, and how much of it could the
trainer's one-round-late read hide? ``--repeats`` runs of the trainer, one
process.

  python -m benchmarks.host_wait --config configs/default.py --total_steps 300 \
      --repeats 3 --out docs/host_wait.json

The trainer dispatches round ``r + 1`` before it reads round ``r``
(``trainer.py``): host work then runs while the device trains. Each run is
``trainer.train_and_evaluate`` in a fresh temporary workdir. From its
metrics.jsonl, per round after the first (which compiles):

* ``interval_s``: wall time between the host's reads of consecutive rounds
  (``wall_time`` differences), i.e. the round's cost as the run sees it;
* ``host_wait_s``: the host blocked reading the round's device values;
* ``host_busy_s = interval_s - host_wait_s``: the host's own work in that
  interval (logging, evaluation reads, checkpoint starts, data, staging,
  dispatch). A blocking loop would leave the device idle for that long each
  round; here it runs while the device trains the next round, so a round
  whose read still waited (``host_wait_s`` > 1 ms) had no gap before the next.

Reports medians per run and over the runs, and ``host_busy_share``, the host's
own work as a share of a round: the most the one-round-late read can hide.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile

from absl import app, flags

from benchmarks import render
from ml_collections import config_flags

from autoloco_jax.run import metrics as metrics_lib, trainer

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Run config.")
_TOTAL = flags.DEFINE_integer("total_steps", 300, "Inner steps per run.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Runs of the trainer.")
_OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")


def round_timings(records: list[dict]) -> dict:
  """Medians over rounds 2.. of a run's records: interval, host wait, host busy,
  and the rounds whose read did not wait (the device may have idled)."""
  wall = [r["wall_time"] for r in records]
  intervals = [b - a for a, b in zip(wall, wall[1:])]
  waits = [r["host_wait_s"] for r in records[1:]]
  busy = [i - w for i, w in zip(intervals, waits)]
  med = lambda xs: statistics.median(xs) if xs else float("nan")
  return dict(
      rounds=len(records),
      interval_s=med(intervals),
      host_wait_s=med(waits),
      host_busy_s=med(busy),
      data_wait_s=med([r["data_wait_s"] for r in records[1:]]),
      reads_without_wait=sum(w < 1e-3 for w in waits),
  )


def run_once(config) -> dict:
  """One training run in a temporary workdir: its round timings and summary."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.log.progress = False
    config.log.tensorboard = False
  with tempfile.TemporaryDirectory() as workdir:
    summary = trainer.train_and_evaluate(config, workdir)
    records = [
        r
        for r in metrics_lib.read(os.path.join(workdir, "metrics.jsonl"))
        if not r.get("summary")
    ]
  return dict(
      tokens_per_sec=summary["tokens_per_sec"],
      wall_time=summary["wall_time"],
      **round_timings(records),
  )


def main(argv):
  del argv
  config = _CONFIG.value
  with config.unlocked():
    config.total_steps = _TOTAL.value
  runs = []
  for _ in range(_REPEATS.value):
    runs.append(run_once(config))
    print(json.dumps(runs[-1]), flush=True)
  keys = ("interval_s", "host_wait_s", "host_busy_s", "data_wait_s", "tokens_per_sec")
  median = {key: statistics.median(r[key] for r in runs) for key in keys}
  result = dict(
      config=config.algorithm,
      controller=config.interval.controller,
      total_steps=config.total_steps,
      repeats=len(runs),
      load_avg=list(os.getloadavg()),
      runs=runs,
      median=median,
      host_busy_share=median["host_busy_s"] / median["interval_s"],
  )
  render.emit(result, _OUT.value, indent=1)


if __name__ == "__main__":
  app.run(main)
