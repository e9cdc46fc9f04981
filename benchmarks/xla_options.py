"""XLA:CPU options, bf16 compute and the attention path, each measured on the
reference training step against the default, side by side.

Regenerate ``docs/xla_options.json`` (the raw numbers) and ``docs/xla_options.md``;
about 12 minutes on a quiet 2-core CPU::

  python -m benchmarks.xla_options --out docs/xla_options.json --md docs/xla_options.md

CI mode (the throughput benchmark's one-layer toy model, one repeat, a 20-step
loss check: structure, not speed; ``tests/test_xla_options.py``)::

  python -m benchmarks.xla_options --quick --out /tmp/x.json --md /tmp/x.md

The step is the ``reference`` row of ``benchmarks/throughput`` (built by its
``plan`` and ``runners``): one model, the inner optimizer (clipping + AdamW),
the global batch of the K = 4 workers' batches, ``--steps`` steps per timed unit
in a ``while_loop`` over staged batches, at the ``cpu`` size preset.

XLA reads its flags once, when the backend starts, so every variant runs in its
own child process (a fresh JAX with the variant's ``XLA_FLAGS``, environment or
model setting), and one more child runs the default. This process drives them
over pipes and times units in the order default, variant, default
(``timing.bracketed`` of the throughput benchmark, ``--repeats`` times, one
variant after another). Measured, per variant:

* ``ratio``: tokens/s of the variant's unit over the mean of its two
  neighbouring default units; the median and [min, max] over repeats. The
  ``default_again`` row is the default in a second child: the noise floor of a
  ratio. Absolute tokens/s move with the machine's load and are reported, not
  compared.
* ``numerics``: each child's warm-up trains ``--steps`` steps from the same
  initialisation on the same synthetic batches; the parameters it reaches are
  compared with the default child's: bitwise identical, or the largest
  parameter difference and the difference of the summed training losses.
* ``candidates``: the variants with bitwise identical numerics whose every
  ratio beats the largest ``default_again`` ratio, with a median >= 1.05.
* ``status``: ``ran``; ``unavailable`` when this jaxlib does not know the flag
  or its value (XLA aborts the child at startup, the other variants still run);
  ``failed`` otherwise. XLA's warnings about a flag (deprecated, ignored) are kept.

The bf16 loss check: the default child (float32) and the ``bf16`` child
(``model.dtype=bfloat16``: bf16 activations and matmuls, float32 master weights
and optimizer state) each train the model ``--curve_steps`` steps on the
embedded Shakespeare data from the same seed (the same reference loop, its
learning-rate schedule over those steps) and evaluate the validation loss on the
trainer's ``config.eval`` batches along the way, each in its own dtype. Reported:
both curves, the final eval losses and their difference.

``--extra 'NAME=--xla_flag=value --xla_other=value'`` (repeatable) adds a
variant without editing the list; ``--variants a,b`` keeps only those.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from jax import lax
from jax.sharding import NamedSharding

from autoloco_jax import data as data_lib, model as model_lib, replicas
from benchmarks.throughput.child import child_env
from benchmarks.throughput.peak import machine
from benchmarks.throughput.plan import (
    Plan,
    algorithm_config,
    build_model,
    make_plan,
    synthetic_data,
)
from benchmarks.throughput.runners import ReferenceRunner
from benchmarks.throughput.timing import bracketed, summarize, timed, warm_up

_QUICK = flags.DEFINE_bool(
    "quick", False, "CI mode: a one-layer toy model, one repeat; structure, not speed."
)
_OUT = flags.DEFINE_string("out", "docs/xla_options.json", "Where to write the numbers.")
_MD = flags.DEFINE_string(
    "md", "docs/xla_options.md", "Where to write the report ('' = none)."
)
_REPEATS = flags.DEFINE_integer(
    "repeats", 0, "Variant units per variant (0: 3, quick 1)."
)
_STEPS = flags.DEFINE_integer("steps", 0, "Inner steps per timed unit (0: 10, quick 3).")
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Quick mode's cheaper XLA compiles, in every child (the throughput benchmark's
#: ``--quick`` uses the same two): structure, not speed.
FAST_COMPILE = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
)
#: Prefix of the child's protocol lines on its stdout (anything else is ignored).
MARK = "@xla_options "


@dataclasses.dataclass(frozen=True)
class Variant:
  """One way to run the same training step."""

  name: str
  note: str
  xla_flags: tuple = ()  # added to the default's XLA_FLAGS
  env: tuple = ()  # (NAME, value) environment variables
  devices: int = 1  # > 1: the global batch split data-parallel over simulated devices
  dtype: str = ""  # model.dtype ('' = the config's, float32)
  attention: str = ""  # '' = model.py's own path; a key of ATTENTION


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
        "jax.nn.dot_product_attention instead of model.py's hand-written CPU path",
        attention="library",
    ),
)


def library_attention(q_BxHxLxK, k_BxHxLxK, v_BxHxLxK):
  """``model.py``'s non-CPU path: ``jax.nn.dot_product_attention`` on
  ``[B, L, H, K]`` views of the heads-major inputs."""
  to_blhk = lambda t: t.transpose(0, 2, 1, 3)
  o_BxLxHxK = jax.nn.dot_product_attention(
      to_blhk(q_BxHxLxK), to_blhk(k_BxHxLxK), to_blhk(v_BxHxLxK), is_causal=True
  )
  return to_blhk(o_BxLxHxK)


#: Replacements of ``model.causal_attention``, patched in the child only.
ATTENTION = {"library": library_attention}


def _plan(quick: bool) -> Plan:
  return make_plan(
      quick=quick,
      num_workers=4,
      h=0,
      repeats=0,
      sweep_repeats=0,
      scale_workers=[],
      scale_widths=[],
      scale_steps=1,
  )


def _steps() -> int:
  return _STEPS.value or (3 if _QUICK.value else 10)


def _repeats() -> int:
  return _REPEATS.value or (1 if _QUICK.value else 3)


def _curve_steps() -> int:
  return _CURVE_STEPS.value if _CURVE_STEPS.value >= 0 else (20 if _QUICK.value else 200)


# ----------------------------------------------------------------------------
# The child: one variant's process.


def _config(plan: Plan, variant: Variant):
  """The reference row's config (the ``diloco`` config at the plan's size, as
  ``measure.measure_rows`` builds it) with the variant's model dtype."""
  config = algorithm_config(plan, "diloco")
  if variant.dtype:
    config.model.dtype = variant.dtype
  return config


def _data_parallel(runner: ReferenceRunner, devices: int) -> ReferenceRunner:
  """The reference's global batch split over ``devices`` devices: workers'
  batches are staged on a mesh of that many devices, the carry replicated on it;
  GSPMD partitions the step (gradients all-reduced)."""
  runner.mesh = replicas.make_mesh(runner.config.num_workers, devices)
  runner.carry = jax.device_put(
      runner.carry, NamedSharding(runner.mesh, replicas.REPLICATED)
  )
  return runner


def reference(config, steps: int, devices: int = 1, data=None) -> ReferenceRunner:
  """The reference row of the throughput benchmark for ``config``, in rounds of
  at most ``steps`` steps, on ``data`` (default: its synthetic bytes), on
  ``devices`` devices."""
  runner = ReferenceRunner(config, build_model(config), data or synthetic_data(config))
  runner.h = min(runner.h, steps)
  if devices > 1:
    runner = _data_parallel(runner, devices)
  return runner


def probe(runner: ReferenceRunner, steps: int, path: str) -> dict:
  """The warm-up (it compiles): ``steps`` steps from the initialisation; saves
  the parameters reached to ``path`` (``.npz``, leaves in tree order)."""
  warm_up(runner)  # one step, compile seconds recorded
  if steps > 1:
    runner.round(steps - 1)
  leaves = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(runner.carry.params))]
  np.savez(path, *leaves)
  return dict(
      params=path,
      loss_sum=float(runner.carry.loss_sum),
      compile_seconds=runner.compile_seconds,
  )


def loss_curve(plan: Plan, variant: Variant, steps: int, points: int) -> dict:
  """``steps`` steps of the reference on the embedded Shakespeare data (the
  schedule over ``steps``), evaluated ``points`` times on ``config.eval``'s
  validation batches (and at step 0)."""
  config = _config(plan, variant)
  config.total_steps = steps
  config.inner.warmup_steps = max(steps // 20, 1)
  data = data_lib.build(config.data, config.num_workers, config.seed)
  every = max(steps // max(points, 1), 1)
  runner = reference(config, every, data=data)
  model = build_model(config)
  eval_NxBxL1 = data.eval_batches(config.eval.batch_size, config.eval.num_batches)

  @jax.jit
  def evaluate(params, tokens_NxBxL1):
    return jnp.mean(lax.map(functools.partial(model.loss_fn, params), tokens_NxBxL1))

  curve = [dict(step=0, eval_loss=float(evaluate(runner.carry.params, eval_NxBxL1)))]
  done, loss_sum, t0 = 0, 0.0, time.perf_counter()
  while done < steps:
    h = min(every, steps - done)
    runner.round(h)
    done += h
    train_loss = (float(runner.carry.loss_sum) - loss_sum) / h
    loss_sum = float(runner.carry.loss_sum)
    eval_loss = float(evaluate(runner.carry.params, eval_NxBxL1))
    curve.append(dict(step=done, train_loss=train_loss, eval_loss=eval_loss))
  return dict(
      dtype=config.model.dtype,
      steps=steps,
      curve=curve,
      final_eval_loss=curve[-1]["eval_loss"],
      seconds=time.perf_counter() - t0,
  )


def _child(spec: dict) -> None:
  """Serves the parent: ``ready`` after the probe, then ``unit``, ``curve`` and
  ``exit`` commands, one JSON line each way."""
  # Protocol lines go to the original stdout; anything else printed (by any
  # library, from Python or C) goes to stderr, the child's log.
  channel = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)
  send = lambda **msg: channel.write(MARK + json.dumps(msg, default=float) + "\n")

  fields = spec["variant"]
  variant = Variant(
      **dict(
          fields,
          xla_flags=tuple(fields["xla_flags"]),
          env=tuple(tuple(pair) for pair in fields["env"]),
      )
  )
  if variant.attention:
    model_lib.causal_attention = ATTENTION[variant.attention]
  plan, steps = _plan(spec["quick"]), spec["steps"]
  t0 = time.perf_counter()
  runner = reference(_config(plan, variant), steps, variant.devices)
  result = probe(runner, steps, spec["params_path"])
  send(
      ready=True,
      setup_seconds=time.perf_counter() - t0,
      tokens_per_step=runner.tokens_per_step,
      flops_per_token=runner.flops_per_token,
      devices=len(runner.mesh.devices.flat),
      machine=machine(),
      **result,
  )
  for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "unit":
      send(seconds=timed(lambda: runner.unit(cmd["steps"])))
    elif cmd["cmd"] == "curve":
      send(**loss_curve(plan, variant, cmd["steps"], cmd["points"]))
    else:
      break


# ----------------------------------------------------------------------------
# The parent: children driven side by side.


class ChildFailed(Exception):
  """A child exited before answering; ``status`` is unavailable or failed."""

  def __init__(self, status: str, reason: str):
    super().__init__(f"{status}: {reason}")
    self.status, self.reason = status, reason


class Child:
  """A variant's child process; a row for ``timing.bracketed`` (``unit`` runs
  in the child, timed here)."""

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
    self.log_path = os.path.join(tmp, f"{variant.name}.log")
    spec = dict(
        variant=dataclasses.asdict(variant),
        quick=_QUICK.value,
        steps=steps,
        params_path=os.path.join(tmp, f"{variant.name}.npz"),
    )
    with open(self.log_path, "w") as log:
      self.proc = subprocess.Popen(
          [sys.executable, "-m", "benchmarks.xla_options", f"--child={json.dumps(spec)}"],
          cwd=ROOT,
          env=env,
          stdin=subprocess.PIPE,
          stdout=subprocess.PIPE,
          stderr=log,
          text=True,
      )
    self.ready = self.receive()
    self.tokens_per_step = self.ready["tokens_per_step"]
    self.flops_per_token = self.ready["flops_per_token"]
    self.compile_seconds = self.ready["compile_seconds"]

  def receive(self) -> dict:
    for line in self.proc.stdout:
      if line.startswith(MARK):
        return json.loads(line[len(MARK) :])
    self.proc.wait()
    raise ChildFailed(*self.why())

  def command(self, **cmd) -> dict:
    self.proc.stdin.write(json.dumps(cmd) + "\n")
    self.proc.stdin.flush()
    return self.receive()

  def unit(self, steps: int, round_h: int = 0) -> None:
    del round_h  # the child's rounds are at most a unit
    self.command(cmd="unit", steps=steps)

  def log(self) -> str:
    with open(self.log_path) as f:
      return f.read()

  def why(self) -> tuple[str, str]:
    """(status, reason) of a child that exited: XLA's complaint about a flag, or
    the end of its log."""
    log = self.log()
    for line in log.splitlines():
      if "Unknown flag in XLA_FLAGS" in line or "Illegal value for" in line:
        return "unavailable", line.split("] ", 1)[-1].strip()
    return "failed", f"exit code {self.proc.returncode}: {log[-1500:]}"

  def flag_warnings(self) -> list[str]:
    """XLA's warnings about flags in the child's log (deprecated, ignored)."""
    return [
        line.split("] ", 1)[-1].strip()
        for line in self.log().splitlines()
        if "debug_options_flags" in line or "no longer supported" in line
    ]

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.write(json.dumps(dict(cmd="exit")) + "\n")
      self.proc.stdin.close()
      self.proc.wait(timeout=120)


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
      attention=variant.attention or "model.py",
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
    if default.proc.poll() is not None:
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
  runs = {
      c.variant.dtype or "float32": c.command(cmd="curve", steps=steps, points=points)
      for c in (default, bf16)
  }
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
  plan = _plan(_QUICK.value)
  config = _config(plan, DEFAULT)
  return dict(
      mode="quick" if _QUICK.value else "full",
      command=" ".join(["python -m benchmarks.xla_options"] + sys.argv[1:]),
      machine=default.ready["machine"],
      load_avg_start=load_start,
      load_avg_end=list(os.getloadavg()),
      base_xla_flags=default.xla_flags,
      setup=dict(
          size=plan.size,
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
# The report.


def _ratio_cell(row: dict) -> str:
  return f"{row['ratio']:.3f} [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}]"


def _table_row(row: dict) -> str:
  setting = " ".join(f"`{f}`" for f in row["xla_flags"])
  setting += " ".join(f"`{k}={v}`" for k, v in row["env"].items())
  what = f"{row['note']} {setting}".strip()
  if row.get("status") != "ran":
    return (
        f"| {row['name']} | {what} | – | – | – | {row['status']}: {row['reason'][:160]} |"
    )
  status = "ran"
  if row.get("warnings"):
    status += " (XLA: " + "; ".join(w[:120] for w in row["warnings"]) + ")"
  return (
      f"| {row['name']} | {what} | {row['tokens_per_sec']:,.0f} | {_ratio_cell(row)} | "
      f"{row['numerics']['summary']} | {status} |"
  )


def markdown(result: dict) -> str:
  """The report: one table of variants, then the bf16 loss check."""
  s, m = result["setup"], result["machine"]
  lines = [
      "# XLA:CPU options, bf16 and the attention path on the reference step",
      "",
      f"Generated by `{result['command']}` ({result['mode']} mode) in "
      f"{result['wall_seconds']:.0f} s; what is measured: the docstring of "
      "`benchmarks/xla_options.py`.",
      "",
      f"Machine: {m['cpu']}, {m['cores']} cores, jax {m['jax']}; load average "
      f"{result['load_avg_start'][0]:.2f} at the start, {result['load_avg_end'][0]:.2f} "
      "at the end (absolute tokens/s move with it; the ratios are side by side).",
      "",
      f"Step: the `reference` row of `benchmarks/throughput` at size `{s['size']}` "
      f"(d_model {s['model']['d_model']}, num_layers {s['model']['num_layers']}, "
      f"L = {s['seq_len']}, global batch {s['num_workers']} x {s['batch_per_worker']}), "
      f"{s['steps_per_unit']} steps per unit, {s['repeats']} repeat(s) per variant. "
      f"Default: {result['default']['tokens_per_sec'] or float('nan'):,.0f} tokens/s "
      f"(median of its units), XLA_FLAGS `{result['base_xla_flags'] or '(none)'}`.",
      "",
      "Ratio: the variant's tokens/s over the mean of the two default units around "
      "it, median [min, max] over repeats; > 1 is faster. `default_again` is the "
      "noise floor. Numerics: the parameters after each child's warm-up "
      f"({s['steps_per_unit']} steps from the same initialisation on the same "
      "batches) against the default child's.",
      "",
      "| variant | what | tokens/s | ratio to default | numerics | status |",
      "|---|---|---:|---|---|---|",
  ]
  for row in result["variants"]:
    lines.append(_table_row(row))
  lines += [
      "",
      "Candidates (bitwise identical numerics, every ratio above the largest "
      "`default_again` ratio, median >= 1.05): "
      + (", ".join(f"`{n}`" for n in result["candidates"]) or "none")
      + ".",
  ]
  check = result.get("bf16_check")
  if check:
    f32, b16 = check["float32"], check["bfloat16"]
    lines += [
        "",
        f"## bf16 loss check ({check['steps']} steps on Shakespeare, same seed)",
        "",
        "| step | eval loss float32 | eval loss bfloat16 | bf16 - f32 |",
        "|---:|---:|---:|---:|",
    ]
    for a, b in zip(f32["curve"], b16["curve"]):
      lines.append(
          f"| {a['step']} | {a['eval_loss']:.4f} | {b['eval_loss']:.4f} | "
          f"{b['eval_loss'] - a['eval_loss']:+.4f} |"
      )
    lines += [
        "",
        f"Final eval loss: float32 {check['final_eval_loss_float32']:.4f}, bfloat16 "
        f"{check['final_eval_loss_bfloat16']:.4f}, difference {check['difference']:+.4f} "
        f"nats (training took {f32['seconds']:.0f} s and {b16['seconds']:.0f} s).",
    ]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  if _CHILD.value:
    _child(json.loads(_CHILD.value))
    return
  result = run()
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1, default=float)
  if _MD.value:
    os.makedirs(os.path.dirname(_MD.value) or ".", exist_ok=True)
    with open(_MD.value, "w") as f:
      f.write(markdown(result))
  print(f"[xla_options] wrote {_OUT.value} in {result['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
  app.run(main)
