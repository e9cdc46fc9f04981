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

``--modes=default,process_per_core,process_per_core_pinned`` adds the third way
to use every core: one process per usable core, one device each, over the
loopback ``jax.distributed`` launch (``experiments.launch_local``: the same
program on a mesh of that many hosts), each free to use every core or
(``_pinned``) pinned to its own::

  python -m benchmarks.every_core --config configs/diloco.py:cpu --total_steps 300 \\
      --repeats 2 --modes default,process_per_core,process_per_core_pinned \\
      --out docs/process_per_core.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from absl import app, flags

from autoloco_jax.run import distributed, metrics as metrics_lib


def _define_flags() -> None:
  """Flags only when run as a program: the tests import :func:`run_once` and
  :func:`compare` beside other modules' flags of the same names."""
  global _CONFIG, _STEPS, _REPEATS, _OUT, _MODES
  _CONFIG = flags.DEFINE_string("config", "configs/default.py", "The run's config file.")
  _STEPS = flags.DEFINE_integer("total_steps", 300, "Inner steps of each run.")
  _REPEATS = flags.DEFINE_integer("repeats", 2, "Pairs of runs (one per mode).")
  _OUT = flags.DEFINE_string("out", "", "Where to write the JSON ('' = print only).")
  _MODES = flags.DEFINE_list(
      "modes", ["default", "one_device"], "Modes compared, the first the baseline."
  )


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("default", "one_device", "process_per_core", "process_per_core_pinned")


def run_once(mode: str, config: str, total_steps: int) -> dict:
  """One ``experiments.run`` process in ``mode``; its summary's speed numbers
  and the devices it ran on."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = distributed.with_host_devices(
      env.get("XLA_FLAGS", ""), 1 if mode == "one_device" else None
  )
  with tempfile.TemporaryDirectory(prefix="every_core_") as workdir:
    cmd = [sys.executable, "-m", "experiments.run"]
    if mode.startswith("process_per_core"):
      cores = distributed.usable_cores()
      pin = "--pin_cores" if mode.endswith("pinned") else "--nopin_cores"
      cmd[2:] = ["experiments.launch_local", f"--num_processes={cores}", pin, "--"]
    cmd += [
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
      devices=records[-1]["devices"],
  )


def compare(runs: list[dict], names: list[str]) -> dict:
  """Medians per mode and every mode's ratio over the first (the baseline); with
  ``default`` and ``one_device`` also the default's ratio over one device."""
  modes = {
      m: {
          key: statistics.median(r[key] for r in runs if r["mode"] == m)
          for key in ("tokens_per_sec", "wall_time")
      }
      for m in names
  }
  out = dict(
      modes=modes,
      tokens_per_sec_vs_first={
          m: modes[m]["tokens_per_sec"] / modes[names[0]]["tokens_per_sec"] for m in names
      },
  )
  if {"default", "one_device"} <= set(names):
    out.update(
        tokens_per_sec_ratio=modes["default"]["tokens_per_sec"]
        / modes["one_device"]["tokens_per_sec"],
        wall_time_ratio=modes["default"]["wall_time"] / modes["one_device"]["wall_time"],
    )
  return out


def main(argv):
  del argv
  names = _MODES.value
  unknown = set(names) - set(MODES)
  if unknown or len(names) < 2:
    raise app.UsageError(f"--modes: two or more of {MODES}; got {names}")
  runs = []
  for i in range(_REPEATS.value):
    for mode in names if i % 2 == 0 else names[::-1]:
      runs.append(run_once(mode, _CONFIG.value, _STEPS.value))
      print(json.dumps(runs[-1]), flush=True)
  result = dict(
      config=_CONFIG.value,
      total_steps=_STEPS.value,
      load_avg=os.getloadavg(),
      runs=runs,
      **compare(runs, names),
  )
  print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
