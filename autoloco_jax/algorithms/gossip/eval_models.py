"""The models a decentralized run evaluates: the replicas' mean and one replica.

Gossip methods keep one set of weights per worker and no global model, so a run
evaluates both (``Algorithm.eval_params``). Building them all-reduces the
parameters, which the simulated clock does not count.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from autoloco_jax.runtime.layout import Layout


def mean_and_replica(params_K: Any) -> dict:
  """The models a decentralized run evaluates: the replicas' mean and replica 0."""
  return {
      "mean": jax.tree.map(lambda x: jnp.mean(x, axis=0), params_K),
      "replica": jax.tree.map(lambda x: x[0], params_K),
  }


def make_eval_params(layout: Layout) -> Callable[[Any], dict]:
  """``state -> {"mean": ..., "replica": ...}``, jitted, the models replicated
  over the workers so every process can evaluate them
  (``Layout.jit_models``)."""
  return layout.jit_models(lambda state: mean_and_replica(state.params_K))
