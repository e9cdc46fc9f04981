r"""The gossip methods' compressed exchange: each worker encodes its message less
the common initial parameters, and the step mixes the decoded payloads.

(``config.compress``: ``exchange.Compression``, the codecs of ``codecs.py``). Each worker ``k`` sends one parameter-sized message
``s_k`` to each of its neighbours ``N(k)``, and the step needs from the
messages only the Laplacian of the round's graph,
``(Λ s)_k = Σ_{j ∈ N(k)} (s_k − s_j)`` (NoLoCo's group mean is
``s_k − (Λ s)_k / (d + 1)``). NoLoCo sends ``s_k = α θ_k + (γ − α) φ_k``,
GASLoC ``y_k`` (or ``z_k`` when it mixes the momentum). Sending ``s_k`` itself
through a lossy codec would add an error of the size of the parameters to every
round. A worker encodes instead its message less a reference every worker holds
without communicating, the common initial parameters ``θ_0``, with optional
error feedback (``exchange.encode_workers``, the DiLoCo family's):

.. math::

  x_k = s_k − c\, θ_0, \qquad a_k = β_e e_k + x_k, \qquad
  \hat x_k = \mathrm{decode}(\mathrm{encode}(a_k)), \qquad e_k ← a_k − \hat x_k,

  (Λ s)_k \;\text{is replaced by}\; (Λ \hat x)_k = \sum_{j ∈ N(k)} (\hat x_k − \hat x_j),

with ``c`` the message's weight on the parameters: NoLoCo ``c = γ``, so
``x_k = α (θ_k − φ_k) + γ (φ_k − θ_0)``, the round's (scaled) pseudo-gradient
plus the drift of the outer weights; GASLoC ``c = 1``,
``x_k = (θ^{start}_k − θ_0) + η g_k``. Without error feedback ``a_k = x_k``.

* The reference cancels exactly (``Λ 1 = 0``): it changes what is encoded, not
  the step. It makes the payload small (the drift since initialisation and the
  round's move, instead of, e.g., layer-norm gains of 1 quantized every round).
* Each worker puts its own *decoded* payload in the Laplacian, so both ends of
  an edge see the same difference ``\hat x_j − \hat x_k`` with opposite signs.
  As ``1^T Λ = 0`` the workers' mean takes exactly the step it takes without
  compression; the codec's error ``Λ (\hat x − x)`` only moves the replicas
  apart, and the next mixing pulls them together again. Everything else (the
  worker's own ``s_k``, NoLoCo's momentum, GASLoC's ``y_{t−1}``) stays exact;
  decoding and mixing are float32.
* Error feedback: per worker ``\hat x_k + e_k = a_k`` (what was not sent is
  carried over). With ``β_e = 1`` a worker's errors telescope,
  ``Σ_{t ≤ T} (\hat x_{k,t} − x_{k,t}) = −e_{k,T}``: on a static graph the
  errors fed into the mixing sum to ``−Λ e_T``, bounded, whatever ``T``; on
  random matchings only the worker's own row telescopes, its partners change.
* Limit: the error is relative to ``|x_k|``, the drift from ``θ_0``, and does
  not shrink as the replicas agree. Errors relative to their disagreement need
  a reference both ends of each edge track, e.g. the public copies of
  CHOCO-SGD (Koloskova, Stich, Jaggi 2019, arXiv 1902.00340; static graphs) or
  quantizers that decode with the receiver's own model as side information
  (Moniqua, Lu & De Sa 2020, arXiv 2002.11787; random pairs). Neither is built.

The payloads travel encoded (``compression/wire.py``, ``Compression.wire``):
a worker's packed codes and float32 scales go to each neighbour by
``ppermute`` (all-gathered on the complete graph) and are decoded on arrival,
the same numbers as decoding before sending.

The identity codec without error feedback is the uncompressed exchange,
operation for operation, and keeps no exchange state (``None``: checkpoints keep
their layout). On the simulated clock a worker sends its encoded payload
(``codecs.tree_encoded_bytes``: values, indices, scales) once to each
neighbour; on the complete graph the exchange is the DiLoCo family's
collective, a ring all-reduce for dense codecs and a ring all-gather otherwise
(``round_comm.py``).

References:
  Kolehmainen et al., NoLoCo: No-all-reduce Low Communication Training Method
  for Large Models, 2025. https://arxiv.org/abs/2506.10911
  Cagnasso, Belilovsky, Oyallon, GASLoC, 2026. arXiv 2606.11081.
  Koloskova, Stich, Jaggi, Decentralized Stochastic Optimization and Gossip
  Algorithms with Compressed Communication, 2019. https://arxiv.org/abs/1902.00340
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.compression import exchange, shards, wire, wire_format
from autoloco_jax.runtime import replicas


class GossipExchangeState(NamedTuple):
  """What a compressed gossip exchange carries between rounds.

  Attributes:
    reference: ``θ_0``, the common initial parameters (replicated).
    residual_K: error feedback's per-worker residuals ``e_k`` (float32,
      ``params_K``-shaped, sharded on the replica axis); None without it.
  """

  reference: Any
  residual_K: Any = None

  def specs(self) -> "GossipExchangeState":
    w, r = replicas.WORKERS, replicas.REPLICATED
    return GossipExchangeState(
        reference=r, residual_K=None if self.residual_K is None else w
    )


def init_exchange(
    compression: exchange.Compression, params: Any, params_K: Any
) -> GossipExchangeState | None:
  """The exchange state before the first round; None when nothing is
  compressed (the uncompressed exchange keeps no state)."""
  if compression.plain:
    return None
  return GossipExchangeState(
      reference=params, residual_K=compression.init_residual(params_K)
  )


def encoded_laplacian(
    topo: topology.Topology,
    compression: exchange.Compression,
    message_K: Any,
    ex: GossipExchangeState,
    round_index: Any,
    weight: float = 1.0,
) -> tuple[Any, GossipExchangeState]:
  """``(Λ \\hat x, ex)``: the Laplacian of the decoded payloads of
  ``x_k = s_k − weight · θ_0`` (``s_k``: ``message_K``) and the new residuals
  (inside :func:`replicas.map_workers`; the math is in the module docstring)."""
  x_K = jax.tree.map(lambda s, r: s - weight * r[None], message_K, ex.reference)
  if wire.carries(compression):
    lap_K, residual_K = _wire_laplacian(topo, compression, x_K, ex.residual_K, round_index)
    return lap_K, ex._replace(residual_K=residual_K)
  sent_K, residual_K = exchange.encode_workers(compression, x_K, ex.residual_K)
  return topology.laplacian(topo, sent_K, round_index), ex._replace(residual_K=residual_K)


def _wire_laplacian(
    topo: topology.Topology,
    compression: exchange.Compression,
    x_K: Any,
    residual_K: Any | None,
    round_index: Any,
) -> tuple[Any, Any | None]:
  """``(Λ \\hat x, residual_K)`` with the encoded payloads on the wire
  (``compression/wire.py``): each worker's packed codes and scales go to its
  neighbours by ``ppermute`` (:func:`_neighbor_rows`) and are decoded on
  arrival; on the complete graph every device all-gathers them. The float
  operations of ``topology.laplacian`` on the decoded payloads, in its order,
  each decoded value a buffer where the decoded exchange has one (a
  ``ppermute``'d row, an all-reduce's sum; ``wire.as_buffers``)."""
  x_leaves, treedef = jax.tree.flatten(x_K)
  e_leaves = None if residual_K is None else jax.tree.leaves(residual_K)
  acc_K = wire.error_fed(compression, x_leaves, e_leaves)
  # A worker that spans devices: each device exchanges its own segments.
  segs = shards.Segments.of(compression.codec, [tuple(x.shape[1:]) for x in acc_K])
  lap, sent_K = segs.on_devices(
      lambda a_K, r: _segment_laplacian(topo, compression.codec, a_K, r),
      acc_K, round_index, out_leads=(1, 1),
  )
  if e_leaves is not None:
    residual_K = jax.tree.unflatten(treedef, [a - s for a, s in zip(acc_K, sent_K)])
  return jax.tree.unflatten(treedef, lap), residual_K


def _segment_laplacian(topo, codec, acc_K: list, round_index: Any) -> tuple[list, list]:
  """``(Λ \\hat x, sent_K)`` of the messages ``acc_K`` (leaves, leading axis
  ``b``), their payloads on the wire (:func:`_wire_laplacian`)."""
  buffers_K, sent_K = wire.encode_block(codec, acc_K)
  shapes = [tuple(x.shape[1:]) for x in acc_K]
  true = jnp.asarray(round_index) >= 0  # no constant: see wire.as_buffers
  if topo.complete:
    decode = wire.decoder(codec, shapes)
    block_means = [
        lambda b=b: [jnp.mean(x, axis=0) for x in decode(b)] for b in wire.gather(buffers_K)
    ]
    mean = wire.ordered_mean(block_means, true)
    return [topo.num_workers * (y - m[None]) for y, m in zip(sent_K, mean)], sent_K
  decode_one = lambda bufs: wire_format.from_wire(codec, bufs, shapes)

  def nsum(table, bufs_K):
    parts = [
        _neighbor_rows(sent_K, bufs_K, row, topo.num_workers, decode_one, true)
        for row in table
    ]
    return [sum(xs[1:], xs[0]) for xs in zip(*parts)]

  if topo.pool_size == 1:
    s_K = nsum(topo.pool_NxDxK[0], buffers_K)
  else:
    index = topology.pool_index(topo.seed, round_index, topo.pool_size)
    branches = [functools.partial(nsum, t) for t in topo.pool_NxDxK]
    s_K = lax.switch(index, branches, buffers_K)
  return [topo.degree * y - s for y, s in zip(sent_K, s_K)], sent_K


def _neighbor_rows(sent_K, bufs_K, perm_K, num_workers, decode_one, true) -> list:
  """``out[k] = \\hat x[perm_K[k]]`` for the device's rows (leaves of
  ``sent_K``, its workers' decoded messages), as ``topology.gather_workers``
  plans it: rows held by this device from ``sent_K``, the others' payloads
  (``bufs_K``, wire buffers) by one single-row ``ppermute`` per colour,
  decoded on arrival."""
  b = sent_K[0].shape[0]
  p = topology.plan(perm_K, num_workers // b)
  dev = lax.axis_index(replicas.REPLICA)
  local_src = jnp.asarray(p.local_src)[dev]
  out = [x[local_src] for x in sent_K]
  for pairs, send, recv, mask in p.colours:
    s, r, m = jnp.asarray(send)[dev], jnp.asarray(recv)[dev], jnp.asarray(mask)[dev]
    rows = {k: v[s] for k, v in bufs_K.items()}
    with jax.named_scope("wire_payload"):
      got = lax.ppermute(rows, replicas.REPLICA, perm=list(pairs))
    g = wire.as_buffers(lambda got=got: decode_one(got), true)
    out = [o.at[r].set(jnp.where(m, gi, o[r])) for o, gi in zip(out, g)]
  return out
