"""Per-device memory of a run: the run state and the compiled round functions.

  python -m benchmarks.memory --config configs/default.py --num_workers 8 --out docs/memory.json

Builds the config's run (``trainer.setup``), then reports, for the first device of
the mesh, the bytes of every field of the run state and XLA's memory analysis
of the compiled inner loop and sync (arguments, outputs, temporaries, aliased
bytes). Nothing is trained. Set ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
to lay the workers over N simulated CPU devices.

The largest K that fits a memory budget on one device (``--search``)::

  python -m benchmarks.memory --search --max_bytes 8GiB --k_range 8,512 \
      --search_configs configs/default.py,configs/diloco.py --out docs/memory_scale.json

compiles each config's inner loop and sync on abstract shapes
(``aot.compile_config``: nothing is allocated, so K = 512 costs a compile, not
gigabytes) on one device for the K a binary search asks for, and takes a
program's per-device peak as XLA's ``argument + output - alias + temp`` bytes
(the donated state's outputs reuse its arguments), the run's as the larger of
the inner loop's and the sync's. The layout before the global parameters and
outer optimizer state became one copy per device (commit 62226d4) kept them once
per worker; its peak is reconstructed as this one plus ``(K - 1)`` copies of
that outer state (the K = 8 state then measured 131.3 MB against 85.3 MB now,
exactly 7 such copies), which leaves out any temporaries the old sync needed
for its per-worker outer step.
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any, Callable

import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.run import trainer
from autoloco_jax.runtime import replicas
from benchmarks import aot, render
from benchmarks.render import Table


def _define_flags() -> None:
  """The command line's flags, defined only when this file runs as a program, so
  that importing it (``benchmarks/render.py`` imports its ``TABLES``) defines
  none that could clash with the importer's."""
  global _CONFIG, _NUM_WORKERS, _OUT, _SEARCH, _MAX_BYTES, _K_RANGE, _SEARCH_CONFIGS
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py", "Run config.")
  _NUM_WORKERS = flags.DEFINE_integer("num_workers", 8, "K (overrides the config).")
  _OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")
  _SEARCH = flags.DEFINE_bool(
      "search", False, "Binary-search the largest K within --max_bytes on one device."
  )
  _MAX_BYTES = flags.DEFINE_string("max_bytes", "8GiB", "--search: per-device budget.")
  _K_RANGE = flags.DEFINE_list("k_range", ["8", "512"], "--search: smallest, largest K.")
  _SEARCH_CONFIGS = flags.DEFINE_list(
      "search_configs",
      ["configs/default.py", "configs/diloco.py"],
      "--search: config files (PATH or PATH:size; size defaults to cpu).",
  )


_UNITS = {"": 1, "B": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "KB": 1e3, "MB": 1e6}
_UNITS["GB"] = 1e9


def parse_bytes(text: str) -> int:
  """``'8GiB'`` -> 8589934592 (B, KiB, MiB, GiB, KB, MB, GB; case-insensitive)."""
  match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
  if not match or match.group(2).upper() not in _UNITS:
    raise ValueError(f"cannot parse a byte size from {text!r} (e.g. 8GiB, 512MiB)")
  return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def program_peak(analysis: dict) -> int:
  """Per-device bytes a compiled program holds at once, by XLA's analysis:
  arguments, outputs not aliased to (donated) arguments, temporaries."""
  return (
      analysis["argument_bytes"]
      + analysis["output_bytes"]
      - analysis["alias_bytes"]
      + analysis["temp_bytes"]
  )


def probe(config: Any, num_workers: int) -> dict:
  """``config`` with K = ``num_workers`` on one device, compiled from abstract
  shapes: its state, programs' peaks, and the outer state the old layout kept
  once per worker."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.num_workers, config.num_devices = num_workers, 1
  result = aot.compile_config(config)
  peak = max(program_peak(result["inner"]), program_peak(result["sync"]))
  # The DiLoCo family's outer state: the global parameters and the outer
  # optimizer's state (momentum and scalars), one float32 copy of each.
  outer_bytes = 2 * 4 * result["num_params"]
  return dict(
      num_workers=num_workers,
      state_bytes=result["state_bytes_total"],
      inner_peak=program_peak(result["inner"]),
      sync_peak=program_peak(result["sync"]),
      peak=peak,
      peak_old_layout=peak + (num_workers - 1) * outer_bytes,
      num_params=result["num_params"],
  )


def largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int | None:
  """The largest K in ``[low, high]`` with ``fits(K)`` (monotone: true up to
  some K, false after), by binary search; None if even ``low`` does not fit."""
  if not fits(low):
    return None
  while low < high:
    mid = (low + high + 1) // 2
    if fits(mid):
      low = mid
    else:
      high = mid - 1
  return low


def load_config(spec: str) -> Any:
  """``configs/x.py`` or ``configs/x.py:size`` -> the module's ``get_config``."""
  path, _, size = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location("search_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(size or "cpu")


def search(config: Any, max_bytes: int, low: int, high: int) -> dict:
  """The largest K of ``config`` within ``max_bytes`` per device on one device,
  now and in the old layout, with every probe compiled on the way."""
  probes: dict[int, dict] = {}

  def measured(k: int) -> dict:
    if k not in probes:
      probes[k] = probe(config, k)
      print(json.dumps(probes[k]), flush=True)
    return probes[k]

  largest = largest_fitting(lambda k: measured(k)["peak"] <= max_bytes, low, high)
  largest_old = largest_fitting(
      lambda k: measured(k)["peak_old_layout"] <= max_bytes, low, high
  )
  return dict(
      algorithm=config.algorithm,
      model=dict(config.model),
      batch_size=config.data.batch_size,
      seq_len=config.data.seq_len,
      max_bytes=max_bytes,
      k_range=[low, high],
      largest_k=largest,
      largest_k_old_layout=largest_old,
      num_params=probes[low]["num_params"],
      probes=[probes[k] for k in sorted(probes)],
  )


def measure(config) -> dict:
  """Bytes on the mesh's first device: the state by field, and the rounds."""
  run = trainer.setup(config)
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
  if state.algo is not None:
    fields.update(
        {
            f"algo.{name}": bytes_on_device(getattr(state.algo, name))
            for name in state.algo._fields
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


def prepare(scale: dict) -> dict:
  """A ``--search`` result with one row per config for the "Memory scale"
  block of ``docs/benchmarks.md``: the probe at the largest K that fits, and
  the slope of the peak between the smallest and largest K probed."""
  rows = []
  for spec, r in scale["results"].items():
    probes = {p["num_workers"]: p for p in r["probes"]}
    ks = sorted(probes)
    slope = (probes[ks[-1]]["peak"] - probes[ks[0]]["peak"]) / max(ks[-1] - ks[0], 1)
    rows.append(dict(r, spec=spec, at_k=probes.get(r["largest_k"], {}), per_worker=slope))
  budget = next(iter(scale["results"].values()))["max_bytes"]
  return dict(scale, rows=rows, budget=budget, backend_upper=scale["backend"].upper())


_GIB = ":/1073741824:.2f}"

#: The generated blocks (``benchmarks/render.py``).
TABLES = {
    "scale": Table(
        lambda r: r["rows"],
        (
            ("config", "`{spec}`"),
            ("algorithm", "{algorithm}"),
            ("params", "{num_params:,}"),
            ("largest K before", "{largest_k_old_layout}"),
            ("largest K now", "**{largest_k}**"),
            ("GiB at K now", "{at_k[peak]" + _GIB),
            ("state GiB", "{at_k[state_bytes]" + _GIB),
            ("inner loop GiB", "{at_k[inner_peak]" + _GIB),
            ("sync GiB", "{at_k[sync_peak]" + _GIB),
            ("MiB per worker", "{per_worker:/1048576:.1f}"),
        ),
        title="On one {backend_upper} device within {budget" + _GIB + " GiB:\n\n"
        "```bash\n{command} --out docs/memory_scale.json\n```",
    )
}


def main(argv):
  del argv
  if _SEARCH.value:
    low, high = (int(k) for k in _K_RANGE.value)
    max_bytes = parse_bytes(_MAX_BYTES.value)
    result = dict(
        command="python -m benchmarks.memory --search --max_bytes "
        f"{_MAX_BYTES.value} --k_range {low},{high} --search_configs "
        + ",".join(_SEARCH_CONFIGS.value),
        backend=jax.default_backend(),
        jax=jax.__version__,
        peak="max over the inner loop and the sync of XLA's argument + output - "
        "alias + temp bytes on the one device",
        results={
            spec: search(load_config(spec), max_bytes, low, high)
            for spec in _SEARCH_CONFIGS.value
        },
    )
  else:
    result = _measure_one()
  render.emit(result, _OUT.value)


def _measure_one() -> dict:
  config = _CONFIG.value
  with config.unlocked():
    config.num_workers = _NUM_WORKERS.value
    config.log.progress = False
  return measure(config)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
