"""PLoRA packed groups: many LoRA jobs trained as one program on a frozen base.

Here the jobs of a **group** are a leading adapter axis ``N``, exactly like the
replica axis (:mod:`autoloco_jax.runtime.replicas`): the axis is split over the mesh's
devices and each device trains its block of adapters with ``vmap``, reusing the
project's inner loop (:func:`autoloco_jax.runtime.inner.make_inner_loop`) unchanged and
staging its data through the project's round driver
(:func:`autoloco_jax.runtime.rounds.run_steps`). Inside the block,

* the base weights are one shared, replicated copy: ``vmap`` over adapters
  turns every base matmul ``x W`` into one GEMM over all adapters' tokens;
* every adapter has its own data stream, its own AdamW state, its own learning
  rate (updates scaled per adapter, :func:`jobs.adapter_optimizer`) and its own
  ``alpha / r``;
* ranks and target layers may differ: adapters are zero-padded to the group's
  largest rank and to the union of its targets, with masks that make each one
  exactly the lone adapter (:mod:`lora`), optimizer trajectory included.

So a packed run gives each adapter the trajectory it would have alone, up to
float summation order (``tests/test_plora.py``). Groups of a plan
run one after another (:func:`planner.run_plan`).
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import inner, replicas, rounds
from projects.plora import lora
from projects.plora.jobs import (
    LoraConfig,
    _check_configs,
    _opt_key,
    adapter_optimizer,
    union_targets,
)

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
  shardings = jax.tree.map(
      lambda s: NamedSharding(mesh, P() if one else s),
      specs,
      is_leaf=lambda x: isinstance(x, P),
  )
  return jax.device_put(tree, shardings, may_alias=False)


def place_base(base_params: Any, mesh: Mesh) -> Any:
  """The frozen base params replicated on every device of ``mesh``."""
  return replicas.put_replicated(base_params, mesh)


def _slot_loss(
    apply: Callable, base: Any, mode: str, params: Any, tokens_BxL1: jax.Array
) -> jax.Array:
  frozen = jax.lax.stop_gradient(params["frozen"])
  adapter = lora.Adapter(params["factors"], frozen["mask"], frozen["scale"])
  adapted = lambda a, x: lora.lora_apply(apply, base, a, x, mode=mode)
  return model_lib.loss_fn(adapted, adapter, tokens_BxL1)


@functools.lru_cache(maxsize=32)
def _programs(
    apply: Callable,
    opt_key: tuple,
    total_steps: int,
    mode: str,
    mesh: Mesh,
    layers: tuple,
    rank: int,
) -> tuple[Callable, Callable, Callable]:
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
    return GroupState(
        params_N,
        jax.vmap(tx.init)(params_N),
        inner.RoundAcc.zeros(jax.tree.leaves(params_N)[0].shape[0]),
        jnp.zeros((), jnp.int32),
    )

  def train_block(state: GroupState, base, tokens_NxCxBxL1, num_steps):
    loss = functools.partial(_slot_loss, apply, base, mode)
    run = inner.make_inner_loop(loss, tx, schedule)
    params_N, opt_N, acc = run(
        state.params_N, state.opt_N, state.acc, tokens_NxCxBxL1, num_steps, state.step
    )
    return GroupState(params_N, opt_N, acc, state.step + num_steps)

  @functools.partial(jax.jit, donate_argnums=0)
  def train(state, base, tokens_NxCxBxL1, num_steps):
    return replicas.map_workers(
        train_block, mesh, in_specs=(specs, r, w, r), out_specs=specs
    )(state, base, tokens_NxCxBxL1, num_steps)

  def eval_block(params_N, base, tokens_MxBxL1):
    def one(params):
      loss = functools.partial(_slot_loss, apply, base, mode, params)
      return jnp.mean(jax.lax.map(loss, tokens_MxBxL1))

    return jax.vmap(one)(params_N)

  @jax.jit
  def evaluate(state, base, tokens_MxBxL1):
    return replicas.map_workers(eval_block, mesh, in_specs=(w, r, r), out_specs=w)(
        state.params_N, base, tokens_MxBxL1
    )

  return build_state, train, evaluate


def make_group(
    apply: Callable,
    base_params: Any,
    configs: Sequence[LoraConfig],
    opt_cfg: Any,
    total_steps: int,
    mesh: Mesh,
    *,
    rank: int | None = None,
    targets: Iterable[str] | None = None,
    mode: str = "factored",
) -> Group:
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
    raise ValueError(
        f"group targets {list(group_targets)} miss some of the configs' "
        f"targets {list(union)}"
    )
  devices = mesh.devices.size
  num_slots = -(-len(configs) // devices) * devices
  layers = lora.dense_layers(base_params, group_targets)
  build_state, train, evaluate = _programs(
      apply,
      _opt_key(opt_cfg),
      int(total_steps),
      mode,
      mesh,
      tuple(sorted(layers.items())),
      rank,
  )

  slots = []
  for c in configs:
    a = lora.init(
        c.seed,
        base_params,
        c.rank,
        c.alpha,
        c.targets,
        pad_rank=rank,
        pad_targets=group_targets,
    )
    slots.append(
        {
            "factors": a.factors,
            "frozen": {"mask": a.mask, "scale": a.scale, "lr": np.float32(c.lr)},
        }
    )
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
      out[c.name] = lora.compact(
          lora.Adapter(p["factors"], p["frozen"]["mask"], p["frozen"]["scale"])
      )
    return out

  return Group(
      configs, rank, group_targets, num_slots, mesh, init_state, train, evaluate, adapters
  )


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


def _check_run(
    configs: Sequence[LoraConfig],
    streams: Mapping[str, Any],
    chunk_steps: int,
    total_steps: int,
    batch_size: int,
) -> None:
  """Every job has a data stream and the step counts are positive."""
  missing = [c.name for c in configs if c.name not in streams]
  if missing:
    raise ValueError(f"no data stream for configs {missing}")
  if chunk_steps < 1 or total_steps < 1 or batch_size < 1:
    raise ValueError(
        "chunk_steps, total_steps and batch_size must be >= 1, got "
        f"{chunk_steps}, {total_steps}, {batch_size}"
    )


def _reader(
    configs: Sequence[LoraConfig],
    streams: Mapping[str, Any],
    num_slots: int,
    batch_size: int,
) -> Callable[[int], np.ndarray]:
  """``read(num_steps)``: the next batches of every job, each from its own stream
  (read from position 0); filler slots read zeros."""
  positions = {c.name: np.zeros(1, np.int64) for c in configs}

  def read(num_steps: int) -> np.ndarray:
    rows = []
    for c in configs:
      tokens_1xHxBxL1, positions[c.name] = streams[c.name].train_batches(
          positions[c.name], num_steps, batch_size
      )
      rows.append(tokens_1xHxBxL1[0])
    tokens_NxHxBxL1 = np.zeros((num_slots, num_steps) + rows[0].shape[1:], np.int32)
    tokens_NxHxBxL1[: len(rows)] = np.stack(rows)
    return tokens_NxHxBxL1

  return read


def run_group(
    apply: Callable,
    base_params: Any,
    configs: Sequence[LoraConfig],
    streams: Mapping[str, Any],
    *,
    opt_cfg: Any,
    total_steps: int,
    batch_size: int,
    chunk_steps: int = 32,
    num_devices: int = 1,
    eval_tokens_MxBxL1: np.ndarray | None = None,
    rank: int | None = None,
    targets: Iterable[str] | None = None,
    mode: str = "factored",
) -> GroupResult:
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
  _check_run(configs, streams, chunk_steps, total_steps, batch_size)
  num_slots = -(-len(configs) // num_devices) * num_devices
  mesh = replicas.make_mesh(num_slots, num_devices)
  group = make_group(
      apply,
      base_params,
      configs,
      opt_cfg,
      total_steps,
      mesh,
      rank=rank,
      targets=targets,
      mode=mode,
  )
  base = place_base(base_params, mesh)
  state = group.init_state()
  chunk = rounds.chunk_size(chunk_steps, total_steps)
  read_next = _reader(configs, streams, num_slots, batch_size)

  # The first chunk is read before the clock starts; it compiles the program
  # and is the first one trained on.
  pending = [read_next(chunk)]
  first_NxCxBxL1 = pending[0]

  def read(num_steps: int) -> np.ndarray:
    return pending.pop() if pending else read_next(num_steps)

  t_compile = time.perf_counter()
  train = group.train.lower(
      state, base, rounds.stage(first_NxCxBxL1, chunk, mesh), np.int32(chunk)
  ).compile()
  compile_s = time.perf_counter() - t_compile

  t_train, cpu_train = time.perf_counter(), time.process_time()
  # Dispatch is asynchronous: the next chunk is staged while this one runs.
  state = rounds.run_steps(
      lambda s, tokens, n: train(s, base, tokens, n),
      state,
      read,
      total_steps,
      chunk,
      mesh,
  )
  acc = jax.device_get(state.acc)
  train_s = time.perf_counter() - t_train
  train_cpu_s = time.process_time() - cpu_train

  names = [c.name for c in configs]
  steps = float(acc.steps)
  final = {n: float(acc.loss_last_K[i]) for i, n in enumerate(names)}
  mean = {n: float(acc.loss_sum_K[i]) / steps for i, n in enumerate(names)}
  evals = {}
  if eval_tokens_MxBxL1 is not None:
    loss_N = jax.device_get(
        group.evaluate(
            state, base, replicas.put_replicated(jnp.asarray(eval_tokens_MxBxL1), mesh)
        )
    )
    evals = {n: float(loss_N[i]) for i, n in enumerate(names)}
  adapters = group.adapters(state)
  seq_len = first_NxCxBxL1.shape[-1] - 1
  return GroupResult(
      final,
      mean,
      evals,
      adapters,
      compile_s,
      train_s,
      train_cpu_s,
      time.perf_counter() - t0,
      len(configs) * total_steps * batch_size * seq_len,
  )


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


def evaluate_adapters(
    apply: Callable,
    base_params: Any,
    adapters: Mapping[str, lora.Adapter],
    tokens_MxBxL1: np.ndarray,
    *,
    mode: str = "factored",
) -> dict:
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
