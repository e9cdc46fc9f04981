"""The mean over workers two ways on this machine, and what it costs a gossip round.

  python -m benchmarks.worker_mean --config configs/gasloc.py:study \
      --config.num_workers=8 --config.interval.h=1 --out docs/worker_mean.json

On the config's parameters (``K`` copies, one device), side by side in one run
(the two alternate, ``--repeats`` times each, medians):

* ``mean_ms``: :func:`replicas.worker_mean` (XLA's reduction over the leading
  worker axis) against :func:`replicas.worker_mean_unrolled` (the rows added
  one by one), with the largest difference between their results and whether
  they are equal bit for bit;
* ``sync_ms``: the algorithm's sync (its exchange and its monitoring) with the
  monitoring's means on each of the two. The sync's updates use
  :func:`replicas.worker_mean` either way, so the new weights are the same.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.run import assembly
from autoloco_jax.runtime import replicas
from benchmarks import render

_CONFIG = config_flags.DEFINE_config_file("config", "configs/gasloc.py:study", "Run config.")
_REPEATS = flags.DEFINE_integer("repeats", 20, "Timed calls of each, alternating.")
_OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")

MEANS = dict(worker_mean=replicas.worker_mean, unrolled=replicas.worker_mean_unrolled)


def _copy(tree):
  """A fresh copy on device (a sync donates its state)."""
  return jax.block_until_ready(jax.tree.map(lambda x: x.copy(), tree))


def _timed(fn, *args) -> float:
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - start


def _mean_fns(mesh, state) -> dict:
  """Each mean as a jitted function of ``params_K`` over the mesh."""
  specs = state.specs().params_K
  return {
      name: jax.jit(
          replicas.map_workers(mean, mesh, in_specs=(specs,), out_specs=replicas.REPLICATED)
      )
      for name, mean in MEANS.items()
  }


def _sync_fns(config) -> tuple[dict, object, object]:
  """The algorithm's sync built twice, its monitoring on each mean; the state
  and everyone-present mask to call it with."""
  syncs, run = {}, None
  for name, mean in MEANS.items():
    replicas.worker_mean_unrolled = mean  # read when the sync is traced
    try:
      assembly.forget_builds()
      run = assembly.setup(config)
      present = replicas.put_workers(np.ones(config.num_workers, np.float32), run.mesh)
      jax.block_until_ready(run.algo.sync(_copy(run.state), present))  # traces it
      syncs[name] = run.algo.sync
    finally:
      replicas.worker_mean_unrolled = MEANS["unrolled"]
  return syncs, run, present


def main(argv):
  del argv
  config = _CONFIG.value
  syncs, run, present = _sync_fns(config)
  means = _mean_fns(run.mesh, run.state)
  params_K = run.state.params_K
  results = {name: jax.device_get(fn(params_K)) for name, fn in means.items()}
  pairs = list(zip(*(jax.tree.leaves(r) for r in results.values())))
  times = {f"{kind}/{name}": [] for kind in ("mean", "sync") for name in MEANS}
  for _ in range(_REPEATS.value):
    for name in MEANS:
      times[f"mean/{name}"].append(_timed(means[name], params_K))
      times[f"sync/{name}"].append(_timed(syncs[name], _copy(run.state), present))
  ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
  out = dict(
      config=config.algorithm,
      num_workers=config.num_workers,
      num_params=run.num_params,
      devices=len(run.mesh.devices.flat),
      repeats=_REPEATS.value,
      mean_ms={name: ms[f"mean/{name}"] for name in MEANS},
      mean_ratio=ms["mean/worker_mean"] / ms["mean/unrolled"],
      max_abs_diff=max(float(np.max(np.abs(a - b))) for a, b in pairs),
      bit_identical=all(np.array_equal(a, b) for a, b in pairs),
      sync_ms={name: ms[f"sync/{name}"] for name in MEANS},
      sync_ratio=ms["sync/worker_mean"] / ms["sync/unrolled"],
  )
  render.emit(out, _OUT.value, indent=1)


if __name__ == "__main__":
  app.run(main)
