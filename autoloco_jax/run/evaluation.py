"""Evaluation during and at the end of training: the loss of the models a run
evaluates, over a fixed ``eval_sets.EvalSet`` of validation windows.

The loss is the weighted mean ``sum_t w_t l_t / sum_t w_t`` over the set's
targets (``autoloco_jax/data/eval_sets.py``): during training a fixed sample spread
over the split, at the end the whole split, every target once.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax.data import eval_sets
from autoloco_jax.runtime import layout as layout_lib, replicas


class EvalBatches(NamedTuple):
  """An ``EvalSet`` placed on the mesh (replicated), with its host-side record.

  Attributes:
    tokens_NxBxL1: the windows, replicated on the mesh.
    weights_NxBxL: their target weights, replicated on the mesh.
    host: the ``EvalSet`` itself (documents, sizes), on the host.
  """

  tokens_NxBxL1: jax.Array
  weights_NxBxL: jax.Array
  host: eval_sets.EvalSet


def place(eval_set: eval_sets.EvalSet, mesh) -> EvalBatches:
  """``eval_set``'s windows and weights replicated on ``mesh``."""
  return EvalBatches(
      replicas.put_replicated(eval_set.tokens_NxBxL1, mesh),
      replicas.put_replicated(eval_set.weights_NxBxL, mesh),
      eval_set,
  )


def size_record(eval_set: eval_sets.EvalSet, prefix: str = "eval") -> dict:
  """The fields that say what an evaluation measured: its targets and the
  bytes they stand for."""
  return {f"{prefix}_tokens": eval_set.num_tokens, f"{prefix}_bytes": eval_set.num_bytes}


def make_evaluate(token_losses_fn, mesh, algo):
  """Returns ``(evaluate, evaluate_tokens)`` over ``EvalBatches``.

  ``evaluate(state, batches) -> {name: weighted mean loss}`` and
  ``evaluate_tokens(state, batches) -> {name: weighted losses [N, B, L]}``
  evaluate worker 0's parameters (the global model after a sync) under the
  name ``''`` or, for decentralized algorithms, each model of
  ``algo.eval_params`` (``mean``, the replicas' mean, and ``replica``, replica
  0). ``token_losses_fn(params, tokens_BxL1) -> [B, L]`` is the per-target
  loss (``model.token_losses``). Results are replicated so every process can
  read them (the models too, split over the model axes of ``mesh``, a
  ``layout.Layout``, like the parameters), and returned on device, not read: the caller may dispatch the
  next round (donating ``state``) before it reads them.
  """
  layout = layout_lib.as_layout(mesh)
  replicated = jax.sharding.NamedSharding(layout.mesh, replicas.REPLICATED)

  def weighted(params, tokens_NxBxL1, weights_NxBxL):
    losses = jax.lax.map(functools.partial(token_losses_fn, params), tokens_NxBxL1)
    return losses * weights_NxBxL

  @functools.partial(jax.jit, out_shardings=replicated)
  def mean_loss(params, tokens_NxBxL1, weights_NxBxL):
    total = jnp.sum(weighted(params, tokens_NxBxL1, weights_NxBxL))
    return total / jnp.sum(weights_NxBxL)

  token_losses = jax.jit(weighted, out_shardings=replicated)
  worker0 = layout.jit_models(lambda params_K: jax.tree.map(lambda x: x[0], params_K))

  def models(state):
    if algo.eval_params is None:
      return {"": worker0(state.params_K)}
    return algo.eval_params(state)

  def evaluate(state, batches: EvalBatches):
    args = (batches.tokens_NxBxL1, batches.weights_NxBxL)
    return {name: mean_loss(p, *args) for name, p in models(state).items()}

  def evaluate_tokens(state, batches: EvalBatches):
    args = (batches.tokens_NxBxL1, batches.weights_NxBxL)
    return {name: token_losses(p, *args) for name, p in models(state).items()}

  return evaluate, evaluate_tokens


def main_loss(losses: dict):
  """The run's headline loss among ``evaluate``'s: the global model's (``''``)
  or, for decentralized algorithms, the replicas' mean (``mean``)."""
  return losses.get("", losses.get("mean"))


def final_report(
    losses: dict, eval_set: eval_sets.EvalSet, num_docs: int
) -> tuple[dict, dict]:
  """``(means, documents)`` from ``evaluate_tokens``' read losses: each model's
  mean loss over the set (float64 sums), and each model's per-document
  ``tokens`` and ``loss_sum`` lists (``eval_sets.per_document``)."""
  means, documents = {}, {}
  for name, losses_NxBxL in losses.items():
    tokens_D, loss_sum_D = eval_sets.per_document(np.asarray(losses_NxBxL), eval_set, num_docs)
    means[name] = float(loss_sum_D.sum() / tokens_D.sum())
    documents[name] = dict(tokens=tokens_D.tolist(), loss_sum=loss_sum_D.tolist())
  return means, documents
