"""The main job with one CPU device per core (the default) against one device (the
old default), side by side in one run.

  python -m benchmarks.every_core --config configs/default.py --total_steps 300 \\
      --repeats 2 --out docs/every_core.json

Each run is ``python -m experiments.run`` in a fresh process and a fresh temporary
workdir, exactly as a user starts it: ``default`` leaves ``XLA_FLAGS`` alone, so
``distributed.use_every_core`` gives JAX one host device per usable core (the
largest count dividing K); ``one_device`` sets
``XLA_FLAGS=--xla_force_host_platform_device_count=1``, which the trainer leaves
as the user's choice. The two alternate (order reversed on odd repeats). Reports
each run's summary ``tokens_per_sec`` (steady state, after the first round) and
``wall_time`` (the whole run, compile included), the medians per mode and their
ratio. Absolute numbers move with the machine's load; read the ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from autoloco_jax.run import metrics as metrics_lib

_CONFIG = flags.DEFINE_string("config", "configs/default.py", "The run's config file.")
_STEPS = flags.DEFINE_integer("total_steps", 300, "Inner steps of each run.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Pairs of runs (one per mode).")
_OUT = flags.DEFINE_string("out", "", "Where to write the JSON ('' = print only).")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE_FLAG = "--xla_force_host_platform_device_count"
MODES = ("default", "one_device")


def run_once(mode: str, config: str, total_steps: int) -> dict:
  """One ``experiments.run`` process in ``mode``; its summary's speed numbers."""
  env = dict(os.environ)
  kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
  if mode == "one_device":
    kept.append(f"{DEVICE_FLAG}=1")
  env["XLA_FLAGS"] = " ".join(kept)
  with tempfile.TemporaryDirectory(prefix="every_core_") as workdir:
    cmd = [
        sys.executable,
        "-m",
        "experiments.run",
        f"--config={config}",
        f"--workdir={workdir}",
        f"--config.total_steps={total_steps}",
    ]
    done = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
      raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    records = list(metrics_lib.read(os.path.join(workdir, "metrics.jsonl")))
  summary = [r for r in records if r.get("summary")][-1]
  return dict(
      mode=mode,
      tokens_per_sec=summary["tokens_per_sec"],
      wall_time=summary["wall_time"],
      final_eval_bpb=summary.get("final_eval_bpb"),
  )


def compare(runs: list[dict]) -> dict:
  """Medians per mode and the default's ratio over one device."""
  modes = {
      m: {
          key: statistics.median(r[key] for r in runs if r["mode"] == m)
          for key in ("tokens_per_sec", "wall_time")
      }
      for m in MODES
  }
  return dict(
      modes=modes,
      tokens_per_sec_ratio=modes["default"]["tokens_per_sec"]
      / modes["one_device"]["tokens_per_sec"],
      wall_time_ratio=modes["default"]["wall_time"] / modes["one_device"]["wall_time"],
  )


def main(argv):
  del argv
  runs = []
  for i in range(_REPEATS.value):
    for mode in MODES if i % 2 == 0 else MODES[::-1]:
      runs.append(run_once(mode, _CONFIG.value, _STEPS.value))
      print(json.dumps(runs[-1]), flush=True)
  result = dict(
      config=_CONFIG.value,
      total_steps=_STEPS.value,
      load_avg=os.getloadavg(),
      runs=runs,
      **compare(runs),
  )
  print(
      json.dumps(
          {k: result[k] for k in ("modes", "tokens_per_sec_ratio", "wall_time_ratio")},
          indent=1,
      )
  )
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  app.run(main)
