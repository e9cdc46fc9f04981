"""Timing: timed units side by side with the reference, compile time and counts,
the memory of a round.

JAX reports trace, lowering and XLA compile durations as monitoring events; the
listener registered here sums them, so a row's compile seconds are the events
during its warm-up round.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Any, Callable

import jax
from jax._src import monitoring

from benchmarks.throughput.runners import AlgoRunner, Runner

_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)

_compile_seconds = [0.0]


def _on_event(name: str, seconds: float, **_) -> None:
  if name in _COMPILE_EVENTS:
    _compile_seconds[0] += seconds


monitoring.register_event_duration_secs_listener(_on_event)


def timed(fn: Callable[[], Any]) -> float:
  """Wall seconds of ``fn()``."""
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def median(xs) -> float:
  """The median of the values that are not ``None`` (NaN if there are none)."""
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else float("nan")


def warm_up(runner: Runner) -> Runner:
  """One round of H=1 (it compiles); records compile seconds and warnings."""
  before = _compile_seconds[0]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runner.round(1)
  runner.compile_seconds = _compile_seconds[0] - before
  runner.donation_warnings = tuple(
      str(w.message)[:200] for w in caught if "donat" in str(w.message).lower()
  )
  return runner


def bracketed(
    reference: Runner,
    rows: list[Runner],
    steps: int,
    repeats: int,
    peak: Callable[[], float] | None = None,
    round_h: int = 0,
) -> dict:
  """Times ``rows`` side by side with ``reference``: ref, row 1, ref, row 2, ...,
  ref, every unit ``steps`` inner steps (in rounds of ``round_h``, default each
  row's own H), after one untimed unit of each. A row's ratio uses the mean of its two
  neighbouring reference units; odd repeats reverse the row order; ``peak`` (a
  matmul rate) is measured once per repeat and paired with that repeat's units.
  Returns ``{name: {seconds, ratio, peak, reference_tokens_per_sec}}`` (lists
  over units; the last: the mean rate of the two reference units around each
  of the row's) and ``reference``, the reference's name, in each row's dict."""
  out = {
      r.name: dict(seconds=[], ratio=[], peak=[], reference_tokens_per_sec=[])
      for r in [reference] + rows
  }
  for row in rows:
    out[row.name]["reference"] = reference.name
  # One untimed unit each first: warm_up's H = 1 round compiles, but the first
  # full unit can still pay one-off costs (on a GPU, the allocator growing for
  # the staged chunk made DiLoCo's first timed unit 3x its second).
  for row in [reference] + rows:
    row.unit(steps, round_h)
  for rep in range(repeats):
    p = peak() if peak else float("nan")
    order = rows if rep % 2 == 0 else rows[::-1]
    t_before = timed(lambda: reference.unit(steps, round_h))
    out[reference.name]["seconds"].append(t_before)
    out[reference.name]["peak"].append(p)
    for row in order:
      t = timed(lambda: row.unit(steps, round_h))
      t_after = timed(lambda: reference.unit(steps, round_h))
      out[reference.name]["seconds"].append(t_after)
      out[reference.name]["peak"].append(p)
      ref_rate = reference.tokens_per_step * steps / ((t_before + t_after) / 2)
      out[row.name]["seconds"].append(t)
      out[row.name]["ratio"].append((row.tokens_per_step * steps / t) / ref_rate)
      out[row.name]["reference_tokens_per_sec"].append(ref_rate)
      out[row.name]["peak"].append(p)
      t_before = t_after
  return out


def summarize(runner: Runner, timing: dict, steps: int, round_h: int = 0) -> dict:
  """One row from its units: medians of tokens/s, ratio, model FLOP/s, MFU."""
  rates = [runner.tokens_per_step * steps / s for s in timing["seconds"]]
  flops = [r * runner.flops_per_token for r in rates]
  row = dict(
      name=runner.name,
      h=round_h or runner.h,
      steps_per_unit=steps,
      seconds=timing["seconds"],
      tokens_per_sec=median(rates),
      model_flops_per_sec=median(flops),
      compile_seconds=runner.compile_seconds,
      donation_warnings=list(runner.donation_warnings),
  )
  if timing["ratio"]:
    row.update(
        reference=timing["reference"],
        reference_tokens_per_sec=median(timing["reference_tokens_per_sec"]),
        ratio=median(timing["ratio"]),
        ratios=timing["ratio"],
        ratio_min=min(timing["ratio"]),
        ratio_max=max(timing["ratio"]),
    )
  if all(math.isfinite(p) for p in timing["peak"]):
    # MFU against the matmul peak measured in the same repeat, so both see one load.
    row["mfu_vs_measured_peak"] = median(f / p for f, p in zip(flops, timing["peak"]))
  if isinstance(runner, AlgoRunner):
    row["donated"] = runner.donated
  return row


def compile_check(runner: Runner, hs: tuple[int, ...]) -> dict:
  """Rounds of changing ``H`` on a warm runner, then its compile counts."""
  for h in hs:
    runner.round(h)
  counts = runner.compiles()
  return dict(
      hs=list(runner.hs),
      distinct_h=len(set(runner.hs)),
      **counts,
      once=all(v == 1 for v in counts.values()),
  )


def _proc_status(key: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1]) * 1024
  raise OSError(f"{key} not in /proc/self/status")


def round_memory(runner: Runner, h: int) -> dict:
  """Memory of one unit: the device's peak where the backend reports it; on CPU
  the process's peak resident set during it (Linux ``VmHWM``, reset through
  ``/proc/self/clear_refs``) and its growth over the resident set before it;
  elsewhere ``ru_maxrss`` (the process's high-water mark since it started)."""
  stats = jax.devices()[0].memory_stats()
  if stats and "peak_bytes_in_use" in stats:
    runner.round(h)
    return dict(
        method="device memory_stats peak_bytes_in_use",
        peak_bytes=jax.devices()[0].memory_stats()["peak_bytes_in_use"],
    )
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    before = _proc_status("VmRSS")
    runner.round(h)
    peak = _proc_status("VmHWM")
    return dict(
        method="process RSS: VmHWM reset by /proc/self/clear_refs",
        peak_bytes=peak,
        growth_bytes=peak - before,
    )
  except OSError:
    import resource

    runner.round(h)
    return dict(
        method="process RSS: ru_maxrss high-water mark",
        peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )
