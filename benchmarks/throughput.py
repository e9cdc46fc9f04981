"""What K simulated workers on the replica axis cost against training one model.

Regenerate ``docs/benchmarks.md`` and ``docs/benchmarks.json`` (the raw
numbers); about 6 minutes on a quiet 2-core CPU::

  python -m benchmarks.throughput --out docs/benchmarks.json --md docs/benchmarks.md

CI mode (a one-layer toy model, one repeat, fast XLA compile settings: checks
structure, not speed; ``tests/test_benchmarks.py``)::

  python -m benchmarks.throughput --quick --out /tmp/b.json --md /tmp/b.md

Every speed claim is a ratio measured side by side in one process: each row's
timed unit (``H_ref`` inner steps, in that row's own rounds) is bracketed by a
unit of the reference before and after it, and its ratio
``tokens/s(row) / tokens/s(reference)`` uses the mean of the two brackets.
Repeats alternate the row order; medians are reported. Absolute tokens/s depend
on the load of the (shared) machine and are reported, never asserted.

Rows (a round: its ``H`` inner steps staged in chunks exactly as ``train.py``
stages them, the jitted inner loop, the jitted sync, the one host read of the
round's metrics):

* ``reference``: one model, the inner optimizer (``inner.optimizer``), global
  batch ``K × B``, ``H`` steps in a ``lax.while_loop`` with a traced count over
  the same staged ``K × C × B × (L+1)`` buffer: the inner loop without the
  replica axis.
* ``ddp``, ``diloco``, ``autoloco``, and ``noloco``, ``gasloc`` when
  ``algorithms.make`` builds them: ``K`` workers vmapped on one device, each
  with its own config's ``H`` (``configs/<name>.py``).
* ``naive``: DiLoCo as a Python loop over workers, one jitted AdamW step per
  worker per inner step: what the replica axis replaces.
* ``<row>@N``: the same on ``N`` devices through ``shard_map``. Simulated CPU
  devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before
  JAX starts, so on CPU these rows come from a child process of this script
  (``--child_devices=N``), with a reference measured in that process.

Also: compilations of the round functions over a run whose ``H`` changes
(``_cache_size()``, must be 1) and compile times; scaling with ``K`` at a fixed
per-worker batch and with model width (tokens/s, memory); the achievable matmul
peak measured in the same run and the CPU's nominal peak; hot-path checks
(donation, no device-to-host transfer inside a round, ``while_loop`` vs a
``scan`` over the staged chunk, the cost of staging).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from jax import lax
from jax._src import monitoring
from jax.sharding import NamedSharding

from autoloco_jax import algorithms, inner, outer, replicas
from autoloco_jax import data as data_lib, model as model_lib, state as state_lib
from configs import common

_QUICK = flags.DEFINE_bool("quick", False, "CI mode: a one-layer toy model, one repeat, "
                           "fast XLA compile settings; structure, not speed.")
_OUT = flags.DEFINE_string("out", "docs/benchmarks.json", "Where to write the raw numbers.")
_MD = flags.DEFINE_string("md", "docs/benchmarks.md", "Where to write the report ('' = none).")
_REPEATS = flags.DEFINE_integer("repeats", 0, "Timed units per row of the throughput table "
                                "(0: 3, quick 1).")
_SWEEP_REPEATS = flags.DEFINE_integer("sweep_repeats", 0, "Timed units per point of the "
                                      "sweeps and the scan check (0: 2, quick 1).")
_WORKERS = flags.DEFINE_integer("num_workers", 4, "K simulated workers.")
_H = flags.DEFINE_integer("h", 10, "Inner steps per timed unit and the H of its rounds; a row "
                          "whose config has a smaller H keeps it (0: DiLoCo's configured H; "
                          "quick: 3).")
_SIM_DEVICES = flags.DEFINE_integer("sim_devices", 2, "N devices of the shard_map rows "
                                    "(0 = skip them).")
_SCALE_WORKERS = flags.DEFINE_list("scale_workers", ["1", "2", "4", "8", "16"],
                                   "K of the scaling sweep (quick: 1,4).")
_SCALE_WIDTHS = flags.DEFINE_list("scale_widths", ["64", "128", "256"],
                                  "d_model of the width sweep (quick: 16,32).")
_SCALE_STEPS = flags.DEFINE_integer("scale_steps", 2, "Inner steps per timed unit (one "
                                    "round) in the sweeps.")
_CHILD = flags.DEFINE_integer("child_devices", 0, "Internal: measure the shard_map rows "
                              "on this many devices and write JSON to --child_out.")
_CHILD_OUT = flags.DEFINE_string("child_out", "", "Internal: the child's JSON file.")
_RENDER = flags.DEFINE_bool("render_only", False, "Only rewrite --md from the numbers "
                            "already in --out (no measurement).")

_FAST_COMPILE = ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
_DEVICE_COUNT = "--xla_force_host_platform_device_count"
_ALGORITHMS = ("ddp", "diloco", "autoloco", "noloco", "gasloc")
_SHARDED = ("ddp", "diloco", "autoloco")
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_TARGET_RATIO, _TARGET_NAIVE, _TARGET_MFU = 0.95, 3.0, 0.5

# ----------------------------------------------------------------------------
# Timing and compile time (JAX reports trace, lowering and XLA compile
# durations as monitoring events).

_compile_seconds = [0.0]


def _on_event(name: str, seconds: float, **_) -> None:
  if name in _COMPILE_EVENTS:
    _compile_seconds[0] += seconds


monitoring.register_event_duration_secs_listener(_on_event)


def _timed(fn: Callable[[], Any]) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def _median(xs) -> float:
  xs = [x for x in xs if x is not None]
  return statistics.median(xs) if xs else float("nan")


# ----------------------------------------------------------------------------
# The machine and its peak.


def _cpuinfo() -> dict:
  info = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
  except OSError:
    pass
  return info


def machine() -> dict:
  """CPU model, cores, load, devices, and the nominal fp32 peak with its formula."""
  cpu = _cpuinfo()
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  cpu_flags = set(cpu.get("flags", "").split())
  vendor = cpu.get("vendor_id", "")
  mhz = float(cpu.get("cpu MHz", "0") or 0)
  # FP32 FLOP per cycle per core = FMA pipes x lanes x 2. Intel server cores with
  # AVX-512 have two 512-bit FMA pipes (2 x 16 x 2 = 64); AMD Zen 4 runs AVX-512
  # on two 256-bit pipes (2 x 8 x 2 = 32), as does an AVX2 core.
  if "avx512f" in cpu_flags and vendor == "GenuineIntel":
    per_cycle, unit = 64, "AVX-512, 2 FMA pipes x 16 fp32 lanes x 2 FLOP"
  elif "avx512f" in cpu_flags:
    per_cycle, unit = 32, "AVX-512 on 2 x 256-bit FMA pipes (Zen 4): 2 x 8 lanes x 2 FLOP"
  elif "fma" in cpu_flags:
    per_cycle, unit = 32, "AVX2, 2 FMA pipes x 8 fp32 lanes x 2 FLOP"
  else:
    per_cycle, unit = 0, "unknown vector unit"
  try:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True,
                            timeout=5).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    uptime = ""
  return dict(
      cpu=cpu.get("model name", platform.processor()), vendor=vendor, cores=cores,
      mhz=mhz, flop_per_cycle_per_core=per_cycle, vector_unit=unit,
      nominal_peak_flops=cores * mhz * 1e6 * per_cycle,
      nominal_formula=(f"{cores} cores x {mhz / 1e3:.2f} GHz (/proc/cpuinfo clock) x "
                       f"{per_cycle} fp32 FLOP/cycle ({unit})"),
      load_avg=list(os.getloadavg()), uptime=uptime,
      backend=jax.default_backend(), device_count=jax.device_count(),
      device_kind=jax.devices()[0].device_kind, jax=jax.__version__,
      python=platform.python_version(), xla_flags=os.environ.get("XLA_FLAGS", ""))


def matmul_rate(n: int, m: int | None = None, k: int | None = None, repeats: int = 3,
                batch: int = 0) -> float:
  """Best FLOP/s of a jitted float32 ``[n, k] @ [k, m]`` matmul (square by
  default); with ``batch``, ``batch`` independent ones as one batched matmul
  (what ``vmap`` over workers makes of a layer)."""
  m, k = m or n, k or n
  lead = (batch,) if batch else ()
  a = jnp.ones(lead + (n, k), jnp.float32)
  b = jnp.full(lead + (k, m), 1e-3, jnp.float32)
  f = jax.jit(jnp.matmul)
  f(a, b).block_until_ready()
  best = min(_timed(lambda: f(a, b).block_until_ready()) for _ in range(repeats))
  return 2.0 * max(batch, 1) * n * m * k / best


# ----------------------------------------------------------------------------
# What is run: configs, model, synthetic data, staging.


@dataclasses.dataclass
class Plan:
  """Sizes of one benchmark mode."""
  size: str            # configs/common.py size preset
  model: dict          # overrides of config.model (and data.seq_len)
  num_workers: int     # K
  h: int               # inner steps per timed unit, the longest round (0: config's H)
  repeats: int         # timed units per row
  sweep_repeats: int   # timed units per sweep point
  scale_workers: list  # K of the scaling sweep
  scale_widths: list   # d_model of the width sweep
  scale_steps: int     # inner steps per round and per unit in the sweeps
  matmul_n: tuple      # sides of the square matmuls that measure the peak
  head_dim: int        # head size kept when the width sweep changes d_model


def make_plan() -> Plan:
  if _QUICK.value:
    return Plan("tiny", dict(d_model=32, num_layers=1, num_heads=2, mlp_dim=128, seq_len=32),
                _WORKERS.value, 3, _REPEATS.value or 1, _SWEEP_REPEATS.value or 1, [1, 4],
                [16, 32], 2, (256,), 16)
  return Plan("cpu", {}, _WORKERS.value, _H.value, _REPEATS.value or 3,
              _SWEEP_REPEATS.value or 2, [int(k) for k in _SCALE_WORKERS.value],
              [int(d) for d in _SCALE_WIDTHS.value], _SCALE_STEPS.value, (1024, 2048), 32)


def algorithm_config(plan: Plan, name: str, num_workers: int = 0, num_devices: int = 1,
                     d_model: int = 0, h: int = 0) -> Any:
  """``configs/<name>.py`` at the plan's size (the common base if there is no
  such file), with K, devices, model overrides and optionally ``H`` set."""
  try:
    config = importlib.import_module(f"configs.{name}").get_config(plan.size)
  except ModuleNotFoundError:
    config = common.base(plan.size)
  config.algorithm = name
  config.num_workers = num_workers or plan.num_workers
  config.num_devices = num_devices
  model = dict(plan.model)
  if d_model:
    model.update(d_model=d_model, num_heads=max(d_model // plan.head_dim, 1),
                 mlp_dim=4 * d_model)
  for key, value in model.items():
    if key == "seq_len":
      config.data.seq_len = value
    config.model[key] = value
  if h:
    config.interval.h = h
    config.interval.h_max = 0
  return config


class Model(NamedTuple):
  loss_fn: Callable
  params: Any
  num_params: int
  flops_per_token: float


_models: dict = {}


def build_model(config: Any) -> Model:
  """The model ``train.setup`` builds (byte vocabulary), cached by shape."""
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = data_lib.VOCAB_SIZE
    model_cfg.seq_len = config.data.seq_len
  key = (json.dumps(model_cfg.to_dict(), sort_keys=True), config.seed)
  if key not in _models:
    init, apply = model_lib.make(model_cfg)
    params = init(jax.random.key(config.seed))
    num_params = model_lib.param_count(params)
    _models[key] = Model(functools.partial(model_lib.loss_fn, apply), params, num_params,
                         model_lib.flops_per_token(model_cfg, num_params))
  return _models[key]


def synthetic_data(config: Any) -> data_lib.WorkerData:
  """Random bytes in the trainer's ``WorkerData``: the reading and staging code
  of a real run without building a dataset (speed does not depend on the text)."""
  K, L1 = config.num_workers, config.data.seq_len + 1
  per_worker = 4 * config.data.batch_size * 32
  rng = np.random.default_rng(config.seed)
  tokens_NxL1 = rng.integers(0, data_lib.VOCAB_SIZE, (K * per_worker, L1), np.uint8)
  shards = list(np.arange(K * per_worker).reshape(K, per_worker))
  return data_lib.WorkerData(tokens_NxL1, shards, tokens_NxL1[:8], config.seed)


def stage_chunk(data, positions_K, n: int, chunk: int, batch: int, mesh, dtype=np.int32):
  """``train.py``'s staging: the next ``n`` batches in a fresh zero-padded
  ``K × C × B × (L+1)`` buffer, put on the mesh."""
  batch_KxnxBxL1, positions_K = data.train_batches(positions_K, n, batch)
  tokens_KxCxBxL1 = np.zeros((batch_KxnxBxL1.shape[0], chunk) + batch_KxnxBxL1.shape[2:],
                             dtype)
  tokens_KxCxBxL1[:, :n] = batch_KxnxBxL1
  return replicas.put_workers(tokens_KxCxBxL1, mesh), positions_K


# ----------------------------------------------------------------------------
# Runners: ``unit(steps)`` runs ``steps`` inner steps in the row's own rounds
# and blocks until the last round's metrics are on the host.


class Runner:
  name: str
  h: int                 # inner steps per round
  tokens_per_step: int   # K · B · L
  flops_per_token: float
  compile_seconds: float = float("nan")
  donation_warnings: tuple = ()

  def __init__(self, name: str, config: Any, model: Model, data):
    self.name, self.config, self.data = name, config, data
    self.batch = config.data.batch_size
    self.positions = data.init_positions()
    self.tokens_per_step = config.num_workers * self.batch * config.data.seq_len
    self.flops_per_token = model.flops_per_token
    self.h = int(config.interval.h)
    self.hs: list[int] = []   # the H of every round run

  def round(self, h: int) -> None:
    raise NotImplementedError

  def compiles(self) -> dict:
    raise NotImplementedError

  def unit(self, steps: int, round_h: int = 0) -> None:
    """``steps`` inner steps in rounds of ``round_h`` (default: the row's H)."""
    done = 0
    while done < steps:
      h = min(round_h or self.h, steps - done)
      self.round(h)
      done += h


class AlgoRunner(Runner):
  """An algorithm of ``algorithms.make``, driven like ``train.py``'s loop."""

  def __init__(self, name: str, config: Any, model: Model, mesh, data, algo=None):
    super().__init__(name, config, model, data)
    self.mesh = mesh
    self.algo = algo or algorithms.make(config, model.loss_fn, mesh)
    self.state = state_lib.place(self.algo.init_state(model.params), mesh)
    self.chunk = min(config.chunk_steps or 64, self.algo.h_max)
    self.donated = None

  def round(self, h: int) -> None:
    done = 0
    # A device-to-host read inside a round would stall the pipeline: forbid it.
    with jax.transfer_guard_device_to_host("disallow"):
      while done < h:
        n = min(self.chunk, h - done)
        tokens, self.positions = stage_chunk(self.data, self.positions, n, self.chunk,
                                             self.batch, self.mesh)
        old = self.state
        self.state = self.algo.inner(self.state, tokens, np.int32(n))
        if self.donated is None:
          self.donated = all(x.is_deleted() for x in jax.tree.leaves(old))
        done += n
    self.state, metrics = self.algo.sync(self.state)
    jax.device_get(metrics)   # the round's one host read, as in train.py
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.algo.inner._cache_size(), sync=self.algo.sync._cache_size())

  def memory(self) -> dict:
    """XLA's buffer sizes of the compiled round functions (a cache hit)."""
    out = {}
    K, L1 = self.config.num_workers, self.config.data.seq_len + 1
    tokens = replicas.put_workers(np.zeros((K, self.chunk, self.batch, L1), np.int32),
                                  self.mesh)
    for name, fn, args in (("inner", self.algo.inner, (self.state, tokens, np.int32(1))),
                           ("sync", self.algo.sync, (self.state,))):
      try:
        m = fn.lower(*args).compile().memory_analysis()
        out[name] = dict(argument=m.argument_size_in_bytes, output=m.output_size_in_bytes,
                         alias=m.alias_size_in_bytes, temp=m.temp_size_in_bytes,
                         peak_estimate=(m.argument_size_in_bytes + m.output_size_in_bytes
                                        - m.alias_size_in_bytes + m.temp_size_in_bytes))
      except Exception as e:  # noqa: BLE001 -- optional on some backends
        out[name] = dict(error=f"{type(e).__name__}: {e}")
    out["state_bytes"] = int(sum(x.nbytes for x in jax.tree.leaves(self.state)))
    return out


class RefCarry(NamedTuple):
  params: Any
  opt: Any
  loss_sum: jax.Array


class ReferenceRunner(Runner):
  """One model, the inner optimizer, global batch ``K × B``: the inner loop's
  structure (``while_loop`` with a traced count over the same staged buffer,
  the loss summed on device, one host read per round) without the replica axis."""

  def __init__(self, config: Any, model: Model, data):
    super().__init__("reference", config, model, data)
    self.mesh = replicas.make_mesh(config.num_workers, 1)
    self.chunk = min(config.chunk_steps or 64, self.h)
    tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
    loss_fn = model.loss_fn

    @functools.partial(jax.jit, donate_argnums=0)
    def run(carry: RefCarry, tokens_KxCxBxL1, num_steps):
      def body(c):
        i, params, opt, loss_sum = c
        tokens_KxBxL1 = lax.dynamic_index_in_dim(tokens_KxCxBxL1, i, 1, keepdims=False)
        tokens_NxL1 = tokens_KxBxL1.reshape(-1, tokens_KxBxL1.shape[-1])
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens_NxL1)
        updates, opt = tx.update(grads, opt, params)
        return i + 1, optax.apply_updates(params, updates), opt, loss_sum + loss

      _, params, opt, loss_sum = lax.while_loop(
          lambda c: c[0] < num_steps, body, (jnp.zeros((), jnp.int32),) + tuple(carry))
      return RefCarry(params, opt, loss_sum)

    self.run = run
    carry = RefCarry(model.params, tx.init(model.params), jnp.zeros((), jnp.float32))
    self.carry = jax.device_put(carry, NamedSharding(self.mesh, replicas.REPLICATED),
                                may_alias=False)

  def round(self, h: int) -> None:
    done = 0
    with jax.transfer_guard_device_to_host("disallow"):
      while done < h:
        n = min(self.chunk, h - done)
        tokens, self.positions = stage_chunk(self.data, self.positions, n, self.chunk,
                                             self.batch, self.mesh)
        self.carry = self.run(self.carry, tokens, np.int32(n))
        done += n
    jax.device_get(self.carry.loss_sum)
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.run._cache_size())


class NaiveRunner(Runner):
  """What the replica axis replaces: DiLoCo as a Python loop over workers, one
  jitted (donated) AdamW step per worker per inner step, then a jitted mean of
  the K parameter trees and the outer Nesterov step."""

  def __init__(self, config: Any, model: Model, data):
    super().__init__("naive", config, model, data)
    self.K = config.num_workers
    self.device = jax.devices()[0]
    tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
    outer_tx = outer.diloco(config.outer.lr, config.outer.momentum)
    loss_fn = model.loss_fn

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def step(params, opt, loss_sum, tokens_BxL1):
      loss, grads = jax.value_and_grad(loss_fn)(params, tokens_BxL1)
      updates, opt = tx.update(grads, opt, params)
      return optax.apply_updates(params, updates), opt, loss_sum + loss

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def sync(anchor, outer_opt, params_list):
      mean = jax.tree.map(lambda *xs: sum(xs) / len(xs), *params_list)
      delta = jax.tree.map(jnp.subtract, anchor, mean)
      updates, outer_opt = outer_tx.update(delta, outer_opt, anchor)
      return optax.apply_updates(anchor, updates), outer_opt

    self.step, self.sync = step, sync
    self.anchor = self._copy(model.params)
    self.outer_opt = self._copy(outer_tx.init(model.params))
    self.params = [self._copy(model.params) for _ in range(self.K)]
    self.opt = [self._copy(tx.init(model.params)) for _ in range(self.K)]
    self.loss = [self._copy(jnp.zeros((), jnp.float32)) for _ in range(self.K)]

  def _copy(self, tree):
    return jax.device_put(tree, self.device, may_alias=False)

  def round(self, h: int) -> None:
    batch_KxHxBxL1, self.positions = self.data.train_batches(self.positions, h, self.batch)
    for i in range(h):
      for k in range(self.K):
        self.params[k], self.opt[k], self.loss[k] = self.step(
            self.params[k], self.opt[k], self.loss[k], batch_KxHxBxL1[k, i])
    self.anchor, self.outer_opt = self.sync(self.anchor, self.outer_opt, self.params)
    self.params = [self._copy(self.anchor) for _ in range(self.K)]
    jax.device_get(self.loss)
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.step._cache_size(), sync=self.sync._cache_size())


def scan_inner_loop(loss_fn: Callable, tx: optax.GradientTransformation,
                    lr_schedule: optax.Schedule) -> Callable:
  """``inner.make_inner_loop`` (homogeneous, no DDP) as a ``lax.scan`` over the
  ``C`` staged batches with steps ``i >= num_steps`` skipped by ``lax.cond``:
  the alternative loop structure the hot-path check compares against."""
  grad_fn = jax.vmap(jax.value_and_grad(loss_fn))
  update_fn = jax.vmap(tx.update)

  def run(params_K, opt_K, acc, tokens_KxCxBxL1, num_steps, step0):
    def step(carry, i):
      params_K, opt_K, acc = carry
      tokens_KxBxL1 = lax.dynamic_index_in_dim(tokens_KxCxBxL1, i, 1, keepdims=False)
      loss_K, grads_K = grad_fn(params_K, tokens_KxBxL1)
      grad_norm_K = jax.vmap(optax.tree.norm)(grads_K)
      updates_K, opt_K = update_fn(grads_K, opt_K, params_K)
      acc = inner.RoundAcc(
          steps=acc.steps + 1, lr_sum=acc.lr_sum + lr_schedule(step0 + i),
          loss_sum_K=acc.loss_sum_K + loss_K,
          loss_first_K=jnp.where(acc.steps == 0, loss_K, acc.loss_first_K),
          loss_last_K=loss_K, grad_norm_sum_K=acc.grad_norm_sum_K + grad_norm_K)
      return optax.apply_updates(params_K, updates_K), opt_K, acc

    def body(carry, i):
      return lax.cond(i < num_steps, step, lambda c, _: c, carry, i), None

    steps = jnp.arange(tokens_KxCxBxL1.shape[1], dtype=jnp.int32)
    (params_K, opt_K, acc), _ = lax.scan(body, (params_K, opt_K, acc), steps)
    return params_K, opt_K, acc

  return run


# ----------------------------------------------------------------------------
# Measurements.


def warm_up(runner: Runner) -> Runner:
  """One round of H=1 (it compiles); records compile seconds and warnings."""
  before = _compile_seconds[0]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    runner.round(1)
  runner.compile_seconds = _compile_seconds[0] - before
  runner.donation_warnings = tuple(str(w.message)[:200] for w in caught
                                   if "donat" in str(w.message).lower())
  return runner


def bracketed(reference: Runner, rows: list[Runner], steps: int, repeats: int,
              peak: Callable[[], float] | None = None, round_h: int = 0) -> dict:
  """Times ``rows`` side by side with ``reference``: ref, row 1, ref, row 2, ...,
  ref, every unit ``steps`` inner steps (in rounds of ``round_h``, default each
  row's own H). A row's ratio uses the mean of its two
  neighbouring reference units; odd repeats reverse the row order; ``peak`` (a
  matmul rate) is measured once per repeat and paired with that repeat's units.
  Returns ``{name: {seconds, ratio, peak}}`` (lists over units)."""
  out = {r.name: dict(seconds=[], ratio=[], peak=[]) for r in [reference] + rows}
  for rep in range(repeats):
    p = peak() if peak else float("nan")
    order = rows if rep % 2 == 0 else rows[::-1]
    t_before = _timed(lambda: reference.unit(steps, round_h))
    out[reference.name]["seconds"].append(t_before)
    out[reference.name]["peak"].append(p)
    for row in order:
      t = _timed(lambda: row.unit(steps, round_h))
      t_after = _timed(lambda: reference.unit(steps, round_h))
      out[reference.name]["seconds"].append(t_after)
      out[reference.name]["peak"].append(p)
      ref_rate = reference.tokens_per_step / ((t_before + t_after) / 2)
      out[row.name]["seconds"].append(t)
      out[row.name]["ratio"].append((row.tokens_per_step / t) / ref_rate)
      out[row.name]["peak"].append(p)
      t_before = t_after
  return out


def summarize(runner: Runner, timing: dict, steps: int, round_h: int = 0) -> dict:
  """One row from its units: medians of tokens/s, ratio, model FLOP/s, MFU."""
  rates = [runner.tokens_per_step * steps / s for s in timing["seconds"]]
  flops = [r * runner.flops_per_token for r in rates]
  row = dict(name=runner.name, h=round_h or runner.h, steps_per_unit=steps,
             seconds=timing["seconds"],
             tokens_per_sec=_median(rates), model_flops_per_sec=_median(flops),
             compile_seconds=runner.compile_seconds,
             donation_warnings=list(runner.donation_warnings))
  if timing["ratio"]:
    row.update(ratio=_median(timing["ratio"]), ratios=timing["ratio"],
               ratio_min=min(timing["ratio"]), ratio_max=max(timing["ratio"]))
  if all(math.isfinite(p) for p in timing["peak"]):
    # MFU against the matmul peak measured in the same repeat, so both see one load.
    row["mfu_vs_measured_peak"] = _median(f / p for f, p in zip(flops, timing["peak"]))
  if isinstance(runner, AlgoRunner):
    row["donated"] = runner.donated
  return row


def compile_check(runner: Runner, hs: tuple[int, ...]) -> dict:
  """Rounds of changing ``H`` on a warm runner, then its compile counts."""
  for h in hs:
    runner.round(h)
  counts = runner.compiles()
  return dict(hs=list(runner.hs), distinct_h=len(set(runner.hs)), **counts,
              once=all(v == 1 for v in counts.values()))


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
    return dict(method="device memory_stats peak_bytes_in_use",
                peak_bytes=jax.devices()[0].memory_stats()["peak_bytes_in_use"])
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    before = _proc_status("VmRSS")
    runner.round(h)
    peak = _proc_status("VmHWM")
    return dict(method="process RSS: VmHWM reset by /proc/self/clear_refs",
                peak_bytes=peak, growth_bytes=peak - before)
  except OSError:
    import resource
    runner.round(h)
    return dict(method="process RSS: ru_maxrss high-water mark",
                peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def _shorten(runner: Runner, h: int) -> Runner:
  runner.h = min(runner.h, h)
  return runner


def try_row(name: str, build: Callable[[], Runner]) -> tuple[Runner | None, str]:
  """Builds and warms up a row, or says why it cannot run."""
  try:
    return warm_up(build()), ""
  except Exception as e:  # noqa: BLE001 -- a row that does not build is reported
    message = str(e).strip().splitlines()[0][:240] if str(e).strip() else ""
    return None, f"{type(e).__name__}: {message}"


def measure_rows(plan: Plan, devices: int, with_naive: bool) -> tuple[dict, dict]:
  """The reference and the algorithm rows, K workers on ``devices`` devices.

  Returns the result and the live runners (reused by the hot-path checks)."""
  base = algorithm_config(plan, "diloco", num_devices=devices)
  # A unit: `steps` inner steps in each row's own rounds, none longer than `steps`;
  # the staged chunk keeps each config's size, as train.py sizes it.
  steps = plan.h or int(base.interval.h)
  model = build_model(base)
  data = synthetic_data(base)
  mesh = replicas.make_mesh(plan.num_workers, devices)
  reference = warm_up(_shorten(ReferenceRunner(base, model, data), steps))
  rows, skipped = [], {}
  suffix = "" if devices == 1 else f"@{devices}"
  for name in (_ALGORITHMS if devices == 1 else _SHARDED):
    config = algorithm_config(plan, name, num_devices=devices)
    runner, why = try_row(name + suffix, lambda: _shorten(AlgoRunner(
        name + suffix, config, build_model(config), mesh, data), steps))
    if runner is None:
      skipped[name + suffix] = why
    else:
      rows.append(runner)
  if with_naive:
    runner, why = try_row("naive", lambda: _shorten(NaiveRunner(base, model, data), steps))
    if runner is None:
      skipped["naive"] = why
    else:
      rows.append(runner)
  timing = bracketed(reference, rows, steps, plan.repeats,
                     peak=lambda: max(matmul_rate(n) for n in plan.matmul_n))
  peaks = [p for i, p in enumerate(timing["reference"]["peak"])
           if i % (len(rows) + 1) == 0]
  result = dict(
      devices=devices, steps_per_unit=steps, config_h=int(base.interval.h),
      repeats=plan.repeats,
      num_workers=plan.num_workers, batch_per_worker=base.data.batch_size,
      seq_len=base.data.seq_len, model=base.model.to_dict(), num_params=model.num_params,
      flops_per_token=model.flops_per_token, matmul_n=plan.matmul_n, matmul_peaks=peaks,
      matmul_peak_max=max(peaks), matmul_peak_median=_median(peaks),
      rows=[summarize(r, timing[r.name], steps) for r in [reference] + rows],
      skipped=skipped, compiles={})
  check_hs = tuple(h for h in (2, 1, 3) if h <= steps)   # H changes every round
  for runner in [reference] + rows:
    result["compiles"][runner.name] = compile_check(runner, check_hs)
    result["compiles"][runner.name]["compile_seconds"] = runner.compile_seconds
  live = {r.name: r for r in [reference] + rows}
  if devices == 1 and "diloco" in live:
    _shared[_sweep_key(base)] = (reference, live["diloco"])
  return result, live


#: (reference, diloco) runners already compiled for a config, reused by the sweeps.
_shared: dict = {}


def _sweep_key(config: Any) -> tuple:
  return (config.num_workers, json.dumps(config.model.to_dict(), sort_keys=True),
          config.data.batch_size, int(config.interval.h))


def staging_cost(runner: AlgoRunner, repeats: int = 5) -> dict:
  """Host seconds to read, pad and put one round's tokens (no compute): the
  trainer's int32 buffer and a uint8 one (cast on device instead)."""
  def stage(dtype):
    positions, done = runner.positions, 0
    while done < runner.h:
      n = min(runner.chunk, runner.h - done)
      tokens, positions = stage_chunk(runner.data, positions, n, runner.chunk,
                                      runner.batch, runner.mesh, dtype)
      jax.block_until_ready(tokens)
      done += n

  seconds = {str(np.dtype(d)): _median(_timed(lambda: stage(d)) for _ in range(repeats))
             for d in (np.int32, np.uint8)}
  K, L1 = runner.config.num_workers, runner.config.data.seq_len + 1
  return dict(h=runner.h, chunk=runner.chunk, seconds=seconds,
              buffer_bytes_int32=K * runner.chunk * runner.batch * L1 * 4)


def hot_path(plan: Plan, runners: dict, main: dict) -> dict:
  """Donation, transfers, staging, and ``while_loop`` vs ``scan``, paired."""
  library = runners["diloco"]
  sched = inner.schedule(library.config.inner, library.config.total_steps)
  model = build_model(library.config)
  scan_inner = algorithms.jit_inner(
      scan_inner_loop(model.loss_fn, inner.optimizer(library.config.inner, sched), sched),
      library.mesh)
  scan = warm_up(AlgoRunner("diloco, scan of chunk", library.config, model, library.mesh,
                            library.data, algo=library.algo._replace(inner=scan_inner)))
  timing = bracketed(library, [scan], library.h, plan.sweep_repeats)
  round_seconds = _median(next(r for r in main["rows"] if r["name"] == "diloco")["seconds"])
  return dict(
      donated={r["name"]: r["donated"] for r in main["rows"] if "donated" in r},
      donation_warnings={r["name"]: r["donation_warnings"] for r in main["rows"]
                         if r["donation_warnings"]},
      device_to_host_inside_round=("none: every inner call of every row ran under "
                                   "jax.transfer_guard_device_to_host('disallow')"),
      scan_vs_while=dict(h=library.h, chunk=library.chunk,
                         ratio=_median(timing[scan.name]["ratio"]),
                         ratios=timing[scan.name]["ratio"]),
      staging=dict(staging_cost(library), diloco_round_seconds=round_seconds),
      autoloco_staging=staging_cost(runners["autoloco"]) if "autoloco" in runners else None)


def scaling(plan: Plan) -> dict:
  """DiLoCo against the reference at the same global batch, on one device, as K
  grows at a fixed per-worker batch and as d_model grows at fixed K.

  Rounds of ``scale_steps`` inner steps; the configs keep DiLoCo's H for the
  staged chunk, so the point equal to the throughput table's config reuses its
  compiled runners."""
  h = plan.scale_steps

  def point(config) -> dict:
    model = build_model(config)
    if _sweep_key(config) in _shared:
      reference, algo = _shared[_sweep_key(config)]
    else:
      data = synthetic_data(config)
      mesh = replicas.make_mesh(config.num_workers, 1)
      algo = warm_up(AlgoRunner("diloco", config, model, mesh, data))
      reference = warm_up(ReferenceRunner(config, model, data))
    timing = bracketed(reference, [algo], h, plan.sweep_repeats, round_h=h)
    row = summarize(algo, timing["diloco"], h, round_h=h)
    row.update(reference_tokens_per_sec=summarize(reference, timing["reference"],
                                                  h)["tokens_per_sec"],
               num_params=model.num_params, flops_per_token=model.flops_per_token,
               global_batch=config.num_workers * config.data.batch_size,
               xla=algo.memory(), memory=round_memory(algo, h))
    return row

  by_k = [dict(num_workers=k, **point(algorithm_config(plan, "diloco", num_workers=k)))
          for k in plan.scale_workers]
  by_width = [dict(d_model=d, **point(algorithm_config(plan, "diloco", d_model=d)))
              for d in plan.scale_widths]
  return dict(steps=h, by_workers=by_k, by_width=by_width)


def shape_matmul(plan: Plan) -> dict:
  """The matmul rate at the model's MLP shape: ``[K·B·L, d] @ [d, F]`` (the
  reference), K of ``[B·L, d] @ [d, F]`` batched (the replica axis), one
  ``[B·L, d] @ [d, F]`` (a naive worker step); and the square peak. Interleaved,
  best of 5 each."""
  c = algorithm_config(plan, "diloco")
  n, d, f = c.data.batch_size * c.data.seq_len, c.model.d_model, c.model.mlp_dim
  K = plan.num_workers
  rates = dict(global_flops_per_sec=[], batched_flops_per_sec=[], worker_flops_per_sec=[],
               square_flops_per_sec=[])
  for _ in range(3):
    rates["global_flops_per_sec"].append(matmul_rate(K * n, f, d, 5))
    rates["batched_flops_per_sec"].append(matmul_rate(n, f, d, 5, batch=K))
    rates["worker_flops_per_sec"].append(matmul_rate(n, f, d, 5))
    rates["square_flops_per_sec"].append(matmul_rate(plan.matmul_n[-1]))
  return dict(global_shape=[K * n, d, f], batched_shape=[K, n, d, f], worker_shape=[n, d, f],
              square_n=plan.matmul_n[-1], **{k: max(v) for k, v in rates.items()})


# ----------------------------------------------------------------------------
# The child process (shard_map rows on simulated devices) and the main run.


def _child_env(devices: int) -> dict:
  env = dict(os.environ)
  kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_COUNT)]
  env["XLA_FLAGS"] = " ".join(kept + [f"{_DEVICE_COUNT}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  return env


def start_child(devices: int) -> Callable[[], dict]:
  """Starts the shard_map rows in a fresh process with ``devices`` simulated CPU
  devices; returns a function that waits for it and returns its result."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  tmp = tempfile.mkdtemp(prefix="throughput_child_")
  out, log = os.path.join(tmp, "child.json"), os.path.join(tmp, "child.log")
  args = [sys.executable, "-m", "benchmarks.throughput", f"--child_devices={devices}",
          f"--child_out={out}", f"--num_workers={_WORKERS.value}",
          f"--repeats={_REPEATS.value}", f"--h={_H.value}",
          "--quick" if _QUICK.value else "--noquick"]
  log_file = open(log, "w")
  proc = subprocess.Popen(args, cwd=root, env=_child_env(devices), stdout=log_file,
                          stderr=subprocess.STDOUT)

  def finish() -> dict:
    code = proc.wait()
    log_file.close()
    try:
      if code != 0 or not os.path.exists(out):
        with open(log) as f:
          return dict(error=f"child exited with {code}: {f.read()[-3000:]}")
      with open(out) as f:
        return json.load(f)
    finally:
      for path in (out, log):
        if os.path.exists(path):
          os.remove(path)
      os.rmdir(tmp)

  return finish


def main(argv):
  del argv
  if _RENDER.value:
    with open(_OUT.value) as f:
      result = json.load(f)
    result["targets"] = targets(result)
    with open(_MD.value, "w") as f:
      f.write(markdown(result))
    return
  if _QUICK.value and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    # Structure, not speed: cheaper XLA compiles (set before the backend starts).
    os.environ["XLA_FLAGS"] = " ".join(os.environ.get("XLA_FLAGS", "").split() + _FAST_COMPILE)
  plan = make_plan()
  t0 = time.perf_counter()
  if _CHILD.value:
    if jax.device_count() < _CHILD.value:
      raise SystemExit(f"--child_devices={_CHILD.value} but JAX sees {jax.device_count()}")
    result, _ = measure_rows(plan, _CHILD.value, with_naive=False)
    result.update(machine=machine(), wall_seconds=time.perf_counter() - t0)
    with open(_CHILD_OUT.value, "w") as f:
      json.dump(result, f, default=float)
    return

  result = dict(mode="quick" if _QUICK.value else "full", plan=dataclasses.asdict(plan),
                command=" ".join(["python -m benchmarks.throughput"] + sys.argv[1:]),
                machine=machine())
  print(f"[throughput] {result['machine']['cpu']}, {result['machine']['cores']} cores, "
        f"{result['machine']['uptime']}", flush=True)
  child = None
  if _SIM_DEVICES.value > 1 and jax.default_backend() == "cpu" and _QUICK.value:
    # Structure only: let the child compile while this process does.
    child = start_child(_SIM_DEVICES.value)
  result["main"], runners = measure_rows(plan, 1, with_naive=True)
  print(f"[throughput] main rows done ({time.perf_counter() - t0:.0f} s)", flush=True)
  if "diloco" in runners:
    result["hot_path"] = hot_path(plan, runners, result["main"])
  del runners
  print(f"[throughput] hot path done ({time.perf_counter() - t0:.0f} s)", flush=True)
  result["shape_matmul"] = shape_matmul(plan)
  result["scaling"] = scaling(plan)
  print(f"[throughput] scaling done ({time.perf_counter() - t0:.0f} s)", flush=True)
  if _SIM_DEVICES.value > 1:
    if jax.default_backend() == "cpu":
      # Timed alone: two processes on the same cores would slow each other.
      child = child or start_child(_SIM_DEVICES.value)
      result["sharded"] = dict(child(), process="child process, simulated CPU devices")
      print(f"[throughput] child done ({time.perf_counter() - t0:.0f} s)", flush=True)
    elif jax.device_count() > 1:
      result["sharded"], _ = measure_rows(plan, jax.device_count(), with_naive=False)
      result["sharded"]["process"] = "same process"
  result.update(load_avg_end=list(os.getloadavg()), wall_seconds=time.perf_counter() - t0)
  result["targets"] = targets(result)
  os.makedirs(os.path.dirname(_OUT.value) or ".", exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1, default=float)
  if _MD.value:
    os.makedirs(os.path.dirname(_MD.value) or ".", exist_ok=True)
    with open(_MD.value, "w") as f:
      f.write(markdown(result))
  print(f"[throughput] wrote {_OUT.value} in {result['wall_seconds']:.0f} s", flush=True)


def targets(result: dict) -> dict:
  """The issue's targets, evaluated (reported, never asserted)."""
  rows = {r["name"]: r for r in result["main"]["rows"]}
  out = {}
  naive = rows.get("naive")
  for name in ("diloco", "autoloco"):
    if name not in rows:
      continue
    r = rows[name]
    out[f"{name} / reference tokens/s"] = dict(value=r["ratio"], target=_TARGET_RATIO,
                                               met=r["ratio"] >= _TARGET_RATIO)
    if naive:
      value = _median(a / b for a, b in zip(r["ratios"], naive["ratios"]))
      out[f"{name} / naive loop tokens/s"] = dict(value=value, target=_TARGET_NAIVE,
                                                  met=value >= _TARGET_NAIVE)
  compiles = dict(result["main"]["compiles"])
  compiles.update(result.get("sharded", {}).get("compiles", {}))
  out["compilations of each round function"] = dict(
      value=max(v for c in compiles.values() for k, v in c.items() if k in ("inner", "sync")),
      target=1, met=all(c["once"] for c in compiles.values()))
  for name in ("reference", "diloco", "autoloco"):
    if name in rows and "mfu_vs_measured_peak" in rows[name]:
      v = rows[name]["mfu_vs_measured_peak"]
      out[f"{name} MFU / measured matmul peak"] = dict(value=v, target=_TARGET_MFU,
                                                       met=v >= _TARGET_MFU)
  return out


# ----------------------------------------------------------------------------
# The report.

_WHAT = {
    "reference": "one model, AdamW, global batch K x B",
    "ddp": "DDP, gradients averaged every step",
    "diloco": "DiLoCo, outer Nesterov step per round",
    "autoloco": "AutoLoCo (corrected outer step, controller)",
    "noloco": "NoLoCo, pairwise gossip per round",
    "gasloc": "GASLoC, accelerated gossip per round",
    "naive": "Python loop over workers, 1 jitted step each",
}


def _g(x: float) -> str:
  return f"{x / 1e9:.1f}"


def _pct(x: float | None) -> str:
  return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"


def _mb(x: float | None) -> str:
  return "n/a" if x is None else f"{x / 2**20:.0f}"


def _row_table(block: dict, child: bool, nominal: float) -> list[str]:
  lines = []
  K, D = block["num_workers"], block["devices"]
  for r in block["rows"]:
    base = r["name"].split("@")[0]
    if base in ("reference", "naive"):
      layout = "1 device"
    else:
      layout = f"K={K}, vmap, 1 device" if D == 1 else f"K={K}, shard_map, {D} devices"
    process = f"child ({D} simulated devices)" if child else "main"
    c = block["compiles"].get(r["name"], {})
    ratio = ("1 (by definition)" if r["name"] == "reference" else
             f"**{r['ratio']:.3f}** [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]")
    compiles = "/".join(str(c[k]) for k in ("inner", "sync") if k in c)
    mfu_nominal = r["model_flops_per_sec"] / nominal if nominal else float("nan")
    lines.append(
        f"| `{r['name']}` | {_WHAT.get(base, base)} | {layout} | {process} | {r['h']} | "
        f"{r['tokens_per_sec']:.0f} | {ratio} | {_g(r['model_flops_per_sec'])} | "
        f"{_pct(r.get('mfu_vs_measured_peak'))} | {_pct(mfu_nominal)} | {compiles} | "
        f"{r['compile_seconds']:.1f} |")
  for name, why in block.get("skipped", {}).items():
    lines.append(f"| `{name}` | skipped: {why} | | {'child' if child else 'main'} "
                 "| | | | | | | | |")
  return lines


def markdown(result: dict) -> str:
  """``docs/benchmarks.md`` from the result dict."""
  m, main, plan = result["machine"], result["main"], result["plan"]
  nominal = m["nominal_peak_flops"]
  rows = {r["name"]: r for r in main["rows"]}
  model = main["model"]
  L = [
      "# Benchmarks: what the replica axis costs",
      "",
      "Generated by `benchmarks/throughput.py` (raw numbers: the JSON written next to this "
      "file). Regenerate with:",
      "",
      "```bash",
      result["command"] if result["mode"] == "full" else
      "python -m benchmarks.throughput --out docs/benchmarks.json --md docs/benchmarks.md",
      "```",
      "",
      f"Mode: **{result['mode']}**; wall time {result['wall_seconds']:.0f} s.",
      "",
      "## Machine and load",
      "",
      f"- CPU: {m['cpu']} ({m['vendor']}), {m['cores']} cores visible, "
      f"{m['mhz']:.0f} MHz in /proc/cpuinfo; JAX {m['jax']} on `{m['backend']}` "
      f"({m['device_count']} device(s) in the main process), Python {m['python']}.",
      f"- Load at start: `{m['uptime']}`; 1/5/15-minute load at the end: "
      f"{', '.join(f'{x:.2f}' for x in result['load_avg_end'])}. The machine is shared: "
      "absolute tokens/s move with the load; the ratios are measured side by side and "
      "are the numbers to read.",
      f"- Nominal fp32 peak: {_g(nominal)} GFLOP/s = {m['nominal_formula']}.",
      f"- Measured matmul peak: the best of 3 jitted float32 n x n matmuls for n in "
      f"{', '.join(map(str, main['matmul_n']))}, once per repeat, paired with that repeat's "
      f"rows: median "
      f"{_g(main['matmul_peak_median'])} GFLOP/s, max {_g(main['matmul_peak_max'])} GFLOP/s "
      f"({_pct(main['matmul_peak_max'] / nominal if nominal else None)} of nominal).",
      *_shape_lines(result.get("shape_matmul")),
      "",
      "## Configuration",
      "",
      f"- Model (`configs/*.py:{plan['size']}`): d_model {model['d_model']}, "
      f"{model['num_layers']} layers, {model['num_heads']} heads, mlp {model['mlp_dim']}, "
      f"L = {main['seq_len']}, vocab 256 (bytes), {main['num_params']:,} parameters, "
      f"{main['flops_per_token'] / 1e6:.2f} MFLOP per token (`model.flops_per_token`: "
      "6N + 12 n_layers d L).",
      f"- K = {main['num_workers']} workers, B = {main['batch_per_worker']} sequences per "
      f"worker per step: global batch {main['num_workers'] * main['batch_per_worker']} x "
      f"{main['seq_len']} tokens for every row. Data: random bytes in the trainer's own "
      "`WorkerData`, staged per chunk exactly as `train.py` does (speed does not depend on "
      "the text).",
      f"- A timed unit is {main['steps_per_unit']} inner steps run in the row's own full "
      "rounds (column H; each round: staging, inner loop, sync, the round's one host read). "
      f"DiLoCo's configured H is {main['config_h']}; rounds of at most "
      f"{main['steps_per_unit']} keep the run short and weigh the sync "
      f"{main['config_h'] / main['steps_per_unit']:.1f}x more than training does, so the "
      "ratios below are lower bounds for the configured H (NoLoCo's config H is smaller "
      "and kept). The staged buffer keeps each config's chunk size, as `train.py` sizes it. "
      f"Each unit is bracketed by a reference unit before and after it; {main['repeats']} "
      "repeats, order reversed on odd repeats; the ratio is tokens/s(row) / mean of the "
      "two bracketing reference units, median [min, max] over repeats.",
      "",
      "## Throughput",
      "",
      "| row | what | layout | process | H | tokens/s | x reference | model GFLOP/s | "
      "MFU / measured peak | MFU / nominal | compiles inner/sync | compile s |",
      "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  L += _row_table(main, False, nominal)
  sharded = result.get("sharded")
  if sharded and "rows" in sharded:
    L += _row_table(sharded, True, nominal)
  L.append("")
  if sharded and "rows" in sharded:
    L.append(f"Rows whose process is *child* come from a separate process started with "
             f"`XLA_FLAGS={_DEVICE_COUNT}={sharded['devices']}` (simulated devices must be "
             "set before JAX starts); their ratios are against the `reference` row measured "
             "in that same child process (one device), and their MFU against the matmul peak "
             f"measured there (median {_g(sharded['matmul_peak_median'])} GFLOP/s). The "
             "simulated devices share the machine's cores, so these rows measure the "
             "shard_map code path (per-device blocks, collectives) on the same hardware; a "
             "ratio above 1 means the devices' programs, run concurrently, use the cores "
             "better than one program does.")
  elif sharded and "error" in sharded:
    L.append(f"shard_map rows: the child process failed: `{sharded['error'][-500:]}`")
  L += ["", "## Targets (reported, never asserted)", "",
        "| target | measured | goal | met |", "|---|---|---|---|"]
  for name, t in result["targets"].items():
    value = f"{t['value']:.3f}" if isinstance(t["value"], float) else str(t["value"])
    goal = f">= {t['target']}" if "compilations" not in name else f"== {t['target']}"
    L.append(f"| {name} | {value} | {goal} | {'yes' if t['met'] else '**no**'} |")
  L += ["", *_target_notes(result), ""]
  L += _compile_section(result)
  L += _scaling_section(result)
  L += _hot_path_section(result)
  return "\n".join(L) + "\n"


def _shape_lines(sm: dict | None) -> list[str]:
  if not sm:
    return []
  sq = sm["square_flops_per_sec"]
  line = lambda label, key, shape: (f"  - {label} `{shape}`: {_g(sm[key])} GFLOP/s "
                                    f"({_pct(sm[key] / sq)} of the square one)")
  return [f"- The model's MLP matmul, measured right after a {sm['square_n']}^2 one "
          f"({_g(sq)} GFLOP/s), best of 5, 3 interleaved rounds:",
          line("one model, [K·B·L, d] x [d, F]", "global_flops_per_sec", sm["global_shape"]),
          line("replica axis, K x [B·L, d] x [d, F] batched", "batched_flops_per_sec",
               sm["batched_shape"]),
          line("one naive worker step, [B·L, d] x [d, F]", "worker_flops_per_sec",
               sm["worker_shape"])]


def _target_notes(result: dict) -> list[str]:
  """Why each missed target is missed, with the numbers of this run that say so."""
  main, t = result["main"], result["targets"]
  rows = {r["name"]: r for r in main["rows"]}
  nan = float("nan")
  sm = result.get("shape_matmul") or {}
  sc = result.get("scaling") or {}
  sharded = {r["name"].split("@")[0]: r for r in (result.get("sharded") or {}).get("rows", [])}
  notes = []
  missed = lambda tag: [k for k, v in t.items() if tag in k and not v["met"]]
  if missed("/ reference"):
    shortfall = "; ".join(f"{k} {t[k]['value']:.3f}, short by "
                          f"{_TARGET_RATIO - t[k]['value']:.3f}" for k in missed("/ reference"))
    trend = ", ".join(f"K={p['num_workers']}: {p['ratio']:.2f}" for p in sc.get("by_workers", []))
    line = (f"- **Replica axis vs reference** ({shortfall}). Each layer's matmul becomes "
            "one batched matmul of K x [B·L, d] x [d, F] instead of one [K·B·L, d] x [d, F] "
            f"({_g(sm.get('batched_flops_per_sec', nan))} vs "
            f"{_g(sm.get('global_flops_per_sec', nan))} GFLOP/s here), and every elementwise "
            "pass and reduction gains a worker axis; the round adds the sync and the "
            "per-worker statistics. The spread of the repeats (the [min, max] column) is as "
            "wide as the shortfall on this shared machine. Ratio vs K at a fixed per-worker "
            f"batch (rounds of H = {sc.get('steps', '?')}): {trend}.")
    if sharded.get("diloco") and sharded.get("reference"):
      line += (" The same workers split over 2 simulated devices run at "
               f"{sharded['diloco']['ratio']:.2f}x that process's one-device reference: "
               "the two devices' programs run concurrently, which overlaps work that one "
               "program runs serially (not profiled further).")
    notes.append(line)
  if missed("/ naive"):
    naive = rows["naive"]
    step_ms = 1e3 * _median(naive["seconds"]) / (main["num_workers"] * main["steps_per_unit"])
    values = ", ".join(f"{k.split(' /')[0]} {t[k]['value']:.2f}x" for k in missed("/ naive"))
    notes.append(
        f"- **Replica axis vs the naive per-worker loop** ({values}; goal {_TARGET_NAIVE}x). "
        f"On this CPU one worker's jitted step ({main['batch_per_worker']} x "
        f"{main['seq_len']} tokens, about {step_ms:.0f} ms) is already big enough to run "
        f"its matmuls at {_g(sm.get('worker_flops_per_sec', nan))} GFLOP/s (the K-fold one: "
        f"{_g(sm.get('global_flops_per_sec', nan))}), and the Python loop adds only a "
        "dispatch of microseconds per worker-step; what the replica axis saves here is "
        "that gap, not a multiple. A several-fold gain needs per-worker steps too small "
        "to fill the device (an accelerator, or a much smaller model), where one "
        "vmapped step replaces K under-occupied ones.")
  if missed("MFU"):
    ref = rows["reference"]
    tokens = main["num_workers"] * main["batch_per_worker"] * main["seq_len"]
    step_s = tokens / ref["tokens_per_sec"]
    gemm_s = tokens * main["flops_per_token"] / sm.get("global_flops_per_sec", nan)
    values = ", ".join(f"{k.split(' MFU')[0]} {_pct(t[k]['value'])}" for k in missed("MFU"))
    notes.append(
        f"- **MFU** ({values} of the measured matmul peak; goal {_pct(_TARGET_MFU)}). The "
        f"model's big matmuls are not the limit: its MLP matmul alone runs at "
        f"{_g(sm.get('global_flops_per_sec', nan))} GFLOP/s, at which the step's model FLOPs "
        f"would take {1e3 * gemm_s:.0f} ms of the reference's {1e3 * step_s:.0f} ms step "
        f"({_pct(gemm_s / step_s)}). The rest is work that runs far below the matmul rate "
        "at d_model = 128: attention's B·H small [L, K] x [K, L] matmuls and their "
        "softmax, RMSNorm and GELU passes and broadcasts, the AdamW update "
        "(`docs/perf_proposals.md` has a per-op profile). With that work at "
        f"{_pct(1 - gemm_s / step_s)} of the step, MFU is capped near "
        f"{_pct(gemm_s / step_s)} of the matmul rate until it gets cheaper; MFU rises with "
        "width (table below).")
  if not t.get("compilations of each round function", {}).get("met", True):
    notes.append("- **Recompilation**: see the compilation table; a round function "
                 "compiled more than once over the run.")
  if not notes:
    notes.append("All targets met.")
  return notes


def _compile_section(result: dict) -> list[str]:
  L = ["## Compilation", "",
       "Each row's functions after its timed units and three more rounds of H = 2, 1, 3 "
       "(a run whose H changes every round: the timed rounds use the row's H, the warm-up "
       "round H = 1). `_cache_size()` counts compiled versions; compile seconds are JAX's "
       "trace + lowering + XLA compile events during the warm-up round.", "",
       "| row | H of the rounds run | distinct H | inner | sync | compile s |",
       "|---|---|---|---|---|---|"]
  blocks = [result["main"]] + ([result["sharded"]] if "rows" in result.get("sharded", {}) else [])
  for block in blocks:
    for name, c in block["compiles"].items():
      hs = c["hs"]
      shown = ", ".join(map(str, hs)) if len(hs) <= 12 else (
          ", ".join(map(str, hs[:4])) + ", ..., " + ", ".join(map(str, hs[-4:])))
      L.append(f"| `{name}` | {shown} | {c['distinct_h']} | {c.get('inner', '')} | "
               f"{c.get('sync', '-')} | {c['compile_seconds']:.1f} |")
  return L + [""]


def _scaling_section(result: dict) -> list[str]:
  sc = result.get("scaling")
  if not sc:
    return []
  nominal = result["machine"]["nominal_peak_flops"]
  method = sc["by_workers"][0]["memory"]["method"] if sc["by_workers"] else ""
  L = ["## Scaling", "",
       f"DiLoCo on one device (vmap) against the reference at the same global batch, "
       f"units of one round of H = {sc['steps']} (so the sync weighs more than at the "
       "configured H), bracketed as above. Memory: the state (params, anchor, AdamW moments, outer "
       "momentum, all K copies), XLA's buffer estimate of the compiled inner loop "
       "(arguments + outputs - aliased + temporaries), and the process's resident-set "
       f"peak during one round ({method}; "
       "growth = peak minus the resident set before the round).", "",
       "### With K (fixed per-worker batch)", "",
       "| K | global batch | tokens/s | x reference | tokens/s vs K=1 | state MiB | "
       "XLA inner MiB | RSS peak MiB | RSS growth MiB |",
       "|---|---|---|---|---|---|---|---|---|"]
  first = sc["by_workers"][0]["tokens_per_sec"] if sc["by_workers"] else float("nan")
  for p in sc["by_workers"]:
    L.append(f"| {p['num_workers']} | {p['global_batch']} | {p['tokens_per_sec']:.0f} | "
             f"{p['ratio']:.3f} | {p['tokens_per_sec'] / first:.2f} | "
             f"{_mb(p['xla'].get('state_bytes'))} | "
             f"{_mb(p['xla'].get('inner', {}).get('peak_estimate'))} | "
             f"{_mb(p['memory'].get('peak_bytes'))} | {_mb(p['memory'].get('growth_bytes'))} |")
  L += ["", "### With width (K fixed)", "",
        "| d_model | params | MFLOP/token | tokens/s | x reference | MFU / nominal | "
        "state MiB | XLA inner MiB | RSS growth MiB |",
        "|---|---|---|---|---|---|---|---|---|"]
  for p in sc["by_width"]:
    L.append(f"| {p['d_model']} | {p['num_params']:,} | {p['flops_per_token'] / 1e6:.2f} | "
             f"{p['tokens_per_sec']:.0f} | {p['ratio']:.3f} | "
             f"{_pct(p['model_flops_per_sec'] / nominal if nominal else None)} | "
             f"{_mb(p['xla'].get('state_bytes'))} | "
             f"{_mb(p['xla'].get('inner', {}).get('peak_estimate'))} | "
             f"{_mb(p['memory'].get('growth_bytes'))} |")
  return L + [""]


def _hot_path_section(result: dict) -> list[str]:
  hp = result.get("hot_path")
  if not hp:
    return []
  st = hp["staging"]
  share = st["seconds"]["int32"] / st["diloco_round_seconds"]
  sv = hp["scan_vs_while"]
  L = ["## Hot path", "",
       f"- **Donation**: the state's buffers are consumed by every round function "
       f"({', '.join(f'`{k}`: {v}' for k, v in hp['donated'].items())}); "
       f"donation warnings: {hp['donation_warnings'] or 'none'}.",
       f"- **Host round-trips inside a round**: {hp['device_to_host_inside_round']}; the "
       "round statistics stay on device in `RoundAcc` until the sync; the one read is the "
       "sync's metrics.",
       f"- **while_loop vs scan**: the library's `lax.while_loop` with a traced count vs a "
       f"`lax.scan` over the staged chunk (C = {sv['chunk']}) with `lax.cond` skipping "
       f"unused slots, same step code, paired: scan / while tokens/s = **{sv['ratio']:.3f}** "
       f"({', '.join(f'{x:.3f}' for x in sv['ratios'])}). "
       + ("No measurable difference: keep the while_loop, which also skips a short "
          "round's padding." if abs(sv["ratio"] - 1) < 0.03 else
          ("scan is faster here." if sv["ratio"] > 1 else "while_loop is faster here.")),
       f"- **Staging** (`train.py`: read, zero-pad to C = {st['chunk']}, put): "
       f"{1e3 * st['seconds']['int32']:.1f} ms per DiLoCo round of H = {st['h']} "
       f"({_pct(share)} of the round's {st['diloco_round_seconds']:.2f} s); the buffer is "
       f"{st['buffer_bytes_int32'] / 2**10:.0f} KiB of int32. Staging uint8 instead (cast "
       f"on device) takes {1e3 * st['seconds']['uint8']:.1f} ms.",
  ]
  au = hp.get("autoloco_staging")
  if au:
    L.append(f"- AutoLoCo's buffer is sized by its `h_max` (C = {au['chunk']} for rounds of "
             f"H = {au['h']}): {1e3 * au['seconds']['int32']:.1f} ms of staging per round, "
             f"{au['buffer_bytes_int32'] / 2**10:.0f} KiB, most of it padding.")
  return L + [""]


if __name__ == "__main__":
  app.run(main)
