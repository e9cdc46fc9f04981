"""What keeping builds saves a sweep: a report-shaped batch (``--labels``
configs, each on ``--seeds`` seeds, trained seed by seed as
``experiments.sweep`` does) in one process, with the build cache
(``assembly.KEEP_BUILDS``) holding one build or every label's.

With one build kept, every run builds its model and algorithm again and traces,
lowers and compiles its programs; with every label's kept, a label's later seeds
reuse its first seed's programs (DiLoCo's build does not read the seed). Each
batch runs in its own process, with no persistent compilation cache, and the
modes alternate ``A B A B``. Prints and writes (``--out``) each batch's time,
its peak host memory, and the time saved per reused run.

  python -m benchmarks.build_reuse --config configs/diloco.py:study --labels 4 --seeds 3 --steps 40 --out docs/build_reuse.json
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from autoloco_jax.run import distributed
from benchmarks import render
from benchmarks.memory import load_config

_CONFIG = flags.DEFINE_string("config", "configs/diloco.py:study", "the runs' config")
_LABELS = flags.DEFINE_integer("labels", 4, "configs (outer learning rates) per batch")
_SEEDS = flags.DEFINE_integer("seeds", 3, "seeds per config")
_STEPS = flags.DEFINE_integer("steps", 40, "inner steps per run")
_REPEATS = flags.DEFINE_integer("repeats", 2, "batches per mode, alternating")
_CHILD_KEEP = flags.DEFINE_integer("child_keep", 0, "internal: run one batch keeping this many builds")
_OUT = flags.DEFINE_string("out", "", "where to write the JSON (default: print only)")


def _batch(keep: int, root: str) -> dict:
  """One batch in this process: seconds, peak resident MB, builds made."""
  from autoloco_jax.run import assembly, trainer

  assembly.KEEP_BUILDS = keep
  start = time.perf_counter()
  for seed in range(_SEEDS.value):
    for label in range(_LABELS.value):
      config = load_config(_CONFIG.value)
      config.seed = seed
      config.total_steps = _STEPS.value
      config.num_devices = 1
      config.log.progress = False
      config.log.tensorboard = False
      config.diloco.alpha = 0.5 + 0.1 * label
      trainer.train_and_evaluate(config, os.path.join(root, f"{label}_{seed}"))
  seconds = time.perf_counter() - start
  peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  return dict(seconds=seconds, peak_mb=peak_mb, builds=assembly.builds_made)


def _child(keep: int) -> dict:
  env = dict(os.environ)
  env.pop("JAX_COMPILATION_CACHE_DIR", None)  # every batch compiles afresh
  # One CPU device (a simulated count, a test's say, must not leak in); the
  # caller's other XLA flags kept.
  env["XLA_FLAGS"] = distributed.with_host_devices(env.get("XLA_FLAGS", ""), None)
  with tempfile.TemporaryDirectory() as root:
    subprocess.run(
        [sys.executable, "-m", "benchmarks.build_reuse", f"--child_keep={keep}",
         f"--config={_CONFIG.value}", f"--labels={_LABELS.value}",
         f"--seeds={_SEEDS.value}", f"--steps={_STEPS.value}", f"--out={root}/b.json"],
        env=env, check=True, capture_output=True, text=True,
    )
    with open(f"{root}/b.json") as f:
      return json.load(f)


def main(argv):
  del argv
  if _CHILD_KEEP.value:
    with tempfile.TemporaryDirectory() as root:
      result = _batch(_CHILD_KEEP.value, root)
    render.emit(result, _OUT.value, echo=False)
    return
  modes = {"keep_one": 1, "keep_every_label": _LABELS.value}
  batches = {name: [] for name in modes}
  for r in range(_REPEATS.value):
    for name, keep in modes.items():
      batches[name].append(_child(keep))
      print(f"{name} batch {r}: {batches[name][-1]}", flush=True)
  mean = {k: sum(b["seconds"] for b in v) / len(v) for k, v in batches.items()}
  runs = _LABELS.value * _SEEDS.value
  reused = runs - _LABELS.value
  out = dict(
      config=_CONFIG.value,
      labels=_LABELS.value,
      seeds=_SEEDS.value,
      steps=_STEPS.value,
      batches=batches,
      seconds_ratio=mean["keep_one"] / mean["keep_every_label"],
      saved_s_per_reused_run=(mean["keep_one"] - mean["keep_every_label"]) / reused,
  )
  render.emit(out, _OUT.value, indent=1)


if __name__ == "__main__":
  app.run(main)
