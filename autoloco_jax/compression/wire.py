r"""The DiLoCo family's compressed exchange with the encoded payloads on the wire.

``exchange.encode_workers`` then ``exchange.average`` decode every message on
its sender and average the float32 results with the run's all-reduce, so the
collective moves 4 bytes a value whatever the codec. Here (inside
``replicas.map_workers``) each device encodes its block of ``b`` workers'
messages, packs them (``wire_format.to_wire``: int8 codes as int8, 4-bit codes
two to a byte, top-k indices in ``⌈log2 C⌉`` bits, scales float32), gathers
every device's buffers with one ``lax.all_gather`` per wire dtype over the
``replica`` axis, and decodes all ``K`` payloads on every device:

.. math::
  a_k = β_e e_k + Δ_k, \qquad e_k ← a_k − \hat Δ_k, \qquad
  \bar Δ = \frac{\sum_{d=1}^{D} \sum_{j=1}^{b} w_{d,j} \hat Δ_{d,j}}
                {\sum_{d=1}^{D} \sum_{j=1}^{b} w_{d,j}},

with ``w`` the round's 0/1 presence (gathered as well) and ``\hat Δ`` the
decoded payloads (``compress.aggregate = senders`` divides by the senders'
count per coordinate instead, ``exchange.average``). The sums are written in
the order of ``replicas.worker_weighted_mean``: each device's block summed
over its rows, then the ``D`` partial sums added in device order, which is how
XLA's CPU all-reduce adds them (measured with 2, 4 and 8 devices). So on CPU
the result is the decode-then-mean sync's bit for bit, as far as XLA's fusions
allow: XLA on CPU contracts a multiply and an add in one fusion into a fused
multiply-add and rounds a reduction fused with its producer differently, so a
value's last bits depend on where it is a buffer. The sums are made one buffer,
as the all-reduce's result is (:func:`_as_buffers`), and each decoded value
enters them multiplied by its 0/1 weight, which makes a contracted
``acc + w x̂`` exact. ``tests/test_wire.py`` checks the whole state and every
metric bit for bit (int8, fp4, top-k with 32- and 2-bit values; both
aggregates; error feedback; an absent worker; 2 and 4 devices; streaming
fragments); ``experiments/fingerprint.py`` checks the committed configs. With
one device nothing crosses a wire and the decode-then-mean sync runs.

When a worker spans several devices (``config.mesh``), each leaf is cut into
one segment per device (``shards.py``) and each device runs the above on its
own segments: it encodes them, all-gathers their buffers with the same
devices of the other workers, decodes and averages them; only the averaged
leaf returns to the parameters' layout. No device encodes or decodes a whole
leaf, and the result is the one-device-per-worker result (a segment never
splits a block or a chunk).

The bytes each worker adds to the all-gathers are ``codec.encoded_bytes(n)``
per leaf up to each packed stream's rounding to whole bytes
(``wire_format.wire_bytes``); the presence weights add 4 bytes per worker.
On GPU, NCCL's all-reduce adds in its own (ring) order, so there the two
syncs agree to float32 rounding only.

The gossip methods send the same buffers to their neighbours
(``algorithms/gossip/compressed_exchange.py``: :func:`error_fed`,
:func:`encode_block`, :func:`decoder`; :func:`gather` and
:func:`ordered_mean` on the complete graph).

Dense codecs (identity, bf16) are summable as they are: they keep the
all-reduce (``exchange.average``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax import lax

from autoloco_jax.compression import exchange as exchange_lib, shards, wire_format
from autoloco_jax.runtime import replicas


def carries(compression: exchange_lib.Compression) -> bool:
  """Whether the exchange sends encoded payloads, inside ``map_workers``:
  ``compression.wire``, a codec with a wire format (every one but identity
  and bf16) and a mesh of more than one device (on one, nothing crosses a
  wire, and the decode-then-mean sync runs)."""
  return (
      compression.wire
      and wire_format.carries(compression.codec)
      and lax.axis_size(replicas.REPLICA) > 1
  )


def as_buffers(sums: Callable[[], Any], pred: jax.Array) -> Any:
  """``sums()`` as buffers, not expressions that XLA fuses into its consumers
  (the module docstring says why): a conditional's result. ``pred`` is true
  wherever this is called, but no constant XLA could fold; the other branch
  gives zeros."""

  def zeros():
    def zero(x):
      axes = tuple(sorted(x.manual_axis_type.varying))
      z = jnp.zeros(x.shape, x.dtype)
      return lax.pcast(z, axes, to="varying") if axes else z

    return jax.tree.map(zero, jax.eval_shape(sums))

  return lax.cond(pred, sums, zeros)


def ordered_weighted_mean(w_DxB: jax.Array, blocks: list) -> Any:
  r"""``Σ_d Σ_j w_{d,j} x_{d,j} / Σ w`` of ``blocks`` (``D`` pytrees of
  ``[b, ...]`` leaves, device order) in ``replicas.worker_weighted_mean``'s
  order: per device ``jnp.sum`` over its rows, then the devices left to right."""
  total = jnp.sum(w_DxB[0])
  for d in range(1, len(blocks)):
    total = total + jnp.sum(w_DxB[d])

  def leaf_sum(*x_D):
    parts = []
    for d, x in enumerate(x_D):
      w = w_DxB[d].reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
      parts.append(jnp.sum(w * x, axis=0))
    return sum(parts[1:], parts[0])

  sum_tree = as_buffers(lambda: jax.tree.map(leaf_sum, *blocks), total > 0)
  return jax.tree.map(lambda s: s / total.astype(s.dtype), sum_tree)


def error_fed(
    compression: exchange_lib.Compression, x_K: list, residual_K: list | None
) -> list:
  """The messages to encode, ``a_k = β_e e_k + x_k`` (``x_k`` itself without
  error feedback), leaf by leaf as ``exchange.encode_workers`` forms them."""
  if compression.ef_beta is None:
    return list(x_K)
  beta = jnp.float32(compression.ef_beta)
  return [beta * e + x.astype(jnp.float32) for e, x in zip(residual_K, x_K)]


def encode_block(codec: Any, acc_K: list[jax.Array]) -> tuple[dict, list]:
  """``(buffers_K, sent_K)``: the device's workers' wire buffers
  (``wire_format.to_wire``, leading axis ``b``) and their own decoded
  messages (float32, what every receiver decodes)."""
  return jax.vmap(lambda leaves: wire_format.to_wire(codec, leaves))(acc_K)


def decoder(codec: Any, shapes: list[tuple]) -> Callable[[dict], list]:
  """``buffers_K -> leaves``: decodes a block of workers' buffers."""
  return jax.vmap(lambda bufs: wire_format.from_wire(codec, bufs, shapes))


def gather(buffers_K: dict) -> list[dict]:
  """Every device's wire buffers, ``D`` dicts of ``[b, L]`` arrays in device
  order: one all-gather per wire buffer over the replica axis."""
  with jax.named_scope("wire_payload"):  # found by benchmarks/wire.py
    gathered = lax.all_gather(buffers_K, replicas.REPLICA, to="invarying")
  num_devices = next(iter(gathered.values())).shape[0]
  return [{k: g[d] for k, g in gathered.items()} for d in range(num_devices)]


def gather_decoded(codec: Any, buffers_K: dict, shapes: list[tuple]) -> list:
  """Every worker's decoded payload, as ``D`` lists of ``[b, ...]`` leaves in
  device order (:func:`gather`, then :func:`decoder`)."""
  decode = decoder(codec, shapes)
  return [decode(b) for b in gather(buffers_K)]


def ordered_mean(block_means: list[Callable[[], list]], pred: jax.Array) -> list:
  r"""``mean_k x_k`` in ``replicas.worker_mean``'s order: per device
  ``jnp.mean`` over its rows, the devices added left to right, divided by
  ``D`` (``lax.pmean``). ``block_means[d]()`` is device ``d``'s mean of its
  decoded rows (one list of leaves); each is made a buffer, as the
  all-reduce's operands are, and so is their sum (:func:`as_buffers`, with
  ``pred``)."""
  means = [as_buffers(mean, pred) for mean in block_means]
  sums = as_buffers(lambda: [sum(xs[1:], xs[0]) for xs in zip(*means)], pred)
  return [s / len(block_means) for s in sums]


def _encoded_mean(
    compression: exchange_lib.Compression, acc_K: list, present_K: jax.Array
) -> tuple[list, list]:
  """``(Δ̄, sent_K)`` of the messages ``acc_K`` (leaves, leading axis ``b``):
  encoded, all-gathered, decoded and averaged (the module docstring)."""
  buffers_K, sent_K = encode_block(compression.codec, acc_K)
  shapes = [tuple(x.shape[1:]) for x in acc_K]
  blocks = gather_decoded(compression.codec, buffers_K, shapes)
  with jax.named_scope("wire_presence"):
    w_DxB = lax.all_gather(present_K, replicas.REPLICA, to="invarying")
  mean = lambda b: ordered_weighted_mean(w_DxB, b)
  return exchange_lib.average(compression, blocks, mean), sent_K


def exchange(
    compression: exchange_lib.Compression,
    delta_K: Any,
    residual_K: Any | None,
    present_K: jax.Array,
    mine: Sequence[bool] | None = None,
) -> tuple[Any, Any | None]:
  """``(Δ̄, residual_K)``: the average of the encoded messages and the new
  residuals, the payloads moved encoded (the module docstring).

  Args:
    compression: codec, error feedback and aggregate (``carries`` it).
    delta_K: the device's workers' pseudo-gradients (leading axis ``b``).
    residual_K: their residuals ``e_k``; None without error feedback.
    present_K: their 0/1 presence weights (float32, ``[b]``).
    mine: per leaf (``jax.tree.leaves`` order), whether it is sent (a
      streaming fragment's leaves); None: all. The others are not sent: their
      ``Δ̄`` is 0 and their residuals are kept.
  """
  d_leaves, treedef = jax.tree.flatten(delta_K)
  mine = tuple(mine) if mine is not None else (True,) * len(d_leaves)
  sent_ids = [i for i, m in enumerate(mine) if m]
  delta = [jnp.zeros(x.shape[1:], jnp.float32) for x in d_leaves]
  if not sent_ids:  # a fragment without leaves sends nothing
    return jax.tree.unflatten(treedef, delta), residual_K
  e_leaves = None if residual_K is None else jax.tree.leaves(residual_K)
  acc_K = error_fed(
      compression,
      [d_leaves[i] for i in sent_ids],
      None if e_leaves is None else [e_leaves[i] for i in sent_ids],
  )
  segs = shards.Segments.of(compression.codec, [tuple(x.shape[1:]) for x in acc_K])
  averaged, sent_K = segs.on_devices(
      lambda a_K, w_K: _encoded_mean(compression, a_K, w_K), acc_K, present_K, out_leads=(0, 1)
  )
  for i, value in zip(sent_ids, averaged):
    delta[i] = value
  if e_leaves is not None:
    e_leaves = list(e_leaves)
    for i, a, s in zip(sent_ids, acc_K, sent_K):
      e_leaves[i] = a - s
    residual_K = jax.tree.unflatten(treedef, e_leaves)
  return jax.tree.unflatten(treedef, delta), residual_K
