"""XLA:CPU options, bf16 compute and the attention path, each measured on the
reference training step against the default, side by side.

Regenerate ``docs/xla_options.json`` (the raw numbers) and ``docs/xla_options.md``;
about 12 minutes on a quiet 2-core CPU::

  python -m benchmarks.xla_options --out docs/xla_options.json --md docs/xla_options.md

CI mode (the throughput benchmark's one-layer toy model, one repeat, a 20-step
loss check: structure, not speed; ``tests/test_xla_options.py``)::

  python -m benchmarks.xla_options --quick --out /tmp/x.json --md /tmp/x.md

How it is measured, and what each field of the JSON means: the opening of
``docs/xla_options.md`` (its blocks are rendered from the JSON by
``benchmarks/render.py``).

``--extra 'NAME=--xla_flag=value --xla_other=value'`` (repeatable) adds a
variant without editing the list; ``--variants a,b`` keeps only those.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from benchmarks import render, unit_server
from benchmarks.render import Lines, Table
from benchmarks.throughput.child import ROOT, child_env
from benchmarks.throughput.timing import bracketed, summarize
from benchmarks.xla_options_child import Variant, serve, step_config, variant_workload


def _define_flags() -> None:
  """The command line's flags, defined only when this file runs as a program,
  so that importing it (``benchmarks/render.py`` reads its ``TABLES``) defines
  none."""
  global _QUICK, _OUT, _MD, _REPEATS, _STEPS, _VARIANTS, _EXTRA, _CURVE_STEPS, _CURVE_POINTS, _CHILD
  _QUICK = flags.DEFINE_bool(
      "quick", False, "CI mode: a one-layer toy model, one repeat; structure, not speed."
  )
  _OUT = flags.DEFINE_string(
      "out", "docs/xla_options.json", "Where to write the numbers."
  )
  _MD = flags.DEFINE_string(
      "md", "docs/xla_options.md", "Where to write the report ('' = none)."
  )
  _REPEATS = flags.DEFINE_integer(
      "repeats", 0, "Variant units per variant (0: 3, quick 1)."
  )
  _STEPS = flags.DEFINE_integer(
      "steps", 0, "Inner steps per timed unit (0: 10, quick 3)."
  )
  _VARIANTS = flags.DEFINE_list(
      "variants", [], "Variants to measure (empty: all of VARIANTS)."
  )
  _EXTRA = flags.DEFINE_multi_string(
      "extra",
      [],
      "More variants, NAME='--xla_flag=value ...' (XLA_FLAGS added to the default's).",
  )
  _CURVE_STEPS = flags.DEFINE_integer(
      "curve_steps", -1, "Steps of the bf16 loss check (-1: 200, quick 20; 0: skip it)."
  )
  _CURVE_POINTS = flags.DEFINE_integer(
      "curve_points", 4, "Evaluations along the loss check."
  )
  _CHILD = flags.DEFINE_string(
      "child", "", "Internal: run as the child of this variant (JSON)."
  )


#: Quick mode's cheaper XLA compiles, in every child (the throughput benchmark's
#: ``--quick`` uses the same two): structure, not speed.
FAST_COMPILE = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
)


#: The default: no flag, environment or setting changed.
DEFAULT = Variant("default", "XLA's and the model's defaults")
#: bf16 compute; also the bf16 side of the loss check.
BF16 = Variant("bf16", "model.dtype=bfloat16, float32 master weights", dtype="bfloat16")

VARIANTS = (
    Variant("default_again", "the default in a second child: noise floor, determinism"),
    Variant(
        "old_runtime",
        "the pre-thunk runtime (XLA warns the flag is no longer supported)",
        ("--xla_cpu_use_thunk_runtime=false",),
    ),
    Variant(
        "fast_math",
        "fast math, still honouring NaN, Inf, division and functions",
        ("--xla_cpu_enable_fast_math=true",),
    ),
    Variant(
        "fast_math_all",
        "fast math without honouring NaN, Inf, division or functions",
        (
            "--xla_cpu_enable_fast_math=true",
            "--xla_cpu_fast_math_honor_nans=false",
            "--xla_cpu_fast_math_honor_infs=false",
            "--xla_cpu_fast_math_honor_division=false",
            "--xla_cpu_fast_math_honor_functions=false",
        ),
    ),
    Variant(
        "eigen_one_thread",
        "single-threaded Eigen calls (the intra-op pool unused by them)",
        ("--xla_cpu_multi_thread_eigen=false",),
    ),
    Variant(
        "codegen_split_1",
        "no parallel LLVM codegen (a compile-time option)",
        ("--xla_cpu_parallel_codegen_split_count=1",),
    ),
    Variant(
        "xnnpack_off", "no XNNPACK (on by default)", ("--xla_cpu_use_xnnpack=false",)
    ),
    Variant(
        "xnn_fusions",
        "XNNPACK fusions of dots and elementwise ops (experimental)",
        ("--xla_cpu_experimental_xnn_fusion_type=dot,eltwise",),
    ),
    Variant(
        "xnn_graph_greedy",
        "greedy XNNPACK subgraphs (experimental)",
        ("--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",),
    ),
    Variant(
        "onednn",
        "oneDNN matmuls and dot fusions",
        ("--xla_cpu_use_onednn=true", "--xla_cpu_experimental_onednn_fusion_type=dot"),
    ),
    Variant(
        "vector_width_512",
        "512-bit vectors in generated code",
        ("--xla_cpu_prefer_vector_width=512",),
    ),
    Variant(
        "fast_runtime_preset",
        "XLA:CPU's FAST_RUNTIME optimisation preset",
        ("--xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_RUNTIME",),
    ),
    Variant(
        "concurrency_scheduler",
        "the concurrency-optimised HLO scheduler",
        ("--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED",),
    ),
    Variant(
        "sync_dispatch",
        "synchronous CPU dispatch (jax_cpu_enable_async_dispatch=false)",
        env=(("JAX_CPU_ENABLE_ASYNC_DISPATCH", "false"),),
    ),
    Variant(
        "data_parallel_2",
        "the global batch split over 2 simulated devices (GSPMD all-reduce)",
        devices=2,
    ),
    BF16,
    Variant(
        "attention_library",
        "jax.nn.dot_product_attention instead of transformer.py's hand-written CPU path",
        attention="library",
    ),
    Variant(
        "attention_blocked",
        "model.attention=einsum_blocked: the causal scores by query blocks, none masked whole",
        attention="blocked",
    ),
)


def _steps() -> int:
  return _STEPS.value or (3 if _QUICK.value else 10)


def _repeats() -> int:
  return _REPEATS.value or (1 if _QUICK.value else 3)


def _curve_steps() -> int:
  return _CURVE_STEPS.value if _CURVE_STEPS.value >= 0 else (20 if _QUICK.value else 200)


# ----------------------------------------------------------------------------
# The parent: children driven side by side.


class ChildFailed(Exception):
  """A child exited before answering; ``status`` is unavailable or failed."""

  def __init__(self, status: str, reason: str):
    super().__init__(f"{status}: {reason}")
    self.status, self.reason = status, reason


class Child:
  """A variant's child process (``unit_server.Served``); a row for
  ``timing.bracketed`` (``unit`` runs in the child, timed here)."""

  donation_warnings: tuple = ()

  def __init__(self, variant: Variant, steps: int, tmp: str):
    self.variant, self.name, self.h = variant, variant.name, steps
    env = child_env(variant.devices)
    base = env["XLA_FLAGS"].split() + list(FAST_COMPILE if _QUICK.value else ())
    env["XLA_FLAGS"] = " ".join(base + list(variant.xla_flags))
    env.update(dict(variant.env))
    # Each child compiles for itself: compile seconds are its own, and no
    # executable is shared between processes with different flags.
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    self.xla_flags = env["XLA_FLAGS"]
    spec = dict(
        variant=dataclasses.asdict(variant),
        quick=_QUICK.value,
        steps=steps,
        params_path=os.path.join(tmp, f"{variant.name}.npz"),
    )
    args = [sys.executable, "-m", "benchmarks.xla_options", f"--child={json.dumps(spec)}"]
    self.served = unit_server.Served(args, env, ROOT)
    self.ready = self.served.ready()
    if "error" in self.ready:
      reason = self.why()
      self.served.close()
      raise ChildFailed(*reason)
    self.tokens_per_step = self.ready["tokens_per_step"]
    self.flops_per_token = self.ready["flops_per_token"]
    self.compile_seconds = self.ready["compile_seconds"]

  def unit(self, steps: int, round_h: int = 0) -> None:
    try:
      self.served.unit("step", steps, round_h)
    except unit_server.ChildExited as e:
      raise ChildFailed(*self.why()) from e

  def curve(self, steps: int, points: int) -> dict:
    return self.served.call("curve", steps=steps, points=points)

  def why(self) -> tuple[str, str]:
    """(status, reason) of a child that exited: XLA's complaint about a flag, or
    the end of its log."""
    log = self.served.log()
    for line in log.splitlines():
      if "Unknown flag in XLA_FLAGS" in line or "Illegal value for" in line:
        return "unavailable", line.split("] ", 1)[-1].strip()
    return "failed", f"exit code {self.served.proc.poll()}: {log[-1500:]}"

  def flag_warnings(self) -> list[str]:
    """XLA's warnings about flags in the child's log (deprecated, ignored)."""
    return [
        line.split("] ", 1)[-1].strip()
        for line in self.served.log().splitlines()
        if "debug_options_flags" in line or "no longer supported" in line
    ]

  def close(self) -> None:
    self.served.close()


def numerics(default: dict, probe_result: dict) -> dict:
  """The parameters a variant's probe reached against the default's."""
  with np.load(default["params"]) as a, np.load(probe_result["params"]) as b:
    pairs = [(a[k], b[k]) for k in a.files]
  identical = all(np.array_equal(x, y) for x, y in pairs)
  max_abs = max(float(np.max(np.abs(x - y))) for x, y in pairs)
  scale = max(float(np.max(np.abs(x))) for x, _ in pairs)
  loss_diff = probe_result["loss_sum"] - default["loss_sum"]
  summary = (
      "bitwise identical"
      if identical
      else f"changed: max |dθ| {max_abs:.1e} ({max_abs / scale:.1e} of max |θ|), "
      f"summed loss {loss_diff:+.1e}"
  )
  return dict(
      identical=identical,
      max_abs_param_diff=max_abs,
      max_rel_param_diff=max_abs / scale,
      loss_sum=probe_result["loss_sum"],
      loss_sum_diff=loss_diff,
      summary=summary,
  )


def variants() -> list[Variant]:
  """``--variants`` of ``VARIANTS`` (all if empty) and the ``--extra`` ones."""
  known = {v.name: v for v in VARIANTS}
  names = _VARIANTS.value or list(known)
  unknown = [n for n in names if n not in known]
  if unknown:
    raise SystemExit(f"unknown --variants {unknown}; choose from {sorted(known)}")
  chosen = [known[n] for n in names]
  for item in _EXTRA.value:
    name, _, xla_flags = item.partition("=")
    if not name or not xla_flags.strip():
      raise SystemExit(f"--extra wants NAME='--xla_flag=value ...', got {item!r}")
    chosen.append(Variant(name.strip(), "added by --extra", tuple(xla_flags.split())))
  return chosen


def _row(variant: Variant) -> dict:
  return dict(
      name=variant.name,
      note=variant.note,
      xla_flags=list(variant.xla_flags),
      env=dict(variant.env),
      devices=variant.devices,
      dtype=variant.dtype or "float32",
      attention=variant.attention or "transformer.py",
  )


def measure_variant(default: Child, variant: Variant, steps: int, repeats: int, tmp: str):
  """One variant's row: its child started, probed and timed between default
  units; returns ``(row, default seconds, child)`` (the child still running,
  ``None`` if it never started)."""
  row = _row(variant)
  try:
    child = Child(variant, steps, tmp)
  except ChildFailed as e:
    row.update(status=e.status, reason=e.reason)
    return row, [], None
  try:
    timing = bracketed(default, [child], steps, repeats)
  except ChildFailed as e:
    if default.served.proc.poll() is not None:
      raise
    row.update(status="failed", reason=f"during the timed units: {e.reason}")
    return row, [], None
  row.update(
      status="ran",
      warnings=child.flag_warnings(),
      setup_seconds=child.ready["setup_seconds"],
      devices=child.ready["devices"],
      numerics=numerics(default.ready, child.ready),
      **summarize(child, timing[child.name], steps),
  )
  return row, timing[default.name]["seconds"], child


def candidates(rows: list[dict], margin: float = 1.05) -> list[str]:
  """Variants with bitwise identical numerics whose every ratio beats the noise
  floor (the largest ``default_again`` ratio, else 1) and whose median is at
  least ``margin``: worth a look on quiet cores."""
  ran = [r for r in rows if r["status"] == "ran"]
  floor = max([r["ratio_max"] for r in ran if r["name"] == "default_again"] or [1.0])
  return [
      r["name"]
      for r in ran
      if r["name"] != "default_again"
      and r["numerics"]["identical"]
      and r["ratio_min"] > floor
      and r["ratio"] >= margin
  ]


def bf16_check(default: Child, bf16: Child, steps: int, points: int) -> dict:
  """The loss curves of float32 (``default``) and bfloat16 (``bf16``)."""
  runs = {c.variant.dtype or "float32": c.curve(steps, points) for c in (default, bf16)}
  f32, b16 = runs["float32"]["final_eval_loss"], runs["bfloat16"]["final_eval_loss"]
  return dict(
      steps=steps,
      float32=runs["float32"],
      bfloat16=runs["bfloat16"],
      final_eval_loss_float32=f32,
      final_eval_loss_bfloat16=b16,
      difference=b16 - f32,
  )


def run() -> dict:
  """Every variant against the default, then the bf16 loss check."""
  t0, steps, repeats = time.perf_counter(), _steps(), _repeats()
  chosen = variants()
  tmp = tempfile.mkdtemp(prefix="xla_options_")
  load_start = list(os.getloadavg())
  default = Child(DEFAULT, steps, tmp)
  print(f"[xla_options] default ready ({time.perf_counter() - t0:.0f} s)", flush=True)
  rows, default_seconds, bf16 = [], [], None
  for variant in chosen:
    row, seconds, child = measure_variant(default, variant, steps, repeats, tmp)
    rows.append(row)
    default_seconds += seconds
    if child is not None and variant.dtype == "bfloat16" and bf16 is None:
      bf16 = child  # kept for the loss check
    elif child is not None:
      child.close()
    ratio = f"{row['ratio']:.3f}" if "ratio" in row else row.get("reason", "")[:80]
    print(
        f"[xla_options] {variant.name}: {row['status']} {ratio} ({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
  curve_steps = _curve_steps()
  check = None
  if curve_steps > 0:
    bf16 = bf16 or Child(BF16, steps, tmp)
    check = bf16_check(default, bf16, curve_steps, _CURVE_POINTS.value)
    print(f"[xla_options] bf16 check done ({time.perf_counter() - t0:.0f} s)", flush=True)
  for child in (bf16, default):
    if child is not None:
      child.close()
  tokens = default.tokens_per_step * steps
  workload = variant_workload(_QUICK.value)
  config = step_config(workload, DEFAULT)
  return dict(
      mode="quick" if _QUICK.value else "full",
      command=" ".join(["python -m benchmarks.xla_options"] + sys.argv[1:]),
      machine=default.ready["machine"],
      load_avg_start=load_start,
      load_avg_end=list(os.getloadavg()),
      base_xla_flags=default.xla_flags,
      setup=dict(
          size=workload.size,
          model=config.model.to_dict(),
          num_workers=config.num_workers,
          batch_per_worker=config.data.batch_size,
          seq_len=config.data.seq_len,
          tokens_per_step=default.tokens_per_step,
          flops_per_token=default.flops_per_token,
          steps_per_unit=steps,
          repeats=repeats,
      ),
      default=dict(
          seconds=default_seconds,
          tokens_per_sec=statistics.median(tokens / s for s in default_seconds)
          if default_seconds
          else None,
          compile_seconds=default.compile_seconds,
          probe_loss_sum=default.ready["loss_sum"],
      ),
      variants=rows,
      candidates=candidates(rows),
      bf16_check=check,
      wall_seconds=time.perf_counter() - t0,
  )


# ----------------------------------------------------------------------------
# The generated blocks of docs/xla_options.md (benchmarks/render.py).


def prepare(result: dict) -> dict:
  """The result with the table's derived cells."""
  rows = []
  for row in result["variants"]:
    setting = " ".join(f"`{f}`" for f in row["xla_flags"])
    setting += " ".join(f"`{k}={v}`" for k, v in row["env"].items())
    status = row["status"]
    if status != "ran":
      status += ": " + row["reason"][:160]
    elif row.get("warnings"):
      status += " (XLA: " + "; ".join(w[:120] for w in row["warnings"]) + ")"
    rows.append(dict(row, what=f"{row['note']} {setting}".strip(), status_cell=status))
  check = result.get("bf16_check")
  curve = []
  if check:
    for a, b in zip(check["float32"]["curve"], check["bfloat16"]["curve"]):
      f32, b16 = a["eval_loss"], b["eval_loss"]
      curve.append(dict(step=a["step"], f32=f32, b16=b16, diff=b16 - f32))
  return dict(
      result,
      rows=rows,
      curve=curve,
      candidates_cell=", ".join(f"`{n}`" for n in result["candidates"]) or "none",
  )


TABLES = {
    "run": Lines(
        (
            "`{command}` ({mode} mode), {wall_seconds:.0f} s; {machine[cpu]}, "
            "{machine[cores]} cores, jax {machine[jax]}; load average "
            "{load_avg_start[0]:.2f} at the start, {load_avg_end[0]:.2f} at the end.",
            "",
            "Step: size `{setup[size]}` (d_model {setup[model][d_model]}, num_layers "
            "{setup[model][num_layers]}, L = {setup[seq_len]}, global batch "
            "{setup[num_workers]} x {setup[batch_per_worker]}), "
            "{setup[steps_per_unit]} steps per unit, {setup[repeats]} repeat(s) per "
            "variant. Default: {default[tokens_per_sec]:,.0f} tokens/s (median of its "
            "units), XLA_FLAGS `{base_xla_flags}`.",
        )
    ),
    "variants": Table(
        lambda r: r["rows"],
        (
            ("variant", "{name}"),
            ("what", "{what}"),
            ("tokens/s", "{tokens_per_sec:,.0f}", "–"),
            ("ratio to default", "{ratio:.3f} [{ratio_min:.3f}, {ratio_max:.3f}]", "–"),
            ("numerics", "{numerics[summary]}", "–"),
            ("status", "{status_cell}"),
        ),
    ),
    "candidates": Lines(
        (
            "Candidates (bitwise identical numerics, every ratio above the largest "
            "`default_again` ratio, median >= 1.05): {candidates_cell}.",
        )
    ),
    "bf16": Table(
        lambda r: r["curve"],
        (
            ("step", "{step}"),
            ("eval loss float32", "{f32:.4f}"),
            ("eval loss bfloat16", "{b16:.4f}"),
            ("bf16 - f32", "{diff:+.4f}"),
        ),
        title="{bf16_check[steps]} steps on Shakespeare, same seed:",
        empty="No loss check in this run (`--curve_steps 0`).",
    ),
    "bf16_final": Lines(
        (
            "Final eval loss: float32 {bf16_check[final_eval_loss_float32]:.4f}, "
            "bfloat16 {bf16_check[final_eval_loss_bfloat16]:.4f}, difference "
            "{bf16_check[difference]:+.4f} nats (training took "
            "{bf16_check[float32][seconds]:.0f} s and "
            "{bf16_check[bfloat16][seconds]:.0f} s).",
        )
    ),
}

#: The page whose generated blocks a run fills (its prose is static).
PAGE, DATA = "docs/xla_options.md", "docs/xla_options.json"


def main(argv):
  del argv
  if _CHILD.value:
    serve(json.loads(_CHILD.value))
    return
  result = run()
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1, default=float)
  if _MD.value:
    render.write(PAGE, _MD.value, {DATA: result})
  print(f"[xla_options] wrote {_OUT.value} in {result['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
