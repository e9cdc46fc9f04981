r"""Bit packing of codes into bytes, for payloads on the wire (``wire_format.py``).

A codec's codes are held one per byte (or one per int32 index) in memory; on
the wire ``w``-bit codes are packed densely, least significant bit first:
code ``i`` occupies bits ``[i w, (i + 1) w)`` of the byte stream, so ``n``
codes take ``⌈n w / 8⌉`` bytes (uint8). Two 4-bit codes share a byte (the
first in the low nibble), four 2-bit codes, and two 12-bit indices (the
default top-k chunk of 4096) three bytes.

Signed codes in ``[−2^{w−1}, 2^{w−1})`` travel as their ``w``-bit two's
complement (:func:`to_unsigned`, :func:`to_signed`): int4's ``[−7, 7]`` as a
nibble, the ternary ``{−1, 0, 1}`` of 2-bit top-k as ``{3, 0, 1}``.

Every function is pure ``jax.numpy`` on a 1-D array with static sizes, so it
jits and vmaps; ``unpack_bits(pack_bits(c, w), n, w) == c`` for codes below
``2^w`` (``tests/test_wire.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def packed_bytes(n: int, width: int) -> int:
  """``⌈n w / 8⌉``: bytes of ``n`` codes of ``width`` bits."""
  return -(-n * width // 8)


def to_unsigned(q: jax.Array, width: int) -> jax.Array:
  """A signed code's ``width``-bit two's complement, uint8 (``width <= 8``)."""
  return (q.astype(jnp.int32) & ((1 << width) - 1)).astype(jnp.uint8)


def to_signed(u: jax.Array, width: int) -> jax.Array:
  """Inverse of :func:`to_unsigned`: sign-extends ``width``-bit codes, int8."""
  sign = 1 << (width - 1)
  return ((u.astype(jnp.int32) ^ sign) - sign).astype(jnp.int8)


def pack_bits(codes_N: jax.Array, width: int) -> jax.Array:
  """``N`` codes of ``width`` bits (each ``< 2^width``; 1 to 32 bits) packed
  into ``⌈N w / 8⌉`` bytes, uint8, least significant bit first."""
  n = codes_N.shape[0]
  if 8 % width == 0:  # whole codes per byte: 8, 4, 2 or 1 bits
    per = 8 // width
    c = jnp.pad(codes_N.astype(jnp.uint32), (0, -n % per)).reshape(-1, per)
    shifts = jnp.arange(per, dtype=jnp.uint32) * width
    return jnp.sum(c << shifts, axis=1, dtype=jnp.uint32).astype(jnp.uint8)
  bits_NxW = (codes_N.astype(jnp.uint32)[:, None] >> jnp.arange(width, dtype=jnp.uint32)) & 1
  bits = bits_NxW.reshape(-1)
  bits = jnp.pad(bits, (0, -bits.shape[0] % 8)).reshape(-1, 8)
  return jnp.sum(bits << jnp.arange(8, dtype=jnp.uint32), axis=1, dtype=jnp.uint32).astype(
      jnp.uint8
  )


def unpack_bits(packed: jax.Array, n: int, width: int) -> jax.Array:
  """The ``n`` codes of ``width`` bits in ``packed`` (:func:`pack_bits`'s
  layout), uint32."""
  p = packed.astype(jnp.uint32)
  if 8 % width == 0:
    per = 8 // width
    shifts = jnp.arange(per, dtype=jnp.uint32) * width
    codes = (p[:, None] >> shifts) & ((1 << width) - 1)
    return codes.reshape(-1)[:n]
  bits = ((p[:, None] >> jnp.arange(8, dtype=jnp.uint32)) & 1).reshape(-1)
  bits_NxW = bits[: n * width].reshape(n, width)
  return jnp.sum(bits_NxW << jnp.arange(width, dtype=jnp.uint32), axis=1, dtype=jnp.uint32)
