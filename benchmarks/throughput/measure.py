"""The measurements: the throughput rows, the hot-path checks, the scaling sweeps."""

from __future__ import annotations

import json
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax.runtime import replicas, rounds
from benchmarks.throughput import pytorch
from benchmarks.throughput.peak import matmul_rate
from benchmarks.throughput.workload import (
    Workload,
    algorithm_config,
    build_model,
    synthetic_data,
)
from benchmarks.throughput.runners import (
    AlgoRunner,
    NaiveRunner,
    ReferenceRunner,
    Runner,
    Unsupported,
    scan_inner,
)
from benchmarks.throughput.timing import (
    bracketed,
    compile_check,
    median,
    round_memory,
    summarize,
    timed,
    warm_up,
)

#: Measured on one device and, as ``<name>@N``, on N devices (rows that
#: ``registry.make`` refuses are reported as skipped, with the reason).
ALGORITHMS = ("ddp", "diloco", "autoloco", "noloco", "gasloc")

#: (reference, diloco) runners already compiled for a config, reused by the sweeps.
_shared: dict = {}


def _sweep_key(config: Any) -> tuple:
  return (
      config.num_workers,
      json.dumps(config.model.to_dict(), sort_keys=True),
      config.data.batch_size,
      int(config.interval.h),
  )


def _shorten(runner: Runner, h: int) -> Runner:
  runner.h = min(runner.h, h)
  return runner


def try_row(name: str, build: Callable[[], Runner]) -> tuple[Runner | None, str]:
  """Builds and warms up a row, or says why it cannot run by design
  (``runners.Unsupported``: its algorithm refuses the config). Any other
  exception, in the build or the warm-up, propagates: a crash fails the run."""
  try:
    runner = build()
  except Unsupported as e:
    message = str(e).strip()
    return None, message.splitlines()[0][:240] if message else type(e).__name__
  return warm_up(runner), ""


def _build_rows(
    workload: Workload, devices: int, with_naive: bool, steps: int, data, mesh
) -> tuple[list[Runner], dict]:
  """The warm algorithm rows (and the naive loop), and why any was skipped."""
  rows, skipped = [], {}
  suffix = "" if devices == 1 else f"@{devices}"
  builds = []
  names = ALGORITHMS
  if workload.rows:
    names = tuple(n for n in names if n in workload.rows)
  for name in names:
    config = algorithm_config(workload, name, num_devices=devices)
    builds.append(
        (
            name + suffix,
            lambda n=name + suffix, c=config: _shorten(
                AlgoRunner(n, c, build_model(c), mesh, data), steps
            ),
        )
    )
  if with_naive and (not workload.rows or "naive" in workload.rows):
    base = algorithm_config(workload, "diloco", num_devices=devices)
    builds.append(
        ("naive", lambda: _shorten(NaiveRunner(base, build_model(base), data), steps))
    )
  for name, build in builds:
    runner, why = try_row(name, build)
    if runner is None:
      skipped[name] = why
    else:
      rows.append(runner)
  return rows, skipped


def row_devices(name: str) -> int:
  """The devices of a row by its name: ``<row>@N`` on N, any other on one."""
  return int(name.rpartition("@")[2]) if "@" in name else 1


def _equal_devices(rows: list[dict]) -> None:
  """Marks each row's devices and its reference's; on N devices also each
  row's ratio to the one-device ``reference`` row of the same process (the
  quotient of the two rows' per-repeat ratios to ``reference@N``)."""
  one = next((r for r in rows if r["name"] == "reference" and "ratio" in r), None)
  for r in rows:
    r["devices"] = row_devices(r["name"])
    if "ratio" not in r:
      continue
    r["reference_devices"] = row_devices(r["reference"])
    r["equal_devices"] = r["devices"] == r["reference_devices"]
    if one is not None and r is not one:
      r["ratio_vs_one_device"] = median(a / b for a, b in zip(r["ratios"], one["ratios"]))


def measure_rows(
    workload: Workload, devices: int, with_naive: bool, torch_rows: tuple = ()
) -> tuple[dict, dict]:
  """The reference and the algorithm rows, K workers on ``devices`` devices;
  ``torch_rows``: the PyTorch rows of these names too (``pytorch.start``: child
  processes, timed unit by unit from here), when torch is installed.

  Every row is bracketed by the reference on the same devices: on one device
  the one-model ``reference``; on ``devices > 1`` the ``reference@N`` that splits
  the global batch data-parallel over them, with the one-device ``reference`` as
  a row of its own (what splitting the reference gains).

  Returns the result and the live runners (reused by the hot-path checks)."""
  base = algorithm_config(workload, "diloco", num_devices=devices)
  # A unit: `steps` inner steps in each row's own rounds, none longer than `steps`;
  # the staged chunk keeps each config's size, as trainer.py sizes it.
  steps = workload.h or int(base.interval.h)
  model = build_model(base)
  data = synthetic_data(base)
  mesh = replicas.make_mesh(workload.num_workers, devices)
  reference = warm_up(_shorten(ReferenceRunner(base, model, data, devices), steps))
  rows, skipped = _build_rows(workload, devices, with_naive, steps, data, mesh)
  if devices > 1:
    rows.insert(0, warm_up(_shorten(ReferenceRunner(base, model, data), steps)))
  remote, torch_info, children = [], None, []
  if any(pytorch.wanted(workload, row) for row in torch_rows):
    remote, torch_info, children = pytorch.start(workload, base, model, steps, torch_rows)
  try:
    timing = bracketed(
        reference,
        rows + remote,
        steps,
        workload.repeats,
        # In the model's dtype: a bf16 model against a float32 rate read 507%.
        peak=lambda: max(
            matmul_rate(n, dtype=jnp.dtype(base.model.dtype)) for n in workload.matmul_n
        ),
    )
  finally:
    for served in children:
      served.close()
  peaks = [
      p
      for i, p in enumerate(timing["reference"]["peak"])
      if i % (len(rows + remote) + 1) == 0
  ]
  result = dict(
      devices=devices,
      steps_per_unit=steps,
      config_h=int(base.interval.h),
      repeats=workload.repeats,
      num_workers=workload.num_workers,
      batch_per_worker=base.data.batch_size,
      seq_len=base.data.seq_len,
      model=base.model.to_dict(),
      num_params=model.num_params,
      flops_per_token=model.flops_per_token,
      matmul_n=workload.matmul_n,
      matmul_peaks=peaks,
      matmul_peak_max=max(peaks),
      matmul_peak_median=median(peaks),
      rows=[summarize(r, timing[r.name], steps) for r in [reference] + rows + remote],
      skipped=skipped,
      compiles={},
      pytorch=torch_info,
  )
  _equal_devices(result["rows"])
  check_hs = tuple(h for h in (2, 1, 3) if h <= steps)  # H changes every round
  for runner in [reference] + rows:
    result["compiles"][runner.name] = compile_check(runner, check_hs)
    result["compiles"][runner.name]["compile_seconds"] = runner.compile_seconds
  live = {r.name: r for r in [reference] + rows}
  if devices == 1 and "diloco" in live:
    _shared[_sweep_key(base)] = (reference, live["diloco"])
  return result, live


def _stage_uint8(batch_KxnxBxL1: np.ndarray, chunk: int, mesh) -> jax.Array:
  """The alternative the staging check prices: ``rounds.stage`` with a uint8
  buffer (cast to int32 on device instead of on the host)."""
  tokens_KxCxBxL1 = np.zeros(
      batch_KxnxBxL1.shape[:1] + (chunk,) + batch_KxnxBxL1.shape[2:], np.uint8
  )
  tokens_KxCxBxL1[:, : batch_KxnxBxL1.shape[1]] = batch_KxnxBxL1
  return replicas.put_workers(tokens_KxCxBxL1, mesh)


def staging_cost(runner: AlgoRunner, repeats: int = 5) -> dict:
  """Host seconds to read, pad and put one round's tokens (no compute): the
  trainer's int32 buffer (``rounds.run_steps`` with an inner loop that only
  waits for each staged chunk) and a uint8 one (cast on device instead)."""
  h, chunk, mesh = runner.h, runner.chunk, runner.mesh

  def int32():
    wait = lambda state, tokens, n: (jax.block_until_ready(tokens), state)[1]
    rounds.run_steps(wait, None, runner.read.fork(), h, chunk, mesh)

  def uint8():
    read = runner.read.fork()
    for n in [min(chunk, h - start) for start in range(0, h, chunk)]:
      jax.block_until_ready(_stage_uint8(read(n), chunk, mesh))

  seconds = {
      str(np.dtype(d)): median(timed(f) for _ in range(repeats))
      for d, f in ((np.int32, int32), (np.uint8, uint8))
  }
  K, L1 = runner.config.num_workers, runner.config.data.seq_len + 1
  return dict(
      h=h,
      chunk=chunk,
      seconds=seconds,
      buffer_bytes_int32=K * chunk * runner.batch * L1 * 4,
  )


def hot_path(workload: Workload, runners: dict, main: dict) -> dict:
  """Donation, transfers, staging, and ``while_loop`` vs ``scan``, paired."""
  library = runners["diloco"]
  model = build_model(library.config)
  scan = warm_up(
      library.with_inner("diloco, scan of chunk", scan_inner(library, model), model)
  )
  timing = bracketed(library, [scan], library.h, workload.sweep_repeats)
  round_seconds = median(
      next(r for r in main["rows"] if r["name"] == "diloco")["seconds"]
  )
  return dict(
      donated={r["name"]: r["donated"] for r in main["rows"] if "donated" in r},
      donation_warnings={
          r["name"]: r["donation_warnings"]
          for r in main["rows"]
          if r["donation_warnings"]
      },
      device_to_host_inside_round=(
          "none: every inner call of every row ran under "
          "jax.transfer_guard_device_to_host('disallow')"
      ),
      scan_vs_while=dict(
          h=library.h,
          chunk=library.chunk,
          ratio=median(timing[scan.name]["ratio"]),
          ratios=timing[scan.name]["ratio"],
      ),
      staging=dict(staging_cost(library), diloco_round_seconds=round_seconds),
      autoloco_staging=staging_cost(runners["autoloco"])
      if "autoloco" in runners
      else None,
  )


def _scaling_point(workload: Workload, config: Any) -> dict:
  """DiLoCo against the reference at one config, units of one round."""
  h = workload.scale_steps
  model = build_model(config)
  if _sweep_key(config) in _shared:
    reference, algo = _shared[_sweep_key(config)]
  else:
    data = synthetic_data(config)
    mesh = replicas.make_mesh(config.num_workers, 1)
    algo = warm_up(AlgoRunner("diloco", config, model, mesh, data))
    reference = warm_up(ReferenceRunner(config, model, data))
  timing = bracketed(reference, [algo], h, workload.sweep_repeats, round_h=h)
  row = summarize(algo, timing["diloco"], h, round_h=h)
  row.update(
      reference_tokens_per_sec=summarize(reference, timing["reference"], h)[
          "tokens_per_sec"
      ],
      num_params=model.num_params,
      flops_per_token=model.flops_per_token,
      global_batch=config.num_workers * config.data.batch_size,
      xla=algo.memory(),
      memory=round_memory(algo, h),
  )
  return row


def scaling(workload: Workload) -> dict:
  """DiLoCo against the reference at the same global batch, on one device, as K
  grows at a fixed per-worker batch and as d_model grows at fixed K.

  Rounds of ``scale_steps`` inner steps; the configs keep DiLoCo's H for the
  staged chunk, so the point equal to the throughput table's config reuses its
  compiled runners."""
  by_k = [
      dict(
          num_workers=k,
          **_scaling_point(workload, algorithm_config(workload, "diloco", num_workers=k)),
      )
      for k in workload.scale_workers
  ]
  by_width = [
      dict(
          d_model=d,
          **_scaling_point(workload, algorithm_config(workload, "diloco", d_model=d)),
      )
      for d in workload.scale_widths
  ]
  return dict(steps=workload.scale_steps, by_workers=by_k, by_width=by_width)
