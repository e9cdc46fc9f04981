"""Size and time of one checkpoint of a config's full run state.

  python -m benchmarks.checkpoint_cost --config configs/default.py

Measured on the state after one round of real training. Prints the checkpoint's size on disk, the time of a blocking save and of a
restore (median of --repeats), and writes them to docs/checkpoint_cost.json.
"""

import json
import os
import shutil
import statistics
import tempfile
import time

import jax
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax import checkpoint, train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Config file.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Saves and restores to time.")
_OUT = flags.DEFINE_string("out", "docs/checkpoint_cost.json", "Where to write the numbers.")


def _du(path: str) -> int:
  return sum(os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(path) for f in files)


def main(_):
  config = _CONFIG.value
  run = train.setup(config)
  # One real round first: an initial state (zero Adam moments) compresses far
  # better than a trained one and would flatter the size.
  import numpy as np
  from autoloco_jax import replicas
  h = int(config.interval.h)
  positions = run.data.init_positions()
  tokens, positions = run.data.train_batches(positions, h, config.data.batch_size)
  state = run.algo.inner(run.state, replicas.put_workers(tokens, run.mesh), np.int32(h))
  state, _ = run.algo.sync(state)
  host = dict(positions=run.data.init_positions().tolist(), step=0)
  workdir = tempfile.mkdtemp(prefix="ckpt_cost_")
  saves, restores = [], []
  try:
    ckpt = checkpoint.Checkpointer(workdir, keep=1)
    for i in range(_REPEATS.value):
      jax.block_until_ready(state)
      t = time.perf_counter()
      ckpt.save(i + 1, state, host)
      ckpt.wait()
      saves.append(time.perf_counter() - t)
      t = time.perf_counter()
      restored = ckpt.restore(state)
      jax.block_until_ready(restored[1])
      restores.append(time.perf_counter() - t)
    size = _du(os.path.join(ckpt.directory, str(_REPEATS.value)))
    ckpt.close()
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  state_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  result = dict(algorithm=config.algorithm, num_workers=config.num_workers,
                num_params=run.num_params, state_bytes=state_bytes,
                checkpoint_bytes=size, save_seconds_median=statistics.median(saves),
                restore_seconds_median=statistics.median(restores),
                repeats=_REPEATS.value)
  print(json.dumps(result, indent=2))
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=2)


if __name__ == "__main__":
  app.run(main)
