r"""A codec's payload as the bytes on the wire: flat buffers, one per dtype.

``codecs.Codec.encode`` holds its codes one per byte (int8, uint8, float8) or
int32 (top-k indices), padded to whole blocks or chunks; ``encoded_bytes(n)``
counts what a real wire would carry. :func:`to_wire` makes that wire: per
leaf, its codes trimmed to the ``n`` real values (``m`` kept values of top-k)
and packed (``packing.py``), then every leaf's streams concatenated into one
1-D buffer per wire dtype (:data:`DTYPES`), so an exchange is one collective
per dtype. :func:`from_wire` undoes it; ``decode(from_wire(to_wire(x)))`` is
``roundtrip(x)`` bit for bit (the codes are restored exactly; the padding,
which ``decode`` drops, comes back as zeros).

Streams of one leaf of ``n`` values, ``B`` the block size, ``N = ⌈n/B⌉``:

=========  ===========================================  =====================
codec      streams                                      bytes
=========  ===========================================  =====================
int8       ``s8[n]`` codes, ``f32[N]`` scales             ``n + 4N``
fp8        ``u8[n]`` e4m3 bits, ``f32[N]`` scales         ``n + 4N``
int4       ``u8[⌈n/2⌉]`` nibbles (two's complement)      ``⌈n/2⌉ + 4N``
fp4        ``u8[⌈n/2⌉]`` e2m1 nibbles                    ``⌈n/2⌉ + 4N``
topk       ``u8`` indices (``b_idx`` bits), values       see below
=========  ===========================================  =====================

Top-k with chunk ``C``, ``c`` chunks and ``m`` kept real values
(``codecs.topk``): indices packed to ``b_idx = ⌈log2 C⌉`` bits,
``⌈m b_idx / 8⌉`` bytes (none when ``C = 1``); values as ``f32[m]``,
``bf16[m]``, ``s8[m]``, 4-bit nibbles ``u8[⌈m/2⌉]`` or ternary 2-bit
``u8[⌈m/4⌉]`` (``value_bits`` 32, 16, 8, 4, 2), and ``f32[c]`` scales for 8,
4 and 2 bits. So a leaf's bytes exceed ``encoded_bytes(n)`` only by the
rounding of each packed stream up to a whole byte: at most half a byte for
int4/fp4, under two bytes for top-k (:func:`wire_bytes` is exact).

Dense codecs (identity, bf16) have no wire format here: their payloads are
summed by the all-reduce (``exchange.average``).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from autoloco_jax.compression import codecs, packing

#: The wire's buffers by name, and their dtypes.
DTYPES = {"s8": jnp.int8, "u8": jnp.uint8, "bf16": jnp.bfloat16, "f32": jnp.float32}
_ITEM_BYTES = {"s8": 1, "u8": 1, "bf16": 2, "f32": 4}
_BLOCK = ("int8", "fp8", "int4", "fp4")
_TOPK_VALUES = {32: "f32", 16: "bf16", 8: "s8", 4: "u8", 2: "u8"}


def carries(codec: codecs.Codec) -> bool:
  """Whether ``codec`` has a wire format (every codec that is not dense)."""
  return codec.name in _BLOCK or codec.name == "topk"


def _topk_sizes(codec: codecs.Codec, n: int) -> tuple[int, int, int, int]:
  """``(k, c, m, b_idx)`` of a top-k leaf of ``n`` values."""
  p = dict(codec.params)
  size = p["chunk_size"]
  k = codecs.topk_k(size, p["density"])
  c = -(-n // size)
  m = (c - 1) * k + min(k, n - (c - 1) * size)
  return k, c, m, (size - 1).bit_length()


def streams(codec: codecs.Codec, n: int) -> list[tuple[str, str, int]]:
  """A leaf's streams in order: ``(field, buffer, length)`` (elements)."""
  p = dict(codec.params)
  if codec.name in _BLOCK:
    values = {"int8": ("s8", n), "fp8": ("u8", n)}.get(
        codec.name, ("u8", packing.packed_bytes(n, 4))
    )
    return [("values",) + values, ("scales", "f32", -(-n // p["block_size"]))]
  _, c, m, b_idx = _topk_sizes(codec, n)
  bits = p["value_bits"]
  out = [("indices", "u8", packing.packed_bytes(m, b_idx))] if b_idx else []
  length = m if bits >= 8 else packing.packed_bytes(m, bits)
  out.append(("values", _TOPK_VALUES[bits], length))
  if bits <= 8:
    out.append(("scales", "f32", c))
  return out


def _pack(codec: codecs.Codec, field: str, x: jax.Array, n: int) -> jax.Array:
  """One payload field as its stream (``n``: the leaf's values)."""
  if field == "scales":
    return x
  if codec.name == "topk":
    _, _, m, b_idx = _topk_sizes(codec, n)
    flat = x.reshape(-1)[:m]
    if field == "indices":
      return packing.pack_bits(flat, b_idx)
    bits = dict(codec.params)["value_bits"]
    return flat if bits >= 8 else packing.pack_bits(packing.to_unsigned(flat, bits), bits)
  flat = x.reshape(-1)[:n]
  if codec.name == "fp8":
    return jax.lax.bitcast_convert_type(flat, jnp.uint8)
  if codec.name == "int4":
    return packing.pack_bits(packing.to_unsigned(flat, 4), 4)
  if codec.name == "fp4":
    return packing.pack_bits(flat, 4)
  return flat


def _unpack_topk(codec: codecs.Codec, field: str, s: jax.Array, n: int) -> jax.Array:
  k, c, m, b_idx = _topk_sizes(codec, n)
  pad = c * k - m  # the last chunk's slots beyond its real values
  if field == "indices":
    idx = packing.unpack_bits(s, m, b_idx).astype(jnp.int32)
    # Distinct positions past the last chunk's real values: decode sets them
    # to 0 and drops them, as it drops the padding top_k picked there.
    tail = jnp.arange(k - pad, k, dtype=jnp.int32)
    return jnp.concatenate([idx, tail]).reshape(c, k)
  bits = dict(codec.params)["value_bits"]
  if bits < 8:
    s = packing.to_signed(packing.unpack_bits(s, m, bits), bits)
  return jnp.pad(s, (0, pad)).reshape(c, k)


def _unpack(codec: codecs.Codec, field: str, s: jax.Array, n: int) -> jax.Array:
  """Inverse of :func:`_pack`: the payload field, padded back to its blocks."""
  if field == "scales":
    return s
  if codec.name == "topk":
    return _unpack_topk(codec, field, s, n)
  if codec.name == "fp8":
    s = jax.lax.bitcast_convert_type(s, jnp.float8_e4m3fn)
  elif codec.name == "int4":
    s = packing.to_signed(packing.unpack_bits(s, n, 4), 4)
  elif codec.name == "fp4":
    s = packing.unpack_bits(s, n, 4).astype(jnp.uint8)
  block = dict(codec.params)["block_size"]
  return jnp.pad(s, (0, -n % block)).reshape(-1, block)


def to_wire(codec: codecs.Codec, leaves: list[jax.Array]) -> tuple[dict, list]:
  """``(buffers, sent)`` of one worker's message ``leaves``: the wire's 1-D
  buffers by name (:data:`DTYPES`; every leaf's streams, in order) and each
  leaf's ``roundtrip`` (float32), what the receivers will decode."""
  parts: dict[str, list[jax.Array]] = {}
  sent = []
  for x in leaves:
    payload = codec.encode(x)
    sent.append(codec.decode(payload))
    for field, buffer, _ in streams(codec, x.size):
      parts.setdefault(buffer, []).append(_pack(codec, field, payload.data[field], x.size))
  return {b: jnp.concatenate(p) for b, p in parts.items()}, sent


def from_wire(codec: codecs.Codec, buffers: dict, shapes: list[tuple]) -> list[jax.Array]:
  """The decoded leaves (float32, ``shapes``) of one worker's ``buffers``."""
  offsets = dict.fromkeys(buffers, 0)
  out = []
  for shape in shapes:
    n = math.prod(shape)
    data = {}
    for field, buffer, length in streams(codec, n):
      start = offsets[buffer]
      s = buffers[buffer][start : start + length]
      offsets[buffer] = start + length
      data[field] = _unpack(codec, field, s, n)
    if codec.name == "topk" and "indices" not in data:  # C = 1: position 0
      k, c, _, _ = _topk_sizes(codec, n)
      data["indices"] = jnp.zeros((c, k), jnp.int32)
    out.append(codec.decode(codecs.Payload(data, tuple(shape))))
  return out


def wire_bytes(codec: codecs.Codec, shapes: list[tuple]) -> dict[str, int]:
  """Bytes per worker of each buffer for leaves of ``shapes`` (what one
  worker's payload adds to an all-gather)."""
  total: dict[str, int] = {}
  for shape in shapes:
    for _, buffer, length in streams(codec, math.prod(shape)):
      total[buffer] = total.get(buffer, 0) + length * _ITEM_BYTES[buffer]
  return total


def shapes_of(leaves: Any) -> list[tuple]:
  """The shapes of ``leaves`` (arrays or shape structs), as tuples."""
  return [tuple(x.shape) for x in leaves]
