"""The rows: ``unit(steps)`` runs ``steps`` inner steps in the row's own rounds
and blocks until the last round's metrics are on the host.

Every row that trains on the replica axis runs its rounds through
``autoloco_jax.runtime.rounds`` (the trainer's round driver): the same chunked staging,
inner loop and sync as ``trainer.py``. The reference runs its own one-model loop
through ``rounds.run_steps``; the naive per-worker loop stages its batches the
same way and keeps its Python loop over workers, the thing being compared.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import NamedSharding

from autoloco_jax import outer
from autoloco_jax.algorithms import registry
from autoloco_jax.runtime import inner, jitting, replicas, rounds, state as state_lib
from benchmarks.throughput.workload import Model, Reader
from benchmarks.unit_server import Served


class Unsupported(Exception):
  """A row that cannot run by design: its algorithm refuses the config (the
  ``ValueError`` of ``registry.make``, e.g. workers that do not split over the
  devices). Reported as skipped with this reason; any other exception in a row
  is a crash and fails the benchmark."""


class Runner:
  """A row of the throughput table."""

  name: str
  h: int  # inner steps per round
  tokens_per_step: int  # K · B · L
  flops_per_token: float
  compile_seconds: float = float("nan")
  donation_warnings: tuple = ()

  def __init__(self, name: str, config: Any, model: Model, data):
    self.name, self.config, self.data = name, config, data
    self.batch = config.data.batch_size
    self.read = Reader(data, self.batch)
    self.tokens_per_step = config.num_workers * self.batch * config.data.seq_len
    self.flops_per_token = model.flops_per_token
    self.h = int(config.interval.h)
    self.hs: list[int] = []  # the H of every round run

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
  """An algorithm of ``registry.make``, driven like ``trainer.py``'s loop: one
  ``rounds.run_round`` per round, then the round's one host read."""

  def __init__(self, name: str, config: Any, model: Model, mesh, data, algo=None):
    super().__init__(name, config, model, data)
    self.mesh = mesh
    try:
      self.algo = algo or registry.make(config, model.loss_fn, mesh)
    except ValueError as e:
      raise Unsupported(f"ValueError: {e}") from e
    # A copy of the shared (cached) parameters: on a multi-device mesh
    # ``device_put(..., may_alias=False)`` of a replicated leaf still reuses the
    # source's buffer on its device, so donating this state would delete them.
    params = jax.tree.map(lambda x: x.copy(), model.params)
    self.state = state_lib.place(self.algo.init_state(params), mesh)
    self.chunk = rounds.chunk_size(config.chunk_steps, self.algo.max_round_steps)
    self.donated = None

  def round(self, h: int) -> None:
    old = self.state
    # A device-to-host read inside a round would stall the pipeline: forbid it.
    with jax.transfer_guard_device_to_host("disallow"):
      self.state, metrics = rounds.run_round(
          self.algo, self.state, self.read, h, self.chunk, self.mesh
      )
    if self.donated is None:
      self.donated = all(x.is_deleted() for x in jax.tree.leaves(old))
    jax.device_get(metrics)  # the round's one host read, as in trainer.py
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.algo.inner._cache_size(), sync=self.algo.sync._cache_size())

  def memory(self) -> dict:
    """XLA's buffer sizes of the compiled round functions (a cache hit)."""
    out = {}
    K, L1 = self.config.num_workers, self.config.data.seq_len + 1
    tokens = rounds.stage(
        np.zeros((K, 1, self.batch, L1), np.int32), self.chunk, self.mesh
    )
    present_K = replicas.put_workers(np.ones(K, np.float32), self.mesh)
    for name, fn, args in (
        ("inner", self.algo.inner, (self.state, tokens, np.int32(1))),
        ("sync", self.algo.sync, (self.state, present_K)),
    ):
      try:
        m = fn.lower(*args).compile().memory_analysis()
        out[name] = dict(
            argument=m.argument_size_in_bytes,
            output=m.output_size_in_bytes,
            alias=m.alias_size_in_bytes,
            temp=m.temp_size_in_bytes,
            peak_estimate=(
                m.argument_size_in_bytes
                + m.output_size_in_bytes
                - m.alias_size_in_bytes
                + m.temp_size_in_bytes
            ),
        )
      except Exception as e:  # noqa: BLE001 -- optional on some backends
        out[name] = dict(error=f"{type(e).__name__}: {e}")
    out["state_bytes"] = int(sum(x.nbytes for x in jax.tree.leaves(self.state)))
    return out

  def with_inner(self, name: str, inner_fn: Callable, model: Model) -> "AlgoRunner":
    """The same algorithm, config, mesh and data with another jitted inner loop."""
    return AlgoRunner(
        name,
        self.config,
        model,
        self.mesh,
        self.data,
        algo=dataclasses.replace(self.algo, inner=inner_fn),
    )


class RemoteRow:
  """A row timed in another process, one unit per command
  (``benchmarks/unit_server.py``): the PyTorch rows. Bracketed here like any
  row; its own process's measurements come from that process."""

  donation_warnings: tuple = ()

  def __init__(
      self,
      name: str,
      served: Served,
      h: int,
      tokens_per_step: int,
      flops_per_token: float,
      compile_seconds: float = float("nan"),
  ):
    self.name, self.served, self.h = name, served, h
    self.tokens_per_step, self.flops_per_token = tokens_per_step, flops_per_token
    self.compile_seconds = compile_seconds

  def unit(self, steps: int, round_h: int = 0) -> None:
    self.served.unit(self.name, steps, round_h)


class RefCarry(NamedTuple):
  params: Any
  opt: Any
  loss_sum: jax.Array


def _reference_loop(loss_fn: Callable, tx: optax.GradientTransformation) -> Callable:
  """``(carry, tokens_KxCxBxL1, num_steps) -> carry``: ``num_steps`` steps of one
  model on the global batch (the K workers' batches of a step together)."""

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
        lambda c: c[0] < num_steps, body, (jnp.zeros((), jnp.int32),) + tuple(carry)
    )
    return RefCarry(params, opt, loss_sum)

  return run


class ReferenceRunner(Runner):
  """One model, the inner optimizer, global batch ``K × B``: the inner loop's
  structure (``while_loop`` with a traced count over the same staged buffer,
  the loss summed on device, one host read per round) without the replica axis.

  On ``devices > 1`` devices (row ``reference@N``) the global batch is split
  data-parallel over them: the workers' batches staged on a mesh of that many
  devices, the carry replicated on it, GSPMD partitions the step (gradients
  all-reduced). It is the reference of the ``<algorithm>@N`` rows: the same
  devices, without the replica axis."""

  def __init__(self, config: Any, model: Model, data, devices: int = 1):
    name = "reference" if devices == 1 else f"reference@{devices}"
    super().__init__(name, config, model, data)
    self.devices = devices
    self.mesh = replicas.make_mesh(config.num_workers, devices)
    self.chunk = rounds.chunk_size(config.chunk_steps, self.h)
    tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
    self.run = _reference_loop(model.loss_fn, tx)
    # A copy of the shared parameters, as in ``AlgoRunner`` (donation on a
    # multi-device mesh would delete the cached ones).
    params = jax.tree.map(lambda x: x.copy(), model.params)
    carry = RefCarry(params, tx.init(params), jnp.zeros((), jnp.float32))
    self.carry = jax.device_put(
        carry, NamedSharding(self.mesh, replicas.REPLICATED), may_alias=False
    )

  def round(self, h: int) -> None:
    with jax.transfer_guard_device_to_host("disallow"):
      self.carry = rounds.run_steps(
          self.run, self.carry, self.read, h, self.chunk, self.mesh
      )
    jax.device_get(self.carry.loss_sum)
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.run._cache_size())


class NaiveState(NamedTuple):
  params: list
  opt: list
  loss: list


class NaiveRunner(Runner):
  """What the replica axis replaces: DiLoCo as a Python loop over workers, one
  jitted (donated) AdamW step per worker per inner step, then a jitted mean of
  the K parameter trees and the outer Nesterov step.

  Its batches are staged like every other row's (``rounds.run_steps``, chunks of
  ``C``); each worker's step reads its batch ``[k, i]`` of the staged chunk."""

  def __init__(self, config: Any, model: Model, data):
    super().__init__("naive", config, model, data)
    self.K = config.num_workers
    self.device = jax.devices()[0]
    self.mesh = replicas.make_mesh(config.num_workers, 1, devices=[self.device])
    self.chunk = rounds.chunk_size(config.chunk_steps, self.h)
    tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
    outer_tx = outer.diloco(config.diloco.alpha, config.diloco.beta)
    self.step, self.sync = _naive_step(model.loss_fn, tx), _naive_sync(outer_tx)
    self.anchor = self._copy(model.params)
    self.outer_opt = self._copy(outer_tx.init(model.params))
    self.workers = NaiveState(
        [self._copy(model.params) for _ in range(self.K)],
        [self._copy(tx.init(model.params)) for _ in range(self.K)],
        [self._copy(jnp.zeros((), jnp.float32)) for _ in range(self.K)],
    )

  def _copy(self, tree):
    return jax.device_put(tree, self.device, may_alias=False)

  def _steps(self, w: NaiveState, tokens_KxCxBxL1, num_steps) -> NaiveState:
    """``num_steps`` inner steps of the staged chunk: a Python loop over steps
    and workers, one jitted step each."""
    for i in range(int(num_steps)):
      for k in range(self.K):
        w.params[k], w.opt[k], w.loss[k] = self.step(
            w.params[k], w.opt[k], w.loss[k], tokens_KxCxBxL1, np.int32(k), np.int32(i)
        )
    return w

  def round(self, h: int) -> None:
    w = rounds.run_steps(self._steps, self.workers, self.read, h, self.chunk, self.mesh)
    self.anchor, self.outer_opt = self.sync(self.anchor, self.outer_opt, w.params)
    self.workers = w._replace(params=[self._copy(self.anchor) for _ in range(self.K)])
    jax.device_get(w.loss)
    self.hs.append(h)

  def compiles(self) -> dict:
    return dict(inner=self.step._cache_size(), sync=self.sync._cache_size())


def _naive_step(loss_fn: Callable, tx: optax.GradientTransformation) -> Callable:
  """One worker's jitted, donated step on batch ``[k, i]`` of a staged chunk."""

  @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
  def step(params, opt, loss_sum, tokens_KxCxBxL1, k, i):
    tokens_BxL1 = tokens_KxCxBxL1[k, i]
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens_BxL1)
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt, loss_sum + loss

  return step


def _naive_sync(outer_tx: optax.GradientTransformation) -> Callable:
  """The mean of the K parameter trees and the outer step on the anchor."""

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def sync(anchor, outer_opt, params_list):
    mean = jax.tree.map(lambda *xs: sum(xs) / len(xs), *params_list)
    delta = jax.tree.map(jnp.subtract, anchor, mean)
    updates, outer_opt = outer_tx.update(delta, outer_opt, anchor)
    return optax.apply_updates(anchor, updates), outer_opt

  return sync


def scan_inner_loop(
    loss_fn: Callable, tx: optax.GradientTransformation, lr_schedule: optax.Schedule
) -> Callable:
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
          steps=acc.steps + 1,
          lr_sum=acc.lr_sum + lr_schedule(step0 + i),
          loss_sum_K=acc.loss_sum_K + loss_K,
          loss_first_K=jnp.where(acc.steps == 0, loss_K, acc.loss_first_K),
          loss_last_K=loss_K,
          grad_norm_sum_K=acc.grad_norm_sum_K + grad_norm_K,
      )
      return optax.apply_updates(params_K, updates_K), opt_K, acc

    def body(carry, i):
      return lax.cond(i < num_steps, step, lambda c, _: c, carry, i), None

    steps = jnp.arange(tokens_KxCxBxL1.shape[1], dtype=jnp.int32)
    (params_K, opt_K, acc), _ = lax.scan(body, (params_K, opt_K, acc), steps)
    return params_K, opt_K, acc

  return run


def scan_inner(runner: AlgoRunner, model: Model) -> Callable:
  """``scan_inner_loop`` of ``runner``'s config, jitted over its mesh like
  ``Algorithm.inner``."""
  config = runner.config
  sched = inner.schedule(config.inner, config.total_steps)
  return jitting.jit_inner(
      scan_inner_loop(model.loss_fn, inner.optimizer(config.inner, sched), sched),
      runner.mesh,
  )
