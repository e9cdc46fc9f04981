"""Evaluation during and at the end of training: the mean loss of the models a
run evaluates, over fixed validation batches."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from autoloco_jax import replicas


def make_evaluate(loss_fn, mesh, algo):
  """``state -> {name: mean loss}`` over fixed validation batches: worker 0's
  parameters (the global model after a sync) under the name ``''`` or, for
  decentralized algorithms, each model of ``algo.eval_params`` (``mean``, the
  replicas' mean, and ``replica``, replica 0). Losses are replicated so every
  process can read them, and returned on device, not read: the caller may
  dispatch the next round (donating ``state``) before it reads them with
  ``float``."""
  replicated = jax.sharding.NamedSharding(mesh, replicas.REPLICATED)

  @functools.partial(jax.jit, out_shardings=replicated)
  def loss(params, tokens_NxBxL1):
    return jnp.mean(jax.lax.map(functools.partial(loss_fn, params), tokens_NxBxL1))

  worker0 = jax.jit(
      lambda params_K: jax.tree.map(lambda x: x[0], params_K), out_shardings=replicated
  )

  def evaluate(state, tokens_NxBxL1):
    models = (
        {"": worker0(state.params_K)}
        if algo.eval_params is None
        else algo.eval_params(state)
    )
    return {name: loss(p, tokens_NxBxL1) for name, p in models.items()}

  return evaluate
