r"""What the DiLoCo family sends at a sync: encoded pseudo-gradients, optionally
with error feedback, averaged as the mean of the decoded payloads.

Every worker ``k`` encodes its pseudo-gradient ``Δ_k`` with the run's codec
(``codecs.py``, ``config.compress``). Without error feedback it sends
``Q(Δ_k)``; with it (SparseLoCo's form, ``compress.ef_beta = β_e``) it keeps a
residual ``e_k`` of what it has not yet sent,

.. math::
  a_k = β_e\, e_k + Δ_k, \qquad \hat Δ_k = \mathrm{decode}(\mathrm{encode}(a_k)),
  \qquad e_k ← a_k − \hat Δ_k ,

so ``\hat Δ_k + e_k = a_k``: nothing is lost, only delayed. Every receiver
decodes every payload and averages them in float32 (:func:`average`), by
``compress.aggregate``:

* ``mean``: ``\bar Δ = mean_k \hat Δ_k``, over all ``K`` workers (SparseLoCo's
  equation, and DiLoCo's);
* ``senders``: each coordinate over the workers that sent it,
  ``\bar Δ_i = Σ_k \hat Δ_{k,i} / |\{k : \hat Δ_{k,i} ≠ 0\}|`` (0 where none
  did): the scatter-mean of the SparseLoCo authors' code (Templar's
  ``TopKCompressor.batch_decompress``, ``scatter_reduce(..., "mean",
  include_self=False)``). With top-k messages whose supports barely overlap it
  steps each sent coordinate by the sender's value, about ``K`` times the
  ``mean``'s; with dense messages the two agree.

The residuals are per worker (``params_K``-shaped, sharded on the replica
axis) and live in the run state, so a resumed run continues with them.

Inside the DiLoCo family's sync the encoded payloads themselves cross the
replica axis (``wire.py``: an all-gather of the packed codes, then every device
decodes and averages them; the gossip methods ``ppermute`` them to their
neighbours); the functions here are the decode-then-mean form
(``Compression.wire = False``, one device, and the dense codecs' all-reduce),
which gives the same numbers on CPU.

On the simulated clock the message is the encoded payload
(``codecs.tree_encoded_bytes``: values, indices and scales), moved by a ring
all-reduce when the codec is dense (identity, bf16) and by a ring all-gather
otherwise (``clock.ring_allreduce``, ``clock.ring_allgather``).

The identity codec without error feedback sends ``Δ_k`` as it is: the sync is
DiLoCo's, operation for operation.

The gossip methods (NoLoCo, GASLoC) send through the same
:func:`encode_workers`; what they encode, and how the decoded payloads are
mixed, is in ``algorithms/gossip/compressed_exchange.py``.

Reference:
  Sarfi, Thérien, Lidin, Belilovsky, Communication Efficient LLM Pre-training
  with SparseLoCo, 2025. https://arxiv.org/abs/2508.15706
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from autoloco_jax import ranges
from autoloco_jax.compression import codecs

#: The ways :func:`average` combines the decoded messages (``compress.aggregate``).
AGGREGATES = ("mean", "senders")

#: The numeric fields of ``config.compress``, range-checked here once
#: (``ranges.FIELDS['compress.<name>']``).
_NUMERIC = ("block_size", "chunk_size", "density")


@dataclasses.dataclass(frozen=True)
class Compression:
  """How pseudo-gradients are sent (``config.compress``, read by
  :meth:`from_config` and nowhere else; its defaults are
  ``configs/common.py``'s).

  Attributes:
    codec: the codec of every message (``codecs.Codec``; static, hashable).
    ef_beta: ``β_e``, the residual's decay of error feedback; None: no error
      feedback.
    aggregate: how the decoded messages are averaged, one of
      :data:`AGGREGATES` (:func:`average`).
    wire: whether the collectives carry the encoded payloads (``wire.py``: an
      all-gather, or the gossip methods' ``ppermute``, of int8 codes, packed
      nibbles, packed indices...) when the codec is not dense and the mesh has
      more than one device; False: each message is decoded by its sender and
      the float32 results are exchanged (the same numbers on CPU, bit for
      bit). Not a config field: a program choice, not a result.
  """

  codec: codecs.Codec
  ef_beta: float | None
  aggregate: str = "mean"
  wire: bool = True

  @classmethod
  def from_config(cls, config: Any) -> "Compression":
    """From ``config.compress`` (its numeric fields checked against
    ``ranges.FIELDS``); ``ef_beta`` None or negative means no error feedback."""
    cfg = config.compress
    for name in _NUMERIC:
      ranges.check(f"compress.{name}", cfg[name])
    beta = cfg.ef_beta
    if beta is not None and float(beta) < 0:
      beta = None
    if cfg.aggregate not in AGGREGATES:
      raise ValueError(
          f"compress.aggregate must be one of {AGGREGATES}, got {cfg.aggregate!r}"
      )
    return cls(
        codec=codecs.from_config(cfg),
        ef_beta=codecs.ef_beta_from_config({"ef_beta": beta}),
        aggregate=cfg.aggregate,
    )

  @property
  def plain(self) -> bool:
    """True when messages are the float32 pseudo-gradients themselves."""
    return self.codec.name == "identity" and self.ef_beta is None

  def init_residual(self, params_K: Any) -> Any | None:
    """Error feedback's residuals before the first message, ``e_k = 0``
    (float32, ``params_K``-shaped); None without error feedback."""
    if self.ef_beta is None:
      return None
    return jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), params_K)


def encode_workers(
    compression: Compression, delta_K: Any, residual_K: Any | None
) -> tuple[Any, Any | None]:
  """What each worker sends, as the receivers decode it, and its new residual.

  Args:
    compression: codec and error feedback.
    delta_K: per-worker pseudo-gradients (leading axis: the device's workers).
    residual_K: per-worker residuals ``e_k`` (None without error feedback).

  Returns:
    ``(sent_K, residual_K)``: ``\\hat Δ_k`` (float32) and the updated residuals
    (None without error feedback). With the identity codec and no error
    feedback ``sent_K`` is ``delta_K`` itself.
  """
  if compression.plain:
    return delta_K, residual_K
  roundtrip = jax.vmap(lambda tree: codecs.tree_roundtrip(compression.codec, tree))
  if compression.ef_beta is None:
    return roundtrip(delta_K), residual_K
  beta = jnp.float32(compression.ef_beta)
  acc_K = jax.tree.map(lambda e, d: beta * e + d.astype(jnp.float32), residual_K, delta_K)
  sent_K = roundtrip(acc_K)
  return sent_K, jax.tree.map(jnp.subtract, acc_K, sent_K)


def average(compression: Compression, sent_K: Any, mean: Callable[[Any], Any]) -> Any:
  r"""``\bar Δ`` from the decoded messages ``sent_K`` (the module docstring's two
  rules), where ``mean`` is the run's mean over the workers present (for
  example ``replicas.worker_weighted_mean`` with the round's weights)."""
  if compression.aggregate == "mean":
    return mean(sent_K)
  total = mean(sent_K)  # Σ_k Δ̂_k / n
  share = mean(jax.tree.map(lambda x: (x != 0).astype(jnp.float32), sent_K))  # senders / n

  def ratio(t, s):
    return jnp.where(s > 0, t / jnp.where(s > 0, s, 1.0), 0.0)

  return jax.tree.map(ratio, total, share)
