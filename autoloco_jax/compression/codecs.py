r"""Codecs for exchanged pseudo-gradients: one interface for every message.

Every exchange of a pseudo-gradient (an all-reduce of the DiLoCo family, a
gossip exchange of NoLoCo/GASLoC) sends ``encode(x)`` and the receiver uses
``decode(payload)``. A :class:`Codec` bundles the pair with the number of bytes
the payload occupies on the wire, so the simulated clock (``clock.py``) and the
training step agree on what was sent:

* ``encode(x) -> Payload`` and ``decode(payload) -> x_hat`` are pure, jittable
  JAX functions of one array of any shape (flattened internally); ``x_hat`` has
  ``x``'s shape and dtype float32. :func:`roundtrip` is ``decode ∘ encode``,
  :func:`tree_roundtrip` its map over a pytree.
* ``encoded_bytes(n)`` counts everything on the wire for ``n`` values: the
  values, the indices of sparse codecs and the per-block scales (float32,
  4 bytes each). Today's dense accounting (``clock.py``) is the ``identity``
  codec: 4 bytes per value.
* ``dense``: whether payloads can be summed as they are (``identity``,
  ``bf16``), so an all-reduce is modelled as a ring all-reduce. Payloads with
  per-block scales or indices cannot be summed without decoding; their
  "all-reduce" is an all-gather of the packed payloads (``wire_format.py``,
  ``wire.py``), and the clock models it as one (``clock.ring_allgather``).

Codecs (registry :data:`CODECS`, :func:`make`, :func:`from_config`), with
``B`` the block size, ``n`` the number of values and ``⌈·⌉`` the ceiling:

=========  ==========================================  =============================
name       value format                                ``encoded_bytes(n)``
=========  ==========================================  =============================
identity   float32                                     ``4 n``
bf16       bfloat16 (round to nearest even)            ``2 n``
fp8        float8 e4m3fn, per-block scale absmax/448   ``n + 4 ⌈n/B⌉``
fp4        float4 e2m1, per-block scale absmax/6       ``n/2 + 4 ⌈n/B⌉``
int8       integers in [−127, 127], scale absmax/127   ``n + 4 ⌈n/B⌉``
int4       integers in [−7, 7], scale absmax/7         ``n/2 + 4 ⌈n/B⌉``
topk       chunk-wise top-k, values in ``value_bits``  ``m (b_idx + b_val)/8 + 4 c s``
=========  ==========================================  =============================

For ``topk`` with chunk size ``C``: ``c = ⌈n/C⌉`` chunks, ``k`` values kept per
chunk (``m = (c − 1) k + min(k, n − (c − 1) C)`` in all: the last chunk keeps
at most its real values), ``b_idx = ⌈log2 C⌉`` bits per index, ``b_val`` the
value format's bits, and ``s = 1`` when the format has a per-chunk scale
(``value_bits`` 8, 4, 2), else 0.

A per-block scale ``absmax/L`` is computed as ``absmax · fl(1/L)`` and values
are multiplied by ``1/scale`` (what XLA makes of the divisions under ``jit``
anyway), so eager and jitted encodings agree bit for bit; the bounds below hold
up to these float32 roundings, a few ulps of the block's absmax.

Sizes that are not a multiple of the block (or chunk) size are padded with
zeros inside ``encode``; the padding is not counted on the wire (the receiver
knows ``n``), but the last, partial block's scale is.

Error feedback (``exchange.encode_workers``) keeps what a lossy codec did not
send and adds it to the next message, so nothing is lost, only delayed.

Inputs are assumed finite: a NaN or infinity makes its block's scale, and so
the whole decoded block, non-finite.

References:
  Douillard et al., `DiLoCo: Distributed Low-Communication Training of Language
  Models <https://arxiv.org/abs/2311.08105>`_, 2023.

  Douillard et al., `Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch <https://arxiv.org/abs/2501.18512>`_, 2025 (outer
  gradients exchanged in 4-bit e2m1 floating point).

  Sarfi, Thérien, Lidin, Belilovsky, `Communication Efficient LLM Pre-training
  with SparseLoCo <https://arxiv.org/abs/2508.15706>`_, 2025 (chunk-wise top-k,
  2-bit values, error feedback in place of outer momentum).

  Micikevicius et al., `FP8 Formats for Deep Learning
  <https://arxiv.org/abs/2209.05433>`_, 2022 (e4m3).

  Karimireddy et al., `Error Feedback Fixes SignSGD and other Gradient
  Compression Schemes <https://arxiv.org/abs/1901.09847>`_, 2019.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

#: Bytes of one per-block (or per-chunk) scale on the wire: a float32.
SCALE_BYTES = 4
#: Smallest per-block scale sent (float32's smallest normal, 2^-126); smaller
#: scales are sent as 0, their blocks as zeros.
MIN_SCALE = float(np.finfo(np.float32).tiny)
#: Largest finite float8 e4m3fn value.
FP8_E4M3_MAX = 448.0
#: The non-negative float4 e2m1 values, in code order (code = sign·8 + index).
FP4_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP4_E2M1_MAX = 6.0
#: Default block size of the per-block quantizers (fp8, fp4, int8, int4).
DEFAULT_BLOCK_SIZE = 128
#: Default chunk size and density of ``topk`` (64 of every 4096 values, 1.56%).
DEFAULT_CHUNK_SIZE = 4096
DEFAULT_DENSITY = 1 / 64
#: Value formats of ``topk``: bits per kept value.
TOPK_VALUE_BITS = (32, 16, 8, 4, 2)


# ----------------------------------------------------------------------------
# The interface.


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Payload:
  """What a codec sends for one array: its arrays and the array's shape.

  Attributes:
    data: the payload's arrays by name (``values``, ``scales``, ``indices``...,
      per codec); the pytree children, so payloads pass through ``jit``.
    shape: the encoded array's shape (static: ``n`` is known to the receiver).
  """

  data: dict[str, jax.Array]
  shape: tuple[int, ...]

  def tree_flatten(self):
    return (self.data,), self.shape

  @classmethod
  def tree_unflatten(cls, shape, children):
    return cls(children[0], shape)


@dataclasses.dataclass(frozen=True)
class Codec:
  """An encoder/decoder pair for pseudo-gradients, and its size on the wire.

  Codecs compare and hash by ``(name, dense, params)``, so one can be a static
  argument of ``jax.jit``.

  Attributes:
    name: the registry name (:data:`CODECS`).
    encode: ``x -> Payload``; pure and jittable, for an array of any shape
      (cast to float32 first).
    decode: ``Payload -> x_hat``; pure and jittable; float32, ``x``'s shape.
    encoded_bytes: ``n -> bytes`` a payload of ``n`` values occupies on the wire
      (values, indices and scales; a float, as 4-bit values take half a byte).
    dense: True when payloads can be summed without decoding (a ring all-reduce
      is modelled); False when each payload has its own scales or indices (an
      all-gather is modelled).
    params: the factory's keyword arguments, ``((name, value), ...)``.
  """

  name: str
  encode: Callable[[jax.Array], Payload] = dataclasses.field(compare=False, repr=False)
  decode: Callable[[Payload], jax.Array] = dataclasses.field(compare=False, repr=False)
  encoded_bytes: Callable[[int], float] = dataclasses.field(compare=False, repr=False)
  dense: bool
  params: tuple[tuple[str, Any], ...] = ()


def roundtrip(codec: Codec, x: jax.Array) -> jax.Array:
  """``decode(encode(x))``: what the receiver gets for ``x`` (float32)."""
  return codec.decode(codec.encode(x))


def tree_roundtrip(codec: Codec, tree: Any) -> Any:
  """:func:`roundtrip` of every leaf of ``tree`` (each leaf its own blocks)."""
  return jax.tree.map(lambda x: roundtrip(codec, x), tree)


def tree_encoded_bytes(codec: Codec, tree: Any) -> float:
  """Bytes on the wire for a pytree, leaf by leaf (each leaf has its own blocks);
  leaves may be arrays or shape structs (anything with ``.size`` or ``.shape``)."""
  total = 0.0
  for leaf in jax.tree.leaves(tree):
    size = leaf.size if hasattr(leaf, "size") else math.prod(leaf.shape)
    total += codec.encoded_bytes(int(size))
  return total


# ----------------------------------------------------------------------------
# Helpers.


def _check_size(name: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
  return int(value)


def _as_f32(x: Any) -> jax.Array:
  return jnp.asarray(x, jnp.float32)


def _blocks(x: jax.Array, block_size: int) -> tuple[jax.Array, int]:
  """``x`` flattened, zero-padded to a multiple of ``block_size`` and reshaped to
  ``(num_blocks, block_size)``; also returns ``n``."""
  flat = _as_f32(x).reshape(-1)
  n = flat.shape[0]
  num_blocks = -(-n // block_size)
  flat = jnp.pad(flat, (0, num_blocks * block_size - n))
  return flat.reshape(num_blocks, block_size), n


def _unblock(blocks_NxB: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  n = math.prod(shape)
  return blocks_NxB.reshape(-1)[:n].reshape(shape)


def _absmax_scale(blocks_NxB: jax.Array, levels: float) -> tuple[jax.Array, jax.Array]:
  """Per-block ``scale = absmax · fl(1/levels)`` and the blocks times ``1/scale``.

  Written as products, the operations XLA would turn the divisions into under
  ``jit``, so eager and jitted encodings agree bit for bit. A scale below
  float32's smallest normal (:data:`MIN_SCALE`; a block of zeros, or of
  magnitudes below ``levels · 2^-126``) is sent as 0 and its block decodes to
  zeros, so ``1/scale`` never overflows and nothing becomes NaN.
  """
  scale_N = jnp.max(jnp.abs(blocks_NxB), axis=1) * np.float32(1.0 / levels)
  scale_N = jnp.where(scale_N >= MIN_SCALE, scale_N, 0.0)
  inv_N = 1.0 / jnp.where(scale_N > 0, scale_N, 1.0)
  return scale_N, blocks_NxB * inv_N[:, None]


def fp4_e2m1_round(y: jax.Array) -> jax.Array:
  r"""Codes of the float4 e2m1 values nearest to ``y`` (ties to even), uint8.

  A code is ``sign · 8 + i``, ``i`` indexing :data:`FP4_E2M1_VALUES`
  ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)``; magnitudes beyond 6 saturate to 6. A tie
  between neighbours ``v_i`` and ``v_{i+1}`` goes to the even index (even
  mantissa), as IEEE rounding and ``ml_dtypes.float4_e2m1fn`` do.
  """
  mags = np.asarray(FP4_E2M1_VALUES, np.float32)
  mid_7 = jnp.asarray((mags[:-1] + mags[1:]) / 2)
  up_on_tie_7 = jnp.asarray(np.arange(7) % 2 == 1)
  a = jnp.abs(y)[..., None]
  above = jnp.where(up_on_tie_7, a >= mid_7, a > mid_7)
  index = jnp.sum(above, axis=-1, dtype=jnp.uint8)
  return index + jnp.where(jnp.signbit(y), jnp.uint8(8), jnp.uint8(0))


def fp4_e2m1_value(code: jax.Array) -> jax.Array:
  """The float32 values of float4 e2m1 codes made by :func:`fp4_e2m1_round`."""
  mags = jnp.asarray(FP4_E2M1_VALUES, jnp.float32)
  mag = mags[(code & 7).astype(jnp.int32)]
  return jnp.where((code & 8) > 0, -mag, mag)


def _index_bits(chunk_size: int) -> int:
  """``⌈log2 C⌉`` bits address one of ``C`` positions (0 for ``C = 1``)."""
  return (chunk_size - 1).bit_length()


# ----------------------------------------------------------------------------
# Dense codecs.


def identity() -> Codec:
  """float32 as it is: ``decode(encode(x)) == x`` bit for bit; ``4 n`` bytes."""

  def encode(x):
    x = _as_f32(x)
    return Payload({"values": x}, tuple(x.shape))

  def decode(p):
    return p.data["values"]

  return Codec("identity", encode, decode, lambda n: 4.0 * n, dense=True)


def bf16() -> Codec:
  r"""bfloat16 values (``astype``: round to nearest, ties to even); ``2 n`` bytes.

  bfloat16 keeps float32's exponent and 8 significant bits, so for normal
  values ``|x − x̂| ≤ 2^{−8} |x|`` (unit roundoff); values already in bfloat16
  are exact. Values within half a bfloat16 step of the float32 maximum round to
  infinity.
  """

  def encode(x):
    x = _as_f32(x)
    return Payload({"values": x.astype(jnp.bfloat16)}, tuple(x.shape))

  def decode(p):
    return p.data["values"].astype(jnp.float32)

  return Codec("bf16", encode, decode, lambda n: 2.0 * n, dense=True)


# ----------------------------------------------------------------------------
# Per-block quantizers: float32 scale per block of B values.


def _block_codec(
    name: str,
    block_size: int,
    levels: float,
    value_bytes: float,
    to_code: Callable[[jax.Array], jax.Array],
    from_code: Callable[[jax.Array], jax.Array],
) -> Codec:
  """A codec sending ``code(x / scale)`` and a float32 ``scale = absmax/levels``
  per block of ``block_size`` values."""
  block_size = _check_size("block_size", block_size)

  def encode(x):
    blocks_NxB, _ = _blocks(x, block_size)
    scale_N, y_NxB = _absmax_scale(blocks_NxB, levels)
    return Payload({"values": to_code(y_NxB), "scales": scale_N}, tuple(jnp.shape(x)))

  def decode(p):
    y_NxB = from_code(p.data["values"])
    return _unblock(y_NxB * p.data["scales"][:, None], p.shape)

  def encoded_bytes(n):
    return value_bytes * n + SCALE_BYTES * -(-n // block_size)

  return Codec(
      name,
      encode,
      decode,
      encoded_bytes,
      dense=False,
      params=(("block_size", block_size),),
  )


def _int_codec(name: str, levels: int, value_bytes: float, block_size: int) -> Codec:
  return _block_codec(
      name,
      block_size,
      float(levels),
      value_bytes,
      lambda y: jnp.clip(jnp.round(y), -levels, levels).astype(jnp.int8),
      lambda q: q.astype(jnp.float32),
  )


def int8(block_size: int = DEFAULT_BLOCK_SIZE) -> Codec:
  r"""Symmetric per-block int8: ``q = round(x / s) ∈ [−127, 127]``, ``x̂ = q s``.

  ``s = max_{block} |x| / 127`` (float32, one per block). Rounding to nearest
  gives ``|x − x̂| ≤ s / 2`` (up to float32 rounding of ``x/s`` and ``q s``);
  multiples ``q s`` of the block's own scale are exact. ``n + 4 ⌈n/B⌉`` bytes.
  """
  return _int_codec("int8", 127, 1.0, block_size)


def int4(block_size: int = DEFAULT_BLOCK_SIZE) -> Codec:
  r"""Symmetric per-block int4: ``q = round(x / s) ∈ [−7, 7]``, ``x̂ = q s``.

  ``s = max_{block} |x| / 7``; ``|x − x̂| ≤ s / 2``; two values per byte:
  ``n/2 + 4 ⌈n/B⌉`` bytes. (Codes are held one per int8 in memory and packed
  two per byte on the wire, ``wire_format.py``.)
  """
  return _int_codec("int4", 7, 0.5, block_size)


def fp8(block_size: int = DEFAULT_BLOCK_SIZE) -> Codec:
  r"""Per-block float8 e4m3fn: ``x̂ = fp8(x / s) · s`` with ``s = absmax / 448``.

  The scale maps each block's largest magnitude to e4m3's largest finite value
  448, so nothing overflows (scaled values are clipped to ±448 against the
  last-bit rounding of ``x / s``). With 3 mantissa bits, for normal scaled values
  (``|x/s| ≥ 2^{−6}``) ``|x − x̂| ≤ 2^{−4} |x|``; below, the subnormal step
  ``2^{−9}`` gives ``|x − x̂| ≤ 2^{−10} s``. So ``|x − x̂| ≤ max(2^{−4}|x|,
  2^{−10} s)``. ``n + 4 ⌈n/B⌉`` bytes.
  """
  return _block_codec(
      "fp8",
      block_size,
      FP8_E4M3_MAX,
      1.0,
      lambda y: jnp.clip(y, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(jnp.float8_e4m3fn),
      lambda q: q.astype(jnp.float32),
  )


def fp4(block_size: int = DEFAULT_BLOCK_SIZE) -> Codec:
  r"""Per-block float4 e2m1: ``x̂ = e2m1(x / s) · s`` with ``s = absmax / 6``.

  e2m1 represents ``±{0, 0.5, 1, 1.5, 2, 3, 4, 6}``; :func:`fp4_e2m1_round`
  rounds to the nearest (ties to even). The error is at most half the gap
  between the neighbouring representable values, times ``s``: ``s/4`` for
  ``|x/s| ≤ 2``, ``s/2`` up to 4, ``s`` up to 6; i.e. ``|x − x̂| ≤ max(s/4,
  |x|/4)``. ``n/2 + 4 ⌈n/B⌉`` bytes. Streaming DiLoCo (arXiv 2501.18512)
  exchanges outer gradients in this format.
  """
  return _block_codec(
      "fp4", block_size, FP4_E2M1_MAX, 0.5, fp4_e2m1_round, fp4_e2m1_value
  )


# ----------------------------------------------------------------------------
# Chunk-wise top-k (SparseLoCo).


def topk_k(chunk_size: int, density: float) -> int:
  """Values kept per chunk: ``max(1, round(density · chunk_size))`` (Python's
  ``round``, half to even), at most ``chunk_size``."""
  return min(chunk_size, max(1, round(density * chunk_size)))


def topk(
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    density: float = DEFAULT_DENSITY,
    value_bits: int = 32,
) -> Codec:
  r"""Chunk-wise top-k sparsification (SparseLoCo, arXiv 2508.15706).

  The flat vector is split into chunks of ``C = chunk_size`` values (the last
  zero-padded); each chunk keeps its ``k =`` :func:`topk_k` largest-magnitude
  values (padding is never preferred to a real value) and their positions,
  ``⌈log2 C⌉`` bits each. The payload has fixed shapes ``(c, k)``, so it jits.
  The kept values ``v`` are sent as

  * ``value_bits=32``: float32, exact;
  * ``16``: bfloat16, ``|v − v̂| ≤ 2^{−8}|v|``;
  * ``8`` / ``4``: symmetric int8 / int4 with a per-chunk float32 scale
    ``s = max|v| / 127`` (``/ 7``), ``|v − v̂| ≤ s/2``;
  * ``2``: SparseLoCo's 2-bit form, a ternary ``sign(v) ∈ {−1, 0, 1}`` times a
    per-chunk float32 scale ``s = mean |v|`` over the chunk's nonzero kept
    values (the least-squares scale for those signs); a ternary digit is
    counted as 2 bits. No per-value bound: the
    error ``| |v| − s |`` is what error feedback (``exchange.encode_workers``) carries.

  Dropped values decode to 0 (error ``|x|``; at most the chunk's k-th largest
  magnitude). Bytes: ``m (⌈log2 C⌉ + value_bits) / 8`` plus 4 per chunk for the
  scaled formats, ``m`` the kept real values (see the module docstring).

  Args:
    chunk_size: ``C``, values per chunk.
    density: fraction of each chunk kept, in (0, 1].
    value_bits: format of the kept values, one of :data:`TOPK_VALUE_BITS`.
  """
  chunk_size = _check_size("chunk_size", chunk_size)
  if not (isinstance(density, numbers.Real) and 0 < density <= 1):
    raise ValueError(f"density must be in (0, 1], got {density!r}")
  if value_bits not in TOPK_VALUE_BITS:
    raise ValueError(f"value_bits must be one of {TOPK_VALUE_BITS}, got {value_bits!r}")
  density = float(density)
  k = topk_k(chunk_size, density)
  scaled = value_bits in (8, 4, 2)
  levels = {8: 127, 4: 7}.get(value_bits)

  def encode(x):
    chunks_CxS, n = _blocks(x, chunk_size)
    position_CxS = jnp.arange(chunks_CxS.size).reshape(chunks_CxS.shape)
    key_CxS = jnp.where(position_CxS < n, jnp.abs(chunks_CxS), -1.0)
    _, idx_Cxk = lax.top_k(key_CxS, k)
    v_Cxk = jnp.take_along_axis(chunks_CxS, idx_Cxk, axis=1)
    data = {"indices": idx_Cxk.astype(jnp.int32)}
    if value_bits == 32:
      data["values"] = v_Cxk
    elif value_bits == 16:
      data["values"] = v_Cxk.astype(jnp.bfloat16)
    elif value_bits == 2:
      nonzero_C = jnp.sum(v_Cxk != 0, axis=1)
      data["scales"] = jnp.sum(jnp.abs(v_Cxk), axis=1) / jnp.maximum(nonzero_C, 1)
      data["values"] = jnp.sign(v_Cxk).astype(jnp.int8)
    else:
      scale_C, y_Cxk = _absmax_scale(v_Cxk, float(levels))
      data["scales"] = scale_C
      data["values"] = jnp.clip(jnp.round(y_Cxk), -levels, levels).astype(jnp.int8)
    return Payload(data, tuple(jnp.shape(x)))

  def decode(p):
    idx_Cxk = p.data["indices"]
    v_Cxk = p.data["values"].astype(jnp.float32)
    if scaled:
      v_Cxk = v_Cxk * p.data["scales"][:, None]
    num_chunks = idx_Cxk.shape[0]
    rows_Cx1 = jnp.arange(num_chunks)[:, None]
    chunks_CxS = jnp.zeros((num_chunks, chunk_size), jnp.float32)
    chunks_CxS = chunks_CxS.at[rows_Cx1, idx_Cxk].set(v_Cxk)
    return _unblock(chunks_CxS, p.shape)

  def encoded_bytes(n):
    if n == 0:
      return 0.0
    num_chunks = -(-n // chunk_size)
    last = n - (num_chunks - 1) * chunk_size
    kept = (num_chunks - 1) * k + min(k, last)
    bits = kept * (_index_bits(chunk_size) + value_bits)
    return bits / 8 + (SCALE_BYTES * num_chunks if scaled else 0.0)

  params = (("chunk_size", chunk_size), ("density", density), ("value_bits", value_bits))
  return Codec("topk", encode, decode, encoded_bytes, dense=False, params=params)


# ----------------------------------------------------------------------------
# Registry and configuration.

#: Codec factories by name; each takes its own keyword arguments.
CODECS: dict[str, Callable[..., Codec]] = {
    "identity": identity,
    "bf16": bf16,
    "fp8": fp8,
    "fp4": fp4,
    "int8": int8,
    "int4": int4,
    "topk": topk,
}

#: Keyword arguments each factory accepts (what :func:`from_config` passes on).
CODEC_ARGS: dict[str, tuple[str, ...]] = {
    "identity": (),
    "bf16": (),
    "fp8": ("block_size",),
    "fp4": ("block_size",),
    "int8": ("block_size",),
    "int4": ("block_size",),
    "topk": ("chunk_size", "density", "value_bits"),
}


def make(name: str, **kwargs: Any) -> Codec:
  """The codec ``name`` of :data:`CODECS`, made with ``kwargs``.

  Raises:
    ValueError: an unknown name or an argument the codec does not take.
  """
  if name not in CODECS:
    raise ValueError(f"unknown codec {name!r}; choose one of {sorted(CODECS)}")
  unknown = sorted(set(kwargs) - set(CODEC_ARGS[name]))
  if unknown:
    raise ValueError(
        f"codec {name!r} takes {CODEC_ARGS[name] or 'no arguments'}, got {unknown}"
    )
  return CODECS[name](**kwargs)


def _get(cfg: Any, key: str) -> Any:
  if cfg is None:
    return None
  if hasattr(cfg, "get"):
    return cfg.get(key, None)
  return getattr(cfg, key, None)


def from_config(cfg: Any) -> Codec:
  """The codec a config node names (e.g. ``config.comm``; a dict or ConfigDict).

  Fields (absent or None = the default):

  * ``codec``: the name in :data:`CODECS` (default ``identity``: float32);
  * ``block_size``: values per float32 scale of fp8, fp4, int8, int4
    (default :data:`DEFAULT_BLOCK_SIZE`);
  * ``chunk_size``, ``density``, ``value_bits``: of ``topk``;
  * ``ef_beta``: read by :func:`ef_beta_from_config`, not here.

  Fields the chosen codec does not take are ignored, so one config node can
  hold them all.
  """
  name = _get(cfg, "codec") or "identity"
  if name not in CODECS:
    raise ValueError(f"unknown codec {name!r}; choose one of {sorted(CODECS)}")
  kwargs = {}
  for key in CODEC_ARGS[name]:
    value = _get(cfg, key)
    if value is not None:
      kwargs[key] = value
  return make(name, **kwargs)


def ef_beta_from_config(cfg: Any) -> float | None:
  """``cfg.ef_beta``: the error-feedback decay in [0, 1], or None (absent or
  None) for no error feedback."""
  beta = _get(cfg, "ef_beta")
  if beta is None:
    return None
  beta = float(beta)
  if not 0.0 <= beta <= 1.0:
    raise ValueError(f"ef_beta must be in [0, 1], got {beta}")
  return beta
