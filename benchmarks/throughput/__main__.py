"""``python -m benchmarks.throughput``: the command-line flags and the run.

The flags are defined here only (not on import of the package), so another
program that imports the benchmark (``projects/plora/sweep.py`` has its own
``--render_only``) defines no clashing flag.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import jax
from absl import app, flags

from benchmarks import render, unit_server
from benchmarks.throughput.child import start_child
from benchmarks.throughput.measure import (
    hot_path,
    measure_rows,
    scaling,
)
from benchmarks.throughput.peak import machine, shape_matmul
from benchmarks.throughput.workload import Workload, make_workload
from benchmarks.throughput.report import targets

_QUICK = flags.DEFINE_bool(
    "quick",
    False,
    "CI mode: a one-layer toy model, one repeat, "
    "fast XLA compile settings; structure, not speed.",
)
_OUT = flags.DEFINE_string(
    "out", "docs/benchmarks.json", "Where to write the raw numbers."
)
_MD = flags.DEFINE_string(
    "md", "docs/benchmarks.md", "Where to write the report ('' = none)."
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 0, "Timed units per row of the throughput table " "(0: 3, quick 1)."
)
_SWEEP_REPEATS = flags.DEFINE_integer(
    "sweep_repeats",
    0,
    "Timed units per point of the " "sweeps and the scan check (0: 2, quick 1).",
)
_WORKERS = flags.DEFINE_integer("num_workers", 4, "K simulated workers.")
_H = flags.DEFINE_integer(
    "h",
    10,
    "Inner steps per timed unit and the H of its rounds; a row "
    "whose config has a smaller H keeps it (0: DiLoCo's configured H; "
    "quick: 3).",
)
_SIM_DEVICES = flags.DEFINE_integer(
    "sim_devices",
    2,
    "N devices of the shard_map rows (0 = skip them); the default path of "
    "experiments/run.py on CPU is one device per usable core.",
)
_SCALE_WORKERS = flags.DEFINE_list(
    "scale_workers", ["1", "2", "4", "8", "16"], "K of the scaling sweep (quick: 1,4)."
)
_SCALE_WIDTHS = flags.DEFINE_list(
    "scale_widths", ["64", "128", "256"], "d_model of the width sweep (quick: 16,32)."
)
_SCALE_STEPS = flags.DEFINE_integer(
    "scale_steps", 2, "Inner steps per timed unit (one " "round) in the sweeps."
)
_CHILD = flags.DEFINE_integer(
    "child_devices",
    0,
    "Internal: measure the shard_map rows on this many devices and report them "
    "on stdout (benchmarks/unit_server.py).",
)
_SIZE = flags.DEFINE_string(
    "size", "cpu", "Size preset of a full run (configs/common.py: cpu, gpu, ...)."
)
_MODEL = flags.DEFINE_list(
    "model",
    [],
    "Overrides of a full run's model, KEY=VALUE: config.model fields "
    "(d_model, num_layers, num_heads, mlp_dim, dtype), seq_len, batch_size.",
)
_ROWS = flags.DEFINE_list(
    "rows",
    [],
    "Rows to measure besides the reference: algorithms, naive, pytorch; empty = "
    "all (e.g. --rows=reference,pytorch --rows_only: JAX against PyTorch alone).",
)
_TORCH_THREADS = flags.DEFINE_integer(
    "torch_threads", 0, "torch.set_num_threads of the PyTorch rows (0: usable cores)."
)
_TORCH_COMPILE = flags.DEFINE_bool(
    "torch_compile",
    False,
    "Also a row of the PyTorch train step under torch.compile (its warm-up "
    "compiles for about a minute on a 2-core CPU).",
)
_ROWS_ONLY = flags.DEFINE_bool(
    "rows_only",
    False,
    "Only the throughput rows (one device, and the shard_map child's unless "
    "--sim_devices=0) and their compile counts: no hot-path checks, "
    "matmul shapes or scaling sweeps; JSON only (no markdown report).",
)
_RENDER = flags.DEFINE_bool(
    "render_only",
    False,
    "Only rewrite --md from the numbers already in --out (no measurement; "
    "python -m benchmarks.render docs/benchmarks.md does the same for the page).",
)

_FAST_COMPILE = [
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
]


def _model_overrides() -> dict:
  """``--model`` as a dict: ints where they parse, strings otherwise."""
  out = {}
  for item in _MODEL.value:
    key, _, value = item.partition("=")
    out[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
  return out


def _workload() -> Workload:
  return make_workload(
      size=_SIZE.value,
      model=_model_overrides(),
      rows=tuple(_ROWS.value),
      quick=_QUICK.value,
      num_workers=_WORKERS.value,
      h=_H.value,
      repeats=_REPEATS.value,
      sweep_repeats=_SWEEP_REPEATS.value,
      scale_workers=_SCALE_WORKERS.value,
      scale_widths=_SCALE_WIDTHS.value,
      scale_steps=_SCALE_STEPS.value,
      torch_threads=_TORCH_THREADS.value,
      torch_compile=_TORCH_COMPILE.value,
  )


def _start_child():
  """The shard_map rows' child process, with this run's workload flags."""
  return start_child(
      _SIM_DEVICES.value,
      [
          f"--num_workers={_WORKERS.value}",
          f"--repeats={_REPEATS.value}",
          f"--h={_H.value}",
          "--quick" if _QUICK.value else "--noquick",
          f"--size={_SIZE.value}",
          f"--model={','.join(_MODEL.value)}",
          f"--rows={','.join(_ROWS.value)}",
      ],
  )


#: The page whose generated blocks a run fills (its prose is static).
PAGE, DATA = "docs/benchmarks.md", "docs/benchmarks.json"


def _write_json(result: dict) -> None:
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1, default=float)


def _write_md(result: dict) -> None:
  """``--md``: the page with its blocks filled from ``result``."""
  if _MD.value:
    render.write(PAGE, _MD.value, {DATA: result})


def _render_only() -> None:
  with open(_OUT.value) as f:
    _write_md(json.load(f))


def _child(workload: Workload, t0: float) -> None:
  """The child process: the shard_map rows on ``--child_devices`` devices,
  measured against the reference on those devices, announced to the parent
  (``benchmarks/unit_server.py``)."""
  out = unit_server.channel()
  if jax.device_count() < _CHILD.value:
    raise SystemExit(f"--child_devices={_CHILD.value} but JAX sees {jax.device_count()}")
  result, _ = measure_rows(
      workload, _CHILD.value, with_naive=False, torch_rows=("pytorch_diloco",)
  )
  result.update(machine=machine(), wall_seconds=time.perf_counter() - t0)
  unit_server.serve({}, result, out)


def _sharded(workload: Workload, child, result: dict, t0: float) -> None:
  """The shard_map rows (``<algorithm>@N``), each against ``reference@N`` on the
  same N devices: a child process on CPU, this process on several devices."""
  if _SIM_DEVICES.value <= 1:
    if child:
      child.close()
    return
  if jax.default_backend() == "cpu":
    # Timed alone: two processes on the same cores would slow each other.
    child = child or _start_child()
    try:
      sharded = child.ready()
      if "rows" in sharded:
        sharded["process"] = "child process, simulated CPU devices"
    finally:
      child.close()
    result["sharded"] = sharded
    print(f"[throughput] child done ({time.perf_counter() - t0:.0f} s)", flush=True)
  elif jax.device_count() > 1:
    result["sharded"], _ = measure_rows(workload, jax.device_count(), with_naive=False)
    result["sharded"]["process"] = "same process"


def _run(workload: Workload, t0: float) -> None:
  """The main process: every measurement, then the JSON and the report."""
  result = dict(
      mode="quick" if _QUICK.value else "full",
      workload=dataclasses.asdict(workload),
      command=" ".join(["python -m benchmarks.throughput"] + sys.argv[1:]),
      machine=machine(),
  )
  print(
      f"[throughput] {result['machine']['cpu']}, {result['machine']['cores']} cores, "
      f"{result['machine']['uptime']}",
      flush=True,
  )
  child = None
  if (
      _SIM_DEVICES.value > 1
      and jax.default_backend() == "cpu"
      and _QUICK.value
      and not _ROWS_ONLY.value
  ):
    # Structure only: let the child compile while this process does.
    child = _start_child()
  result["main"], runners = measure_rows(
      workload, 1, with_naive=True, torch_rows=("pytorch", "pytorch_diloco")
  )
  print(f"[throughput] main rows done ({time.perf_counter() - t0:.0f} s)", flush=True)
  if _ROWS_ONLY.value:
    del runners
    _sharded(workload, child, result, t0)
    result.update(
        load_avg_end=list(os.getloadavg()), wall_seconds=time.perf_counter() - t0
    )
    result["targets"] = targets(result)
    _write_json(result)
    print(f"[throughput] wrote {_OUT.value} (rows only)", flush=True)
    return
  if "diloco" in runners:
    result["hot_path"] = hot_path(workload, runners, result["main"])
  del runners
  print(f"[throughput] hot path done ({time.perf_counter() - t0:.0f} s)", flush=True)
  result["shape_matmul"] = shape_matmul(workload)
  result["scaling"] = scaling(workload)
  print(f"[throughput] scaling done ({time.perf_counter() - t0:.0f} s)", flush=True)
  _sharded(workload, child, result, t0)
  result.update(load_avg_end=list(os.getloadavg()), wall_seconds=time.perf_counter() - t0)
  result["targets"] = targets(result)
  _write_json(result)
  _write_md(result)
  print(f"[throughput] wrote {_OUT.value} in {result['wall_seconds']:.0f} s", flush=True)


def main(argv):
  del argv
  if _RENDER.value:
    _render_only()
    return
  if _QUICK.value and "xla_backend_optimization_level" not in os.environ.get(
      "XLA_FLAGS", ""
  ):
    # Structure, not speed: cheaper XLA compiles (set before the backend starts).
    os.environ["XLA_FLAGS"] = " ".join(
        os.environ.get("XLA_FLAGS", "").split() + _FAST_COMPILE
    )
  workload, t0 = _workload(), time.perf_counter()
  if _CHILD.value:
    _child(workload, t0)
  else:
    _run(workload, t0)


if __name__ == "__main__":
  app.run(main)
