"""Per-device memory of a run: the run state and the compiled round functions.

  python -m benchmarks.memory --config configs/default.py --num_workers 8 --out docs/memory.json

Builds the config's run (``train.setup``), then reports, for the first device of
the mesh, the bytes of every field of the run state and XLA's memory analysis
of the compiled inner loop and sync (arguments, outputs, temporaries, aliased
bytes). Nothing is trained. Set ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
to lay the workers over N simulated CPU devices.
"""

from __future__ import annotations

import json

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax import replicas, train
from benchmarks import aot

_CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Run config.")
_NUM_WORKERS = flags.DEFINE_integer("num_workers", 8, "K (overrides the config).")
_OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")


def measure(config) -> dict:
  """Bytes on the mesh's first device: the state by field, and the rounds."""
  run = train.setup(config)
  state, algo, mesh = run.state, run.algo, run.mesh
  device = mesh.devices.flat[0]

  def bytes_on_device(tree) -> int:
    return sum(
        s.data.nbytes
        for x in jax.tree.leaves(tree)
        for s in x.addressable_shards
        if s.device == device
    )

  k, b, l = config.num_workers, config.data.batch_size, config.data.seq_len
  tokens = replicas.put_workers(np.zeros((k, run.chunk, b, l + 1), run.data.dtype), mesh)
  present = replicas.put_workers(np.ones(k, np.float32), mesh)
  fields = {name: bytes_on_device(getattr(state, name)) for name in state._fields}
  if state.outer is not None:
    fields.update(
        {
            f"outer.{name}": bytes_on_device(getattr(state.outer, name))
            for name in state.outer._fields
        }
    )
  return dict(
      algorithm=algo.name,
      num_workers=k,
      devices=int(mesh.devices.size),
      num_params=run.num_params,
      param_bytes=4 * run.num_params,
      state_bytes_per_device=bytes_on_device(state),
      state_fields=fields,
      inner=aot.memory_analysis(algo.inner.lower(state, tokens, np.int32(1)).compile()),
      sync=aot.memory_analysis(algo.sync.lower(state, present).compile()),
  )


def main(argv):
  del argv
  config = _CONFIG.value
  with config.unlocked():
    config.num_workers = _NUM_WORKERS.value
    config.log.progress = False
  result = measure(config)
  text = json.dumps(result, indent=2)
  print(text)
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  app.run(main)
