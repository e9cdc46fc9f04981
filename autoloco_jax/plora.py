"""PLoRA: many LoRA fine-tuning jobs trained concurrently on one frozen base model.

A LoRA hyperparameter sweep (rank, alpha, learning rate, target layers, seed)
is usually run one job after another, each job too small to keep the hardware
busy. PLoRA (Yan et al. 2025) packs several jobs into one program on a shared,
frozen base model and plans the packing under a memory budget.

Here the jobs of a **group** are a leading adapter axis ``N``, exactly like the
replica axis (:mod:`replicas`): the axis is split over the mesh's devices and
each device trains its block of adapters with ``vmap``, reusing the project's
inner loop (:func:`inner.make_inner_loop`) unchanged. Inside the block,

* the base weights are one shared, replicated copy: ``vmap`` over adapters
  turns every base matmul ``x W`` into one GEMM over all adapters' tokens;
* every adapter has its own data stream, its own AdamW state, its own learning
  rate (updates scaled per adapter, :func:`adapter_optimizer`) and its own
  ``alpha / r``;
* ranks and target layers may differ: adapters are zero-padded to the group's
  largest rank and to the union of its targets, with masks that make each one
  exactly the lone adapter (:mod:`lora`), optimizer trajectory included.

So a packed run gives each adapter the trajectory it would have alone, up to
float summation order (``tests/test_plora.py``).

**Planner** (:func:`plan`). Groups run one after another, each on the whole
mesh (``ceil(n / D)`` adapter slots per device, idle slots filled with inert,
fully masked adapters). A group's per-device memory is (:class:`MemoryModel`)

.. math::

  M = M_{base} + \\lceil n / D \\rceil \\, m(R, T), \\qquad
  m(R, T) = 4 b \\, p(R, T) + b \\, B L \\, (\\text{base activations} + R |T|)

with ``p(R, T) = R Σ_{t∈T} (d_in + d_out)`` padded adapter parameters (counted
four times: parameters, gradients, two Adam moments) and ``b`` bytes per value.
Its time is ``steps · t_step + t_compile`` with ``t_step(s, p)`` measured at a
few slot counts and interpolated (:class:`CostModel`, :func:`measure_cost_model`).
Since groups run back to back, the makespan is the sum of group times and the
order of the groups does not change it: planning is choosing the partition.
The planner sorts configs by (rank desc, targets) and finds, by dynamic
programming over cut points, the partition into contiguous runs of that order
with the least total time among those whose every group fits the budget. It is
exact over contiguous partitions (O(N^2) candidate groups), which contain the
optimum when all configs share their targets: for a fixed list of group sizes,
giving the largest ranks to the same groups minimises the padding. With
``mixed_ranks='group'`` only equal-rank groups are allowed (no padding).

References:
  Yan et al., PLoRA: Efficient LoRA Hyperparameter Tuning for Large Models,
  2025. https://arxiv.org/abs/2508.02932
  Hu et al., LoRA, 2021. https://arxiv.org/abs/2106.09685
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import time
import types
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from autoloco_jax import inner, lora, model as model_lib, replicas

MIXED_RANKS = ("pad", "group")
_MIB = 2.0 ** 20


# ----------------------------------------------------------------------------
# Configs.


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """One fine-tuning job of the sweep.

  Attributes:
    name: unique name (used in plans, results and errors).
    rank: LoRA rank ``r >= 1``.
    alpha: LoRA alpha; the update is scaled by ``alpha / r``.
    lr: peak learning rate of the job's AdamW (shared warmup/cosine shape).
    targets: dense layers to adapt (``lora.LAYERS`` or aliases ``attn``,
      ``mlp``, ``all``); stored resolved, in canonical order.
    seed: seeds the adapter's init and (in the experiment) its data stream.
  """
  name: str
  rank: int
  alpha: float
  lr: float
  targets: tuple[str, ...] = ("qkv", "out")
  seed: int = 0

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"LoraConfig.name must be a non-empty string, got {self.name!r}")
    lora._check_rank(self.rank, f"rank of config {self.name!r}")
    if not self.alpha > 0:
      raise ValueError(f"config {self.name!r}: alpha must be > 0, got {self.alpha!r}")
    if not self.lr > 0:
      raise ValueError(f"config {self.name!r}: lr must be > 0, got {self.lr!r}")
    if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
      raise ValueError(f"config {self.name!r}: seed must be an integer >= 0, got {self.seed!r}")
    try:
      targets = lora.resolve_targets(self.targets)
    except ValueError as e:
      raise ValueError(f"config {self.name!r}: {e}") from None
    object.__setattr__(self, "targets", targets)


def _check_configs(configs: Sequence[LoraConfig]) -> tuple[LoraConfig, ...]:
  configs = tuple(configs)
  if not configs:
    raise ValueError("no LoRA configs given")
  names = [c.name for c in configs]
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup:
    raise ValueError(f"LoRA config names must be unique; repeated: {dup}")
  return configs


def union_targets(configs: Iterable[LoraConfig]) -> tuple[str, ...]:
  return lora.resolve_targets([t for c in configs for t in c.targets])


# ----------------------------------------------------------------------------
# Per-adapter optimizer.


#: Optimizer fields shared by every job of a sweep (``config.inner`` has them).
OPT_FIELDS = ("warmup_steps", "min_lr_ratio", "weight_decay", "b1", "b2", "eps",
              "clip_norm")


def _opt_key(opt_cfg: Any) -> tuple:
  """The shared optimizer fields as a hashable ``((name, value), ...)``."""
  if isinstance(opt_cfg, tuple):
    return opt_cfg
  get = opt_cfg.get if hasattr(opt_cfg, "get") else lambda k, d=None: getattr(opt_cfg, k, d)
  missing = [k for k in OPT_FIELDS if get(k) is None]
  if missing:
    raise ValueError(f"optimizer config is missing field(s) {missing}")
  return tuple((k, float(get(k))) for k in OPT_FIELDS)


def _relative(opt_cfg: Any) -> types.SimpleNamespace:
  ns = types.SimpleNamespace(**dict(_opt_key(opt_cfg)))
  ns.warmup_steps = int(ns.warmup_steps)
  ns.lr = 1.0
  return ns


def _scale_by_adapter_lr() -> optax.GradientTransformation:
  """Multiplies every update by the adapter's own ``params['frozen']['lr']``."""

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("per-adapter lr scaling needs params in tx.update")
    lr = params["frozen"]["lr"]
    return jax.tree.map(lambda u: u * lr, updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def adapter_optimizer(opt_cfg: Any, total_steps: int
                      ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """The inner optimizer of the project, with a per-adapter peak learning rate.

  ``inner.optimizer`` (clip by global norm, AdamW with decoupled weight decay on
  matrices) runs on the trainable ``params['factors']`` under the schedule
  ``η(s) / η_peak`` (peak 1), then the update is multiplied by the adapter's
  ``params['frozen']['lr']``. AdamW's update is ``-η(s) (adam + wd θ)``, so this
  is AdamW with the adapter's own peak ``lr`` (vmap gives each adapter its own
  value). Frozen leaves (mask, scale, lr) get exactly zero updates.

  Returns:
    ``(tx, relative_schedule)``.
  """
  rel = _relative(opt_cfg)
  schedule = inner.schedule(rel, total_steps)
  tx = optax.chain(
      optax.multi_transform(
          {"train": inner.optimizer(rel, schedule), "frozen": optax.set_to_zero()},
          {"factors": "train", "frozen": "frozen"}),
      _scale_by_adapter_lr())
  return tx, schedule


# ----------------------------------------------------------------------------
# A group: N adapters as one jitted program on the mesh.


class GroupState(NamedTuple):
  """Training state of a group (leading axis ``N`` = adapter slots, on the mesh).

  Attributes:
    params_N: ``{'factors': lora factors, 'frozen': {'mask', 'scale', 'lr'}}``.
    opt_N: per-adapter optimizer state (:func:`adapter_optimizer`).
    acc: training statistics since the start (``inner.RoundAcc``): per adapter
      first, last and summed loss, summed gradient norm.
    step: steps taken (replicated scalar).
  """
  params_N: Any
  opt_N: Any
  acc: inner.RoundAcc
  step: jax.Array

  @staticmethod
  def specs() -> "GroupState":
    w = replicas.WORKERS
    return GroupState(w, w, inner.RoundAcc.specs(), replicas.REPLICATED)


class Group(NamedTuple):
  """A packed group of LoRA jobs (build with :func:`make_group`).

  Attributes:
    configs: the jobs, in slot order (slots past ``len(configs)`` are fillers).
    rank: the group rank ``R`` every adapter is padded to.
    targets: the union of the jobs' target layers.
    num_slots: ``N``, ``len(configs)`` rounded up to a multiple of the devices.
    mesh: the mesh the adapter axis is split over.
    init_state: ``() -> GroupState`` placed on the mesh.
    train: jitted, donating ``(state, base, tokens_NxCxBxL1, num_steps) -> state``.
    evaluate: jitted ``(state, base, tokens_MxBxL1) -> loss_N``, mean loss of
      each adapter over the same ``M`` batches.
    adapters: ``state -> {name: lora.Adapter}`` without padding (host-side).
  """
  configs: tuple[LoraConfig, ...]
  rank: int
  targets: tuple[str, ...]
  num_slots: int
  mesh: Mesh
  init_state: Callable[[], GroupState]
  train: Callable
  evaluate: Callable
  adapters: Callable[[GroupState], dict]


def _place(tree: Any, specs: Any, mesh: Mesh) -> Any:
  # As state.place: a one-device mesh returns P('replica') outputs as P(), so
  # inputs are laid out the same way and every call hits one compiled program.
  one = mesh.devices.size == 1
  shardings = jax.tree.map(lambda s: NamedSharding(mesh, P() if one else s), specs,
                           is_leaf=lambda x: isinstance(x, P))
  return jax.device_put(tree, shardings, may_alias=False)


def place_base(base_params: Any, mesh: Mesh) -> Any:
  """The frozen base params replicated on every device of ``mesh``."""
  return replicas.put_replicated(base_params, mesh)


def _slot_loss(apply: Callable, base: Any, mode: str, params: Any,
               tokens_BxL1: jax.Array) -> jax.Array:
  frozen = jax.lax.stop_gradient(params["frozen"])
  adapter = lora.Adapter(params["factors"], frozen["mask"], frozen["scale"])
  adapted = lambda a, x: lora.lora_apply(apply, base, a, x, mode=mode)
  return model_lib.loss_fn(adapted, adapter, tokens_BxL1)


@functools.lru_cache(maxsize=32)
def _programs(apply: Callable, opt_key: tuple, total_steps: int, mode: str, mesh: Mesh,
              layers: tuple, rank: int) -> tuple[Callable, Callable, Callable]:
  """The jitted (build_state, train, evaluate) of every group of one shape.

  Cached so that groups, and jobs run one after another, that share a shape
  (apply, optimizer, steps, mode, mesh, layers, rank and slot count) share one
  compiled program; the group's configs enter as arrays.
  """
  tx, schedule = adapter_optimizer(opt_key, total_steps)
  layer_dims = dict(layers)
  specs = GroupState.specs()
  w, r = replicas.WORKERS, replicas.REPLICATED

  @jax.jit
  def build_state(params_N) -> GroupState:
    return GroupState(params_N, jax.vmap(tx.init)(params_N),
                      inner.RoundAcc.zeros(jax.tree.leaves(params_N)[0].shape[0]),
                      jnp.zeros((), jnp.int32))

  def train_block(state: GroupState, base, tokens_NxCxBxL1, num_steps):
    loss = functools.partial(_slot_loss, apply, base, mode)
    run = inner.make_inner_loop(loss, tx, schedule)
    params_N, opt_N, acc = run(state.params_N, state.opt_N, state.acc,
                               tokens_NxCxBxL1, num_steps, state.step)
    return GroupState(params_N, opt_N, acc, state.step + num_steps)

  @functools.partial(jax.jit, donate_argnums=0)
  def train(state, base, tokens_NxCxBxL1, num_steps):
    return replicas.map_workers(train_block, mesh, in_specs=(specs, r, w, r),
                                out_specs=specs)(state, base, tokens_NxCxBxL1, num_steps)

  def eval_block(params_N, base, tokens_MxBxL1):
    def one(params):
      loss = functools.partial(_slot_loss, apply, base, mode, params)
      return jnp.mean(jax.lax.map(loss, tokens_MxBxL1))
    return jax.vmap(one)(params_N)

  @jax.jit
  def evaluate(state, base, tokens_MxBxL1):
    return replicas.map_workers(eval_block, mesh, in_specs=(w, r, r), out_specs=w)(
        state.params_N, base, tokens_MxBxL1)

  return build_state, train, evaluate


def make_group(apply: Callable, base_params: Any, configs: Sequence[LoraConfig],
               opt_cfg: Any, total_steps: int, mesh: Mesh, *,
               rank: int | None = None, targets: Iterable[str] | None = None,
               mode: str = "factored") -> Group:
  """Builds the jitted program that trains ``configs`` together.

  Args:
    apply: the base model's pure ``apply(params, tokens_BxL)``.
    base_params: frozen base params (used here for shapes only).
    configs: the jobs; names must be unique.
    opt_cfg: shared optimizer fields (:data:`OPT_FIELDS`: ``warmup_steps``,
      ``min_lr_ratio``, ``weight_decay``, ``b1``, ``b2``, ``eps``,
      ``clip_norm``); each job's ``lr`` is its own peak.
    total_steps: steps every job takes (sets the schedule's length).
    mesh: a mesh from ``replicas.make_mesh(num_slots, D)``; inert fillers pad
      the group to a multiple of its device count.
    rank: group rank ``R`` (default: the largest config rank).
    targets: group layers (default: the union of the configs' targets).
    mode: ``lora.lora_apply`` mode, ``'factored'`` or ``'merged'``.
  """
  configs = _check_configs(configs)
  if mode not in lora.MODES:
    raise ValueError(f"unknown lora_apply mode {mode!r}; choose from {lora.MODES}")
  max_rank = max(c.rank for c in configs)
  rank = max_rank if rank is None else lora._check_rank(rank, "group rank")
  if rank < max_rank:
    raise ValueError(f"group rank {rank} is below the largest config rank {max_rank}")
  union = union_targets(configs)
  group_targets = union if targets is None else lora.resolve_targets(targets)
  if not set(union) <= set(group_targets):
    raise ValueError(f"group targets {list(group_targets)} miss some of the configs' "
                     f"targets {list(union)}")
  devices = mesh.devices.size
  num_slots = -(-len(configs) // devices) * devices
  layers = lora.dense_layers(base_params, group_targets)
  build_state, train, evaluate = _programs(
      apply, _opt_key(opt_cfg), int(total_steps), mode, mesh,
      tuple(sorted(layers.items())), rank)

  slots = []
  for c in configs:
    a = lora.init(c.seed, base_params, c.rank, c.alpha, c.targets, pad_rank=rank,
                  pad_targets=group_targets)
    slots.append({"factors": a.factors,
                  "frozen": {"mask": a.mask, "scale": a.scale, "lr": np.float32(c.lr)}})
  # Fillers: zero factors, zero mask, scale and lr; they train and change nothing.
  filler = jax.tree.map(np.zeros_like, slots[0])
  slots += [filler] * (num_slots - len(configs))
  params_N = jax.tree.map(lambda *x: np.stack([np.asarray(v) for v in x]), *slots)

  def init_state() -> GroupState:
    return _place(build_state(params_N), GroupState.specs(), mesh)

  def adapters(state: GroupState) -> dict:
    params_N = jax.device_get(state.params_N)
    out = {}
    for i, c in enumerate(configs):
      p = jax.tree.map(lambda x: x[i], params_N)
      out[c.name] = lora.compact(lora.Adapter(p["factors"], p["frozen"]["mask"],
                                              p["frozen"]["scale"]))
    return out

  return Group(configs, rank, group_targets, num_slots, mesh, init_state, train,
               evaluate, adapters)


# ----------------------------------------------------------------------------
# Running a group and a plan.


class GroupResult(NamedTuple):
  """What one group's run measured.

  Attributes:
    final_loss: ``{name: training loss of the last step}``.
    mean_loss: ``{name: mean training loss over all steps}``.
    eval_loss: ``{name: mean loss on the eval batches}`` (empty if none given).
    adapters: ``{name: trained lora.Adapter, unpadded}``.
    compile_s: seconds to lower and compile the training program.
    train_s: seconds from the first training step to the last one's result,
      data staging included.
    train_cpu_s: process CPU seconds (all threads) over the same span: less
      sensitive than ``train_s`` to other work on a shared machine.
    wall_s: the whole run: init, compile, training and evaluation.
    tokens: training tokens processed by real (non-filler) adapters.
  """
  final_loss: dict
  mean_loss: dict
  eval_loss: dict
  adapters: dict
  compile_s: float
  train_s: float
  train_cpu_s: float
  wall_s: float
  tokens: int


def run_group(apply: Callable, base_params: Any, configs: Sequence[LoraConfig],
              streams: Mapping[str, Any], *, opt_cfg: Any, total_steps: int,
              batch_size: int, chunk_steps: int = 32, num_devices: int = 1,
              eval_tokens_MxBxL1: np.ndarray | None = None,
              rank: int | None = None, targets: Iterable[str] | None = None,
              mode: str = "factored") -> GroupResult:
  """Trains ``configs`` as one packed group for ``total_steps`` steps.

  Args:
    streams: ``{name: data}``, each with the ``data.WorkerData`` method
      ``train_batches(positions_1, num_steps, batch_size)`` of one worker: the
      job's own data stream, read from position 0.
    chunk_steps: batches staged per call of the jitted loop.
    num_devices: devices the adapter axis is split over.
    eval_tokens_MxBxL1: optional eval batches, the same for every job.
    Other arguments as :func:`make_group`.
  """
  t0 = time.perf_counter()
  configs = _check_configs(configs)
  missing = [c.name for c in configs if c.name not in streams]
  if missing:
    raise ValueError(f"no data stream for configs {missing}")
  if chunk_steps < 1 or total_steps < 1 or batch_size < 1:
    raise ValueError("chunk_steps, total_steps and batch_size must be >= 1, got "
                     f"{chunk_steps}, {total_steps}, {batch_size}")
  num_slots = -(-len(configs) // num_devices) * num_devices
  mesh = replicas.make_mesh(num_slots, num_devices)
  group = make_group(apply, base_params, configs, opt_cfg, total_steps, mesh,
                     rank=rank, targets=targets, mode=mode)
  base = place_base(base_params, mesh)
  state = group.init_state()
  chunk = min(chunk_steps, total_steps)
  positions = {c.name: np.zeros(1, np.int64) for c in configs}

  def stage(num_steps):
    rows = []
    for c in configs:
      tokens_1xHxBxL1, positions[c.name] = streams[c.name].train_batches(
          positions[c.name], num_steps, batch_size)
      rows.append(tokens_1xHxBxL1[0])
    buf = np.zeros((num_slots, chunk) + rows[0].shape[1:], np.int32)
    buf[:len(rows), :num_steps] = np.stack(rows)
    return replicas.put_workers(buf, mesh)

  first = stage(chunk)
  t_compile = time.perf_counter()
  train = group.train.lower(state, base, first, np.int32(chunk)).compile()
  compile_s = time.perf_counter() - t_compile

  t_train, cpu_train = time.perf_counter(), time.process_time()
  done, tokens = 0, first
  while done < total_steps:
    n = min(chunk, total_steps - done)
    if done:
      tokens = stage(n)
    # Dispatch is asynchronous: the next chunk is staged while this one runs.
    state = train(state, base, tokens, np.int32(n))
    done += n
  acc = jax.device_get(state.acc)
  train_s = time.perf_counter() - t_train
  train_cpu_s = time.process_time() - cpu_train

  names = [c.name for c in configs]
  steps = float(acc.steps)
  final = {n: float(acc.loss_last_K[i]) for i, n in enumerate(names)}
  mean = {n: float(acc.loss_sum_K[i]) / steps for i, n in enumerate(names)}
  evals = {}
  if eval_tokens_MxBxL1 is not None:
    loss_N = jax.device_get(group.evaluate(
        state, base, replicas.put_replicated(jnp.asarray(eval_tokens_MxBxL1), mesh)))
    evals = {n: float(loss_N[i]) for i, n in enumerate(names)}
  adapters = group.adapters(state)
  seq_len = first.shape[-1] - 1
  return GroupResult(final, mean, evals, adapters, compile_s, train_s, train_cpu_s,
                     time.perf_counter() - t0,
                     len(configs) * total_steps * batch_size * seq_len)


@functools.lru_cache(maxsize=8)
def _eval_program(apply: Callable, mode: str) -> Callable:
  @jax.jit
  def evaluate(base, adapters_N, tokens_MxBxL1):
    adapted = lambda a, x: lora.lora_apply(apply, base, a, x, mode=mode)
    def one(adapter):
      loss = functools.partial(model_lib.loss_fn, adapted, adapter)
      return jnp.mean(jax.lax.map(loss, tokens_MxBxL1))
    return jax.vmap(one)(adapters_N)
  return evaluate


def evaluate_adapters(apply: Callable, base_params: Any, adapters: Mapping[str, lora.Adapter],
                      tokens_MxBxL1: np.ndarray, *, mode: str = "factored") -> dict:
  """``{name: mean loss over the M batches}`` of trained adapters, in one program.

  The adapters are padded to their largest rank and union of layers and
  evaluated together (``vmap``), so evaluating every run of a sweep costs one
  compilation per shape rather than one per job.
  """
  if not adapters:
    return {}
  names = list(adapters)
  rank = max(next(iter(a.mask.values())).shape[0] for a in adapters.values())
  layers = {}
  for a in adapters.values():
    for path, f in a.factors.items():
      layers[path] = (f["a"].shape[0], f["b"].shape[1])
  padded = [lora.pad(adapters[n], rank, layers) for n in names]
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *padded)
  loss_N = _eval_program(apply, mode)(base_params, stacked, jnp.asarray(tokens_MxBxL1))
  loss_N = jax.device_get(loss_N)
  return {n: float(loss_N[i]) for i, n in enumerate(names)}


class SweepResult(NamedTuple):
  """Per-config results of a whole plan and its timings (sums over groups)."""
  final_loss: dict
  mean_loss: dict
  eval_loss: dict
  adapters: dict
  compile_s: float
  train_s: float
  train_cpu_s: float
  wall_s: float
  tokens: int
  groups: list


def run_plan(plan: "Plan", apply: Callable, base_params: Any,
             streams: Mapping[str, Any], **kwargs) -> SweepResult:
  """Runs the plan's groups one after another (kwargs as :func:`run_group`)."""
  results = []
  for g in plan.groups:
    results.append(run_group(apply, base_params, g.configs, streams, rank=g.rank,
                             targets=g.targets, num_devices=plan.num_devices, **kwargs))
  merged = lambda field: {k: v for r in results for k, v in getattr(r, field).items()}
  return SweepResult(merged("final_loss"), merged("mean_loss"), merged("eval_loss"),
                     merged("adapters"), sum(r.compile_s for r in results),
                     sum(r.train_s for r in results), sum(r.train_cpu_s for r in results),
                     sum(r.wall_s for r in results),
                     sum(r.tokens for r in results), results)


# ----------------------------------------------------------------------------
# Memory and cost models.


@dataclasses.dataclass(frozen=True)
class MemoryModel:
  """Bytes one device needs for a group (see the module docstring).

  Attributes:
    base_params: parameter count of the frozen base.
    layer_dims: ``{layer name: ((d_in, d_out), ...)}`` for each LoRA-targetable
      layer name, one entry per block (``lora.dense_layers``).
    batch_size, seq_len: ``B`` and ``L`` of every job.
    d_model, mlp_dim, num_heads, num_layers, vocab_size: the base's shape.
    bytes_per_value: 4 for float32.
    act_d, act_f, act_v: activations kept for the backward pass per token,
      in units of ``d_model`` per layer, ``mlp_dim`` per layer and ``vocab``
      (norm inputs and outputs, q/k/v, rotated q/k, attention output,
      projections, residuals: about 10 D; MLP pre- and post-GELU: 2 F; logits
      and softmax: 2 V), plus ``num_heads x L`` attention probabilities per
      layer.
    act_scale: multiplies the activation term; 1 is the analytic count above,
      :meth:`fit_activations` sets it from XLA's memory analysis of compiled
      groups (XLA:CPU keeps more temporaries than the count).
    extra_bytes: per-device bytes besides the base and the slots (staged
      tokens, XLA workspace); also fitted by :meth:`fit_activations`.
    overhead: multiplies the total (allocator slack).
  """
  base_params: int
  layer_dims: Mapping[str, tuple]
  batch_size: int
  seq_len: int
  d_model: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  vocab_size: int
  bytes_per_value: int = 4
  act_d: float = 10.0
  act_f: float = 2.0
  act_v: float = 2.0
  act_scale: float = 1.0
  extra_bytes: float = 0.0
  overhead: float = 1.0

  @classmethod
  def for_model(cls, base_params: Any, model_cfg: Any, batch_size: int,
                seq_len: int, **kw) -> "MemoryModel":
    """Builds the model from base params (arrays or ``jax.eval_shape`` structs)."""
    cfg = model_lib.ModelConfig.from_cfg(model_cfg)
    dims: dict[str, list] = {}
    for path, d in lora.dense_layers(base_params, lora.LAYERS).items():
      dims.setdefault(path.rsplit("/", 1)[-1], []).append(d)
    return cls(model_lib.param_count(base_params), {k: tuple(v) for k, v in dims.items()},
               batch_size, seq_len, cfg.d_model, cfg.mlp_dim, cfg.num_heads,
               cfg.num_layers, cfg.vocab_size, **kw)

  def adapter_params(self, rank: int, targets: Iterable[str]) -> int:
    """``p(R, T) = R Σ_{layers of T} (d_in + d_out)``."""
    return rank * sum(i + o for t in lora.resolve_targets(targets)
                      for i, o in self.layer_dims.get(t, ()))

  def base_bytes(self) -> float:
    """The frozen base weights, one copy per device."""
    return self.overhead * self.bytes_per_value * self.base_params

  def slot_bytes(self, rank: int, targets: Iterable[str]) -> float:
    """One adapter slot of a group of rank ``R`` and layers ``T``."""
    targets = lora.resolve_targets(targets)
    p = self.adapter_params(rank, targets)
    num_adapted = sum(len(self.layer_dims.get(t, ())) for t in targets)
    per_token = (self.num_layers * (self.act_d * self.d_model + self.act_f * self.mlp_dim
                                    + self.num_heads * self.seq_len)
                 + self.act_v * self.vocab_size + rank * num_adapted)
    activations = self.act_scale * self.batch_size * self.seq_len * per_token
    values = 4 * p + rank * num_adapted + activations
    return self.overhead * self.bytes_per_value * values

  def group_bytes(self, slots_per_device: int, rank: int, targets: Iterable[str]) -> float:
    return (self.base_bytes() + self.overhead * self.extra_bytes
            + slots_per_device * self.slot_bytes(rank, targets))

  def fit_activations(self, measurements: Sequence[Mapping[str, Any]]) -> "MemoryModel":
    """This model fitted to XLA's memory analysis of compiled groups.

    ``measurements`` are :func:`time_groups` results of one rank and targets
    with different slot counts. XLA's bytes per device (arguments +
    temporaries) at the fewest and the most slots fix a line: its slope sets
    ``act_scale`` (the slot term matches the per-slot bytes), its intercept
    ``extra_bytes`` (at least 0). Returns ``self`` unchanged when fewer than
    two usable measurements.
    """
    rows = [m for m in measurements if "xla_temp_bytes" in m]
    rows = sorted(rows, key=lambda m: m["slots"])
    if len(rows) < 2 or rows[0]["slots"] == rows[-1]["slots"]:
      return self
    lo, hi = rows[0], rows[-1]
    if (lo["rank"], lo["targets"]) != (hi["rank"], hi["targets"]):
      raise ValueError("fit_activations needs measurements of one rank and targets")
    total = lambda m: m["xla_argument_bytes"] + m["xla_temp_bytes"]
    per_slot = (total(hi) - total(lo)) / (hi["slots"] - lo["slots"])
    unit = dataclasses.replace(self, act_scale=1.0, overhead=1.0)
    no_act = dataclasses.replace(unit, act_scale=0.0).slot_bytes(lo["rank"], lo["targets"])
    act = unit.slot_bytes(lo["rank"], lo["targets"]) - no_act
    fitted = dataclasses.replace(self, act_scale=max((per_slot - no_act) / act, 0.0),
                                 extra_bytes=0.0, overhead=1.0)
    extra = total(lo) - fitted.group_bytes(lo["slots"], lo["rank"], lo["targets"])
    return dataclasses.replace(fitted, extra_bytes=max(extra, 0.0), overhead=self.overhead)


class CostModel(NamedTuple):
  """Measured seconds of a group: ``compile_s + steps * step_seconds(s, p)``.

  .. math::

    t_{step}(s, p) = \\mathrm{interp}_s(s) + s \\, c_p \\, (p - p_{ref})

  ``s`` is adapter slots per device and ``p`` a slot's padded adapter
  parameters (:meth:`MemoryModel.adapter_params`). The step time at the
  reference size ``p_ref`` is tabulated at measured slot counts and
  interpolated linearly between them (extrapolated from the last two beyond
  them): on a CPU the cost per slot is not constant in ``s`` (cache effects),
  so a single slope would misplace the best group size. Fit by
  :func:`measure_cost_model`; :meth:`linear` builds a simple one.

  Attributes:
    slots: measured slot counts, ascending.
    step_s: seconds per step at those slot counts, at ``ref_params``.
    ref_params: padded adapter parameters per slot of those measurements.
    per_param_s: ``c_p``, seconds per step per slot per extra parameter.
    compile_s: seconds to compile one group's program.
  """
  slots: tuple
  step_s: tuple
  ref_params: int
  per_param_s: float
  compile_s: float = 0.0

  @classmethod
  def linear(cls, fixed_s: float, per_slot_s: float, per_param_s: float,
             compile_s: float = 0.0) -> "CostModel":
    """``t_step = fixed_s + s (per_slot_s + per_param_s p)``."""
    return cls((1, 2), (fixed_s + per_slot_s, fixed_s + 2 * per_slot_s), 0,
               per_param_s, compile_s)

  def step_seconds(self, slots_per_device: int, params_per_slot: int) -> float:
    xs, ys, s = self.slots, self.step_s, slots_per_device
    if len(xs) == 1:
      base = ys[0] * s / xs[0]
    elif s <= xs[-1]:
      base = float(np.interp(s, xs, ys)) if s >= xs[0] else ys[0] * s / xs[0]
    else:
      base = ys[-1] + (s - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return base + s * self.per_param_s * (params_per_slot - self.ref_params)

  def group_seconds(self, steps: int, slots_per_device: int, params_per_slot: int) -> float:
    return self.compile_s + steps * self.step_seconds(slots_per_device, params_per_slot)


def time_groups(apply: Callable, base_params: Any,
                groups: Sequence[tuple[Sequence[LoraConfig], str]], *, opt_cfg: Any,
                batch_size: int, seq_len: int, steps: int = 5, rounds: int = 3,
                min_seconds: float = 0.2, vocab_size: int = 256) -> list[dict]:
  """Compile seconds and steady-state seconds per step of groups, on random tokens.

  ``groups`` are ``(configs, mode)`` pairs, each run on one device. All are
  compiled first, then timed round-robin for ``rounds`` rounds, each call
  lasting at least ``min_seconds``; a group's time is its fastest call. On a
  shared machine this keeps the comparison fair when the load drifts, and the
  minimum is the least disturbed measurement. Each result also holds the
  process CPU seconds per step of that call and XLA's memory analysis where
  the backend gives one (``xla_argument_bytes``, ``xla_temp_bytes``, ...).
  """
  rng = np.random.default_rng(0)
  entries = []
  for configs, mode in groups:
    mesh = replicas.make_mesh(len(configs), 1)
    group = make_group(apply, base_params, configs, opt_cfg, steps, mesh, mode=mode)
    base = place_base(base_params, mesh)
    tokens = replicas.put_workers(rng.integers(
        0, vocab_size, (group.num_slots, steps, batch_size, seq_len + 1)).astype(np.int32),
        mesh)
    state = group.init_state()
    t = time.perf_counter()
    compiled = group.train.lower(state, base, tokens, np.int32(steps)).compile()
    compile_s = time.perf_counter() - t
    state = jax.block_until_ready(compiled(state, base, tokens, np.int32(1)))
    out = {"slots": group.num_slots, "rank": group.rank, "targets": list(group.targets),
           "mode": mode, "compile_s": compile_s, "step_s": math.inf}
    try:
      mem = compiled.memory_analysis()
      out.update(xla_argument_bytes=int(mem.argument_size_in_bytes),
                 xla_output_bytes=int(mem.output_size_in_bytes),
                 xla_temp_bytes=int(mem.temp_size_in_bytes))
    except Exception:  # not every backend reports it
      pass
    entries.append(dict(compiled=compiled, state=state, base=base, tokens=tokens,
                        calls=None, out=out))

  def call(e, k):
    w, c = time.perf_counter(), time.process_time()
    for _ in range(k):
      e["state"] = e["compiled"](e["state"], e["base"], e["tokens"], np.int32(steps))
    jax.block_until_ready(e["state"])
    return (time.perf_counter() - w) / (k * steps), (time.process_time() - c) / (k * steps)

  for e in entries:  # size each call from a first one
    e["calls"] = max(1, math.ceil(min_seconds / (call(e, 1)[0] * steps)))
  for _ in range(rounds):
    for e in entries:
      wall, cpu = call(e, e["calls"])
      if wall < e["out"]["step_s"]:
        e["out"].update(step_s=wall, cpu_step_s=cpu)
  return [e["out"] for e in entries]


def time_group_step(apply: Callable, base_params: Any, configs: Sequence[LoraConfig],
                    *, mode: str = "factored", **kwargs) -> dict:
  """:func:`time_groups` of one group."""
  return time_groups(apply, base_params, [(configs, mode)], **kwargs)[0]


def measure_cost_model(apply: Callable, base_params: Any, memory: MemoryModel, *,
                       opt_cfg: Any, ranks: tuple[int, int], slots: int,
                       targets: Iterable[str] = ("all",), steps: int = 5,
                       rounds: int = 3, vocab_size: int = 256) -> tuple[CostModel, list]:
  """Fits :class:`CostModel` on one device from timed groups.

  Times groups of ``1, 2, 4, ..., slots`` slots at rank ``lo`` (the step-time
  table) and one of ``slots`` slots at rank ``hi`` (the parameter slope
  ``c_p = (t(slots, hi) - t(slots, lo)) / (slots (p_hi - p_lo))``, clamped at 0:
  timing noise can make a tiny slope negative). ``compile_s`` is the mean
  compile time. Returns ``(cost_model, measurements)``, the measurements in
  that order (the rank-``hi`` one last).
  """
  lo, hi = ranks
  if slots < 1 or hi <= lo:
    raise ValueError(f"need slots >= 1 and ranks lo < hi, got {slots}, {ranks}")
  targets = lora.resolve_targets(targets)
  counts = sorted({min(2 ** i, slots) for i in range(int(math.log2(slots)) + 2)})
  mk = lambda n, r: [LoraConfig(f"cal{i}", r, float(r), 1e-3, targets, i) for i in range(n)]
  runs = time_groups(apply, base_params,
                     [(mk(n, lo), "factored") for n in counts] + [(mk(slots, hi), "factored")],
                     opt_cfg=opt_cfg, batch_size=memory.batch_size, seq_len=memory.seq_len,
                     steps=steps, rounds=rounds, vocab_size=vocab_size)
  p_lo, p_hi = memory.adapter_params(lo, targets), memory.adapter_params(hi, targets)
  per_param = max((runs[-1]["step_s"] - runs[-2]["step_s"]) / (slots * (p_hi - p_lo)), 0.0)
  compile_s = float(np.mean([r["compile_s"] for r in runs]))
  cost = CostModel(tuple(counts), tuple(r["step_s"] for r in runs[:-1]), p_lo, per_param,
                   compile_s)
  return cost, runs


# ----------------------------------------------------------------------------
# Planner.


class PlannedGroup(NamedTuple):
  """One group of a plan: its jobs, padded shape, memory per device and time."""
  configs: tuple[LoraConfig, ...]
  rank: int
  targets: tuple[str, ...]
  slots_per_device: int
  memory_bytes: float
  step_s: float
  time_s: float


class Plan(NamedTuple):
  """Groups to run one after another, with estimates.

  Attributes:
    groups: the groups, longest first.
    makespan_s: estimated time of the whole sweep (sum of group times).
    sequential_s: estimated time of running every job alone, one after another.
    budget_bytes, num_devices, steps: the planning inputs.
  """
  groups: tuple[PlannedGroup, ...]
  makespan_s: float
  sequential_s: float
  budget_bytes: float
  num_devices: int
  steps: int

  def describe(self) -> str:
    """The plan as a printable table."""
    n = sum(len(g.configs) for g in self.groups)
    lines = [f"PLoRA plan: {n} configs in {len(self.groups)} group(s) on "
             f"{self.num_devices} device(s), {self.steps} steps, budget "
             f"{self.budget_bytes / _MIB:.1f} MiB/device",
             f"{'group':>5}  {'rank':>4}  {'slots/dev':>9}  {'memory/dev':>11}  "
             f"{'step':>8}  {'time':>8}  targets / configs"]
    for i, g in enumerate(self.groups):
      lines.append(f"{i + 1:>5}  {g.rank:>4}  {g.slots_per_device:>9}  "
                   f"{g.memory_bytes / _MIB:>7.1f} MiB  {g.step_s * 1e3:>6.1f}ms  "
                   f"{g.time_s:>7.1f}s  {'+'.join(g.targets)}: "
                   + ", ".join(c.name for c in g.configs))
    ratio = self.sequential_s / self.makespan_s if self.makespan_s else float("nan")
    lines.append(f"estimated makespan {self.makespan_s:.1f}s; one after another "
                 f"{self.sequential_s:.1f}s ({ratio:.2f}x)")
    return "\n".join(lines)


def _group_estimate(configs, memory: MemoryModel, cost: CostModel, steps: int,
                    num_devices: int) -> PlannedGroup:
  rank = max(c.rank for c in configs)
  targets = union_targets(configs)
  slots = -(-len(configs) // num_devices)
  p = memory.adapter_params(rank, targets)
  step_s = cost.step_seconds(slots, p)
  return PlannedGroup(tuple(configs), rank, targets, slots,
                      memory.group_bytes(slots, rank, targets), step_s,
                      cost.group_seconds(steps, slots, p))


def plan(configs: Sequence[LoraConfig], memory: MemoryModel, cost: CostModel, *,
         budget_bytes: float, steps: int, num_devices: int = 1,
         mixed_ranks: str = "pad") -> Plan:
  """Packs ``configs`` into groups that fit ``budget_bytes`` per device, least makespan.

  Args:
    configs: the jobs (unique names).
    memory: per-device memory model.
    cost: measured time model.
    budget_bytes: memory budget of one device.
    steps: training steps of every job.
    num_devices: devices each group's adapter axis is split over.
    mixed_ranks: ``'pad'`` (a group may mix ranks, padded to its largest) or
      ``'group'`` (only equal ranks share a group).

  Raises:
    ValueError: bad arguments, or a config that does not fit on a device even
      alone (the message names it and its memory).
  """
  configs = _check_configs(configs)
  if mixed_ranks not in MIXED_RANKS:
    raise ValueError(f"unknown mixed_ranks {mixed_ranks!r}; choose from {MIXED_RANKS}")
  if num_devices < 1 or steps < 1 or not budget_bytes > 0:
    raise ValueError("num_devices and steps must be >= 1 and budget_bytes > 0, got "
                     f"{num_devices}, {steps}, {budget_bytes}")
  for c in configs:
    need = memory.group_bytes(1, c.rank, c.targets)
    if need > budget_bytes:
      raise ValueError(
          f"LoRA config {c.name!r} (rank {c.rank}, targets {'+'.join(c.targets)}) "
          f"cannot fit on any device: alone it needs {need / _MIB:.1f} MiB "
          f"(base {memory.base_bytes() / _MIB:.1f} MiB + adapter "
          f"{memory.slot_bytes(c.rank, c.targets) / _MIB:.1f} MiB), budget "
          f"{budget_bytes / _MIB:.1f} MiB per device")

  order = sorted(configs, key=lambda c: (-c.rank, c.targets, c.name))
  n = len(order)
  # best[i]: least total time of the first i configs; cut[i]: start of the last group.
  best = [0.0] + [math.inf] * n
  cut = [0] * (n + 1)
  for i in range(1, n + 1):
    for j in range(i - 1, -1, -1):
      seg = order[j:i]
      if mixed_ranks == "group" and seg[0].rank != seg[-1].rank:
        break  # sorted by rank: extending further left only adds other ranks
      g = _group_estimate(seg, memory, cost, steps, num_devices)
      if g.memory_bytes > budget_bytes:
        # Extending left only adds slots, larger ranks and more targets.
        break
      total = best[j] + g.time_s
      # Ties go to fewer groups (larger j was tried first, so '<' keeps it).
      if total < best[i] - 1e-12:
        best[i], cut[i] = total, j
  groups, i = [], n
  while i > 0:
    groups.append(_group_estimate(order[cut[i]:i], memory, cost, steps, num_devices))
    i = cut[i]
  groups.sort(key=lambda g: -g.time_s)
  sequential = sum(cost.group_seconds(steps, 1, memory.adapter_params(c.rank, c.targets))
                   for c in configs)
  return Plan(tuple(groups), float(sum(g.time_s for g in groups)), float(sequential),
              float(budget_bytes), num_devices, steps)


def fixed_plan(groups: Sequence[Sequence[LoraConfig]], memory: MemoryModel, cost: CostModel,
               *, steps: int, num_devices: int = 1, budget_bytes: float = math.inf) -> Plan:
  """A plan of the given groups, in the given order, with the models' estimates."""
  planned = tuple(_group_estimate(_check_configs(g), memory, cost, steps, num_devices)
                  for g in groups)
  _check_configs([c for g in planned for c in g.configs])
  sequential = sum(cost.group_seconds(steps, 1, memory.adapter_params(c.rank, c.targets))
                   for g in planned for c in g.configs)
  return Plan(planned, float(sum(g.time_s for g in planned)), float(sequential),
              float(budget_bytes), num_devices, steps)


def sequential_plan(configs: Sequence[LoraConfig], memory: MemoryModel,
                    cost: CostModel, *, steps: int) -> Plan:
  """The baseline: every job alone on one device, one after another, in order."""
  return fixed_plan([[c] for c in _check_configs(configs)], memory, cost, steps=steps)
