"""Does the host stall the device between rounds? The trainer with and without
``log.overlap``, side by side in one process.

  python -m benchmarks.host_wait --config configs/default.py --total_steps 300 \
      --repeats 2 --out docs/host_wait.json

Runs ``train.train_and_evaluate`` on the config with ``log.overlap`` off (the
round's metrics read at once: the device idles while the host logs, evaluates,
reads and stages the next round) and on (the next round dispatched first),
alternating the order over ``--repeats`` pairs, each run in a fresh temporary
workdir. From each run's metrics.jsonl, per round after the first (which
compiles):

* ``interval_s``: wall time between the host's reads of consecutive rounds
  (``wall_time`` differences), i.e. the round's cost as the run sees it;
* ``host_wait_s``: the host blocked reading the round's device values;
* ``host_busy_s = interval_s - host_wait_s``: the host's own work in that
  interval (logging, evaluation reads, checkpoint starts, data, staging,
  dispatch). Without overlap the device has nothing queued during it, so it
  is the device's idle time per round; with overlap it runs while the device
  trains the next round, which was dispatched before the read, so a round
  whose read still waited (``host_wait_s`` > 1 ms) had no gap before the next.

Reports medians per run and per mode, and the steady tokens/s of each run's
summary. Timings move with the machine's load; read the two modes' ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile

from absl import app, flags
from ml_collections import config_flags

from autoloco_jax import metrics as metrics_lib, train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Run config.")
_TOTAL = flags.DEFINE_integer("total_steps", 300, "Inner steps per run.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Pairs of runs (order alternates).")
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


def run_once(config, overlap: bool) -> dict:
  """One training run in a temporary workdir: its round timings and summary."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.log.overlap = overlap
    config.log.progress = False
    config.log.tensorboard = False
  with tempfile.TemporaryDirectory() as workdir:
    summary = train.train_and_evaluate(config, workdir)
    records = [
        r
        for r in metrics_lib.read(os.path.join(workdir, "metrics.jsonl"))
        if not r.get("summary")
    ]
  return dict(
      overlap=overlap,
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
  for repeat in range(_REPEATS.value):
    order = (False, True) if repeat % 2 == 0 else (True, False)
    for overlap in order:
      runs.append(run_once(config, overlap))
      print(json.dumps(runs[-1]), flush=True)
  modes = {}
  for overlap in (False, True):
    mine = [r for r in runs if r["overlap"] == overlap]
    modes["overlap" if overlap else "blocking"] = {
        key: statistics.median(r[key] for r in mine)
        for key in ("interval_s", "host_wait_s", "host_busy_s", "tokens_per_sec")
    }
  ratio = modes["overlap"]["tokens_per_sec"] / modes["blocking"]["tokens_per_sec"]
  result = dict(
      config=config.algorithm,
      controller=config.interval.controller,
      total_steps=config.total_steps,
      load_avg=list(os.getloadavg()),
      runs=runs,
      modes=modes,
      tokens_per_sec_ratio=ratio,
  )
  text = json.dumps(result, indent=1)
  print(text)
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  app.run(main)
