"""A batch of study runs, two ways on this machine's cores: one run at a time
with every core, or one run per core side by side (each pinned to its core).

The studies' sweeps run many small independent runs; a tiny model may not use
two threads well, in which case two single-core runs finish a batch sooner.
The modes alternate ``A B A B`` so drift in the machine's load shows as the
spread between repeats of a mode. Prints and writes (``--out``) the batch times
and their ratio.

  python -m benchmarks.parallel_runs --runs 4 --steps 200 --out docs/parallel_runs.json
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from benchmarks import render

_RUNS = flags.DEFINE_integer("runs", 4, "runs per batch (even)")
_STEPS = flags.DEFINE_integer("steps", 200, "inner steps per run")
_REPEATS = flags.DEFINE_integer("repeats", 2, "batches per mode, alternating")
_CONFIG = flags.DEFINE_string("config", "configs/diloco.py:study", "the runs' config")
_OUT = flags.DEFINE_string("out", "", "where to write the JSON (default: print only)")


def _command(workdir: str, seed: int) -> list[str]:
  return [
      sys.executable, "-m", "experiments.run", f"--config={_CONFIG.value}",
      f"--workdir={workdir}", f"--config.total_steps={_STEPS.value}",
      f"--config.seed={seed}", "--config.num_devices=1",
      "--config.log.progress=False", "--config.log.tensorboard=False",
  ]


def _batch(cores: list[int] | None, root: str, tag: str) -> float:
  """Seconds to finish ``--runs`` runs: one at a time (``cores`` None) or as
  many at a time as ``cores``, each pinned to one core."""
  seeds = list(range(_RUNS.value))
  start = time.perf_counter()
  if cores is None:
    for seed in seeds:
      subprocess.run(_command(os.path.join(root, f"{tag}_{seed}"), seed), check=True,
                     capture_output=True)
  else:
    lanes = [seeds[i :: len(cores)] for i in range(len(cores))]
    procs = []
    for core, lane in zip(cores, lanes):
      script = " && ".join(
          " ".join(_command(os.path.join(root, f"{tag}_{s}"), s)) for s in lane
      )
      procs.append(subprocess.Popen(
          ["sh", "-c", script],
          # Pinned to one core (inherited by every run of the lane).
          preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
      ))
    if any(p.wait() for p in procs):
      raise RuntimeError("a pinned run failed")
  return time.perf_counter() - start


def main(argv):
  del argv
  cores = sorted(os.sched_getaffinity(0))
  modes = {"one_run_all_cores": None, "one_run_per_core": cores}
  times = {name: [] for name in modes}
  with tempfile.TemporaryDirectory() as root:
    for r in range(_REPEATS.value):
      for name, pinned in modes.items():
        times[name].append(_batch(pinned, root, f"{name}{r}"))
        print(f"{name} batch {r}: {times[name][-1]:.1f} s", flush=True)
  mean = {k: sum(v) / len(v) for k, v in times.items()}
  out = dict(
      runs=_RUNS.value,
      steps=_STEPS.value,
      config=_CONFIG.value,
      cores=len(cores),
      seconds=times,
      speedup_one_per_core=mean["one_run_all_cores"] / mean["one_run_per_core"],
  )
  render.emit(out, _OUT.value, indent=1)


if __name__ == "__main__":
  app.run(main)
