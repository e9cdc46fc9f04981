"""A run assembled from its config: data, mesh, model, algorithm and the initial state.

``setup(config)`` is everything the trainer builds before its first round, and
what the tools that inspect a run (``trainer.load_run``, the memory and
checkpoint benchmarks) build to get the same shapes and shardings.
"""

from __future__ import annotations

import collections
import functools
import json
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import AbstractMesh, AxisType

from autoloco_jax.algorithms import registry
from autoloco_jax.data import corpus as data_lib
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import contract, layout as layout_lib, replicas, rounds
from autoloco_jax.runtime import state as state_lib


class Run(NamedTuple):
  """Everything built from a config before the first round.

  Attributes:
    data: every worker's data and the evaluation sets (``corpus.WorkerData``).
    mesh: the device mesh with its ``replica`` axis and model axes.
    layout: where the state's arrays live on the model axes (``layout.Layout``).
    model_cfg: the model's config, with the data's vocabulary and length.
    apply: the model's ``apply(params, tokens)``.
    loss_fn: ``loss_fn(params, tokens_BxL1) -> scalar`` for one worker.
    algo: the algorithm (``contract.Algorithm``).
    state: the initial state, placed on the mesh.
    num_params: parameters of one model.
    flops_per_token: the model's training FLOPs per token.
    chunk: ``C``, batches staged per inner call (``rounds.chunk_size``).
  """

  data: data_lib.WorkerData
  mesh: Any
  layout: layout_lib.Layout
  model_cfg: Any
  apply: Any
  loss_fn: Any
  algo: contract.Algorithm
  state: state_lib.TrainState
  num_params: int
  flops_per_token: float
  chunk: int


class Built(NamedTuple):
  """The jitted pieces of a run: what its config and mesh determine, not its
  seed (where the algorithm's build does not read it) or its data."""

  layout: layout_lib.Layout
  model_cfg: Any
  init: Any
  apply: Any
  loss_fn: Any
  algo: contract.Algorithm


#: The last few builds by :func:`build_key`: a sweep that trains several seeds of
#: one config in one process (``experiments.sweep``) traces and lowers its
#: programs once. Runs that share a build train bit for bit as with their own
#: (``tests/test_assembly.py``). A sweep trains seed by seed, each seed's labels
#: in turn, so a label's build is reused only if the cache holds every label of
#: the study: 16 covers the evidence and G2 report phases (10-11 labels). A
#: kept build holds its compiled programs, about 35 MB of host memory for DiLoCo
#: at the study size on CPU; reusing one saves about 7 s a run, of a 1,200-step
#: study run's 150 s (``benchmarks/build_reuse.py``, docs/performance.md §10).
_BUILT: collections.OrderedDict = collections.OrderedDict()
KEEP_BUILDS = 16
#: Builds made in this process (each a miss of the cache above): what a test or
#: benchmark reads to count them.
builds_made = 0


def build_key(config: Any, mesh: Any) -> tuple:
  """What a build depends on: the whole config but the seed (kept for algorithms
  whose ``build`` reads it, ``seeded_build``), and the mesh."""
  fields = json.loads(config.to_json_best_effort())
  seed = fields.pop("seed")
  seeded = registry.hyperparams_class(config.algorithm).seeded_build
  return json.dumps(fields, sort_keys=True), seed if seeded else None, mesh


def build(config: Any, mesh: Any, vocab_size: int) -> Built:
  """The model and the algorithm for ``config`` on ``mesh``: the one built for
  an equal :func:`build_key` if it is among the last :data:`KEEP_BUILDS`."""
  global builds_made
  key = build_key(config, mesh) + (vocab_size,)
  if key in _BUILT:
    _BUILT.move_to_end(key)
    return _BUILT[key]
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = vocab_size
    model_cfg.seq_len = config.data.seq_len
  init, apply = model_lib.make(model_cfg)
  loss_fn = functools.partial(model_lib.loss_fn, apply)
  layout = layout_lib.Layout.of(mesh, *model_lib.logical_specs(model_cfg))
  built = Built(layout, model_cfg, init, apply, loss_fn, registry.make(config, loss_fn, layout))
  builds_made += 1
  _BUILT[key] = built
  while len(_BUILT) > KEEP_BUILDS:
    _BUILT.popitem(last=False)
  return built


def forget_builds() -> None:
  """Drops every kept build (a test that patches a builder starts afresh)."""
  _BUILT.clear()


def make_mesh(config: Any) -> Any:
  """The run's ``replica × fsdp × tensor`` mesh (``config.num_devices``,
  ``config.mesh``)."""
  mesh_cfg = config.get("mesh", {})
  return replicas.make_mesh(
      config.num_workers,
      config.num_devices,
      fsdp=int(mesh_cfg.get("fsdp", 1)),
      tensor=int(mesh_cfg.get("tensor", 1)),
  )


def abstract_state(config: Any, built: Built) -> state_lib.TrainState:
  """The run's initial state as ``jax.ShapeDtypeStruct``s with the shardings
  :func:`setup` gives it (``state.place``): nothing is allocated, so a model
  of any size can be lowered and compiled (``benchmarks/aot.py``) or sized
  (``experiments.plan``)."""
  params = jax.eval_shape(built.init, jax.random.key(config.seed))
  return placed(jax.eval_shape(built.algo.init_state, params), built.layout)


def placed(shapes: state_lib.TrainState, layout: layout_lib.Layout) -> state_lib.TrainState:
  """A state's ``jax.ShapeDtypeStruct``s with the shardings ``layout`` gives
  them (``state.shardings``); ``layout`` may be of an abstract mesh."""
  shardings = state_lib.shardings(shapes, layout)
  return jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), shapes, shardings
  )


def state_bytes_per_device(state: Any) -> int:
  """Bytes of the state's shards on the most loaded device (every leaf's
  ``sharding.shard_shape``): the parameters, optimizer and outer state one
  device holds."""
  total = 0
  for x in jax.tree.leaves(state):
    total += math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize
  return int(total)


def planned_state_bytes(config: Any, algo: contract.Algorithm, params: Any) -> int:
  """Bytes of ``algo``'s run state on one device when each of the
  ``config.num_workers`` workers spans ``mesh.fsdp × mesh.tensor`` devices:
  the placement :func:`setup` would give it on an abstract ``replica ×
  fsdp × tensor`` mesh of one worker per replica row (nothing allocated;
  ``experiments.plan``'s ``GB/dev``)."""
  shape = (config.num_workers, config.mesh.fsdp, config.mesh.tensor)
  mesh = AbstractMesh(shape, replicas.AXES, axis_types=(AxisType.Auto,) * 3)
  layout = layout_lib.Layout.of(mesh, *model_lib.logical_specs(config.model))
  return state_bytes_per_device(placed(jax.eval_shape(algo.init_state, params), layout))


def setup(config: Any) -> Run:
  """Builds data, mesh, model, algorithm and the initial state (on the mesh)."""
  K = config.num_workers
  data = data_lib.build(config.data, K, config.seed)
  mesh = make_mesh(config)
  layout, model_cfg, init, apply, loss_fn, algo = build(config, mesh, data.vocab_size)
  params = init(jax.random.key(config.seed))
  num_params = model_lib.param_count(params)
  state = state_lib.place(algo.init_state(params), layout)
  return Run(
      data,
      mesh,
      layout,
      model_cfg,
      apply,
      loss_fn,
      algo,
      state,
      num_params,
      model_lib.flops_per_token(model_cfg, num_params),
      rounds.chunk_size(config.chunk_steps, algo.max_round_steps),
  )
