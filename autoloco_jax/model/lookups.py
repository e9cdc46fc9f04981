r"""The model's two table lookups, written for the mesh they are traced on.

A step looks values up by token id twice: the embedding row of each input
token, ``x_n = E[t_n]``, and the logit of each target in the cross-entropy,
``ℓ_n = \log \sum_v e^{z_{n,v}} − z_{n, y_n}``. Both are gathers. XLA's SPMD
partitioner (jaxlib 0.10.2) cannot partition a gather whose operand is split
over both model axes under the manual replica axis: with ``mesh.fsdp > 1`` and
``mesh.tensor > 1`` it fails a check (``spmd_partitioner_util.cc``,
``ExpandDeviceGroupsWithIota``) and the process aborts. On such a mesh
(:func:`one_hot`) both lookups are written as products with one-hot rows,
which the partitioner splits like any matmul:

.. math::
  x_n = \mathrm{onehot}(t_n)^\top E, \qquad
  z_{n, y_n} = \sum_v z_{n,v}\, \mathrm{onehot}(y_n)_v .

The values are the same (one non-zero term per sum); the gradient of ``E``
sums a token's repeats in another order than the gather's scatter-add, and
``\log \sum e^z`` is ``jax.nn.logsumexp`` rather than optax's, so a run agrees
with the gather's to float rounding (``docs/mesh.md``). The embedding's
product costs ``2 N V D`` FLOPs forward and as much for its gradient, about
6% of a step of the 1B model (``V = 32{,}000``, ``D = 2048``). Everywhere else
the lookups are the gathers, and the programs are the ones without this
module.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


def one_hot() -> bool:
  """Whether the embedding table ``(vocab, embed)`` is split over two mesh
  axes of more than one device under the logical axis rules being traced
  (``runtime/layout.RULES``: ``fsdp`` and ``tensor`` both above 1)."""
  rules = nn.get_logical_axis_rules()
  mesh = jax.sharding.get_abstract_mesh()
  if not rules or not mesh.axis_names:
    return False
  sizes = dict(mesh.shape)
  axes = nn.logical_to_mesh_axes(("vocab", "embed"), rules)
  return sum(a is not None and sizes.get(a, 1) > 1 for a in axes) == 2


class Embed(nn.Embed):
  """``nn.Embed`` whose lookup is a one-hot product on a mesh where XLA
  cannot partition its gather (:func:`one_hot`); the same parameters."""

  def __call__(self, inputs: jax.Array) -> jax.Array:
    if not one_hot():
      return super().__call__(inputs)
    table_VxD = jnp.asarray(self.embedding, self.dtype)
    return jax.nn.one_hot(inputs, self.num_embeddings, dtype=table_VxD.dtype) @ table_VxD


def cross_entropy(logits_BxLxV: jax.Array, labels_BxL: jax.Array) -> jax.Array:
  """Cross-entropy (nats) of each integer label, ``[B, L]``: optax's, or its
  one-hot form where XLA cannot partition the gather (:func:`one_hot`)."""
  if not one_hot():
    return optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, labels_BxL)
  v = logits_BxLxV.shape[-1]
  picked_BxL = jnp.sum(
      logits_BxLxV * jax.nn.one_hot(labels_BxL, v, dtype=logits_BxLxV.dtype), axis=-1
  )
  return jax.nn.logsumexp(logits_BxLxV, axis=-1) - picked_BxL
