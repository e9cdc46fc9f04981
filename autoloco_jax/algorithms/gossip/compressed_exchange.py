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

from typing import Any, NamedTuple

import jax

from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.compression import exchange
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
  sent_K, residual_K = exchange.encode_workers(compression, x_K, ex.residual_K)
  return topology.laplacian(topo, sent_K, round_index), ex._replace(residual_K=residual_K)
