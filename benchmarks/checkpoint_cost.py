"""Size and time of one checkpoint of a config's full run state.

  python -m benchmarks.checkpoint_cost --config configs/default.py

Measured on the state after one round of real training (``rounds.run_round``,
the trainer's round driver). Prints the checkpoint's size on disk, the time of a
blocking save and of a restore (median of --repeats), and writes them to
docs/checkpoint_cost.json (``--out``).
"""

import json
import os
import shutil
import statistics
import tempfile
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.run import checkpoint, trainer
from autoloco_jax.runtime import rounds

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Config file.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Saves and restores to time.")
_OUT = flags.DEFINE_string(
    "out", "docs/checkpoint_cost.json", "Where to write the numbers."
)


def _du(path: str) -> int:
  return sum(
      os.path.getsize(os.path.join(root, f))
      for root, _, files in os.walk(path)
      for f in files
  )


class _Reader:
  """``read(n)``: the next ``n`` batches of every worker, as ``trainer.py`` reads them."""

  def __init__(self, data, batch_size: int):
    self.data, self.batch_size = data, batch_size
    self.positions_K = data.init_positions()

  def __call__(self, n: int) -> np.ndarray:
    batch_KxnxBxL1, self.positions_K = self.data.train_batches(
        self.positions_K, n, self.batch_size
    )
    return batch_KxnxBxL1


def main(_):
  config = _CONFIG.value
  run = trainer.setup(config)
  # One real round first: an initial state (zero Adam moments) compresses far
  # better than a trained one and would flatter the size.
  reader = _Reader(run.data, config.data.batch_size)
  state, _ = rounds.run_round(
      run.algo, run.state, reader, int(config.interval.h), run.chunk, run.mesh
  )
  host = dict(positions=reader.positions_K.tolist(), step=int(config.interval.h))
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
  result = dict(
      algorithm=config.algorithm,
      num_workers=config.num_workers,
      num_params=run.num_params,
      state_bytes=state_bytes,
      checkpoint_bytes=size,
      save_seconds_median=statistics.median(saves),
      restore_seconds_median=statistics.median(restores),
      repeats=_REPEATS.value,
  )
  print(json.dumps(result, indent=2))
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=2)


if __name__ == "__main__":
  app.run(main)
