"""The pseudo-gradient codecs: exactness on their grids, the documented error
bounds on random data, shapes, jit, bytes on the wire against hand computations,
chunk-wise top-k, and error feedback's conservation of what was accumulated.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from autoloco_jax.compression import codecs, exchange
from autoloco_jax.sim import clock

BLOCK = 128
QUANTIZERS = ("fp8", "fp4", "int8", "int4")


def normal(shape, seed=0, scale=1.0):
  return scale * jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def with_zero_block(n=1000, block=BLOCK, seed=0):
  """Normal data whose second block is all zeros (a zero scale)."""
  x = np.array(normal((n,), seed))
  x[block : 2 * block] = 0.0
  return jnp.asarray(x)


def block_scales(x, block, levels):
  """Per-value scale ``absmax_of_its_block / levels`` (numpy)."""
  flat = np.asarray(x, np.float64).reshape(-1)
  n = flat.size
  pad = np.pad(np.abs(flat), (0, -n % block)).reshape(-1, block)
  return np.repeat(pad.max(axis=1) / levels, block)[:n]


# ----------------------------------------------------------------------------
# Dense codecs.


def test_identity_is_exact_bit_for_bit():
  x = normal((7, 11, 3)) * 1e3
  x = x.at[0, 0, 0].set(1e-40)  # a float32 subnormal survives too
  y = codecs.roundtrip(codecs.make("identity"), x)
  np.testing.assert_array_equal(
      np.asarray(y).view(np.uint32), np.asarray(x).view(np.uint32)
  )


def test_bf16_exact_on_bf16_values_and_within_bound_otherwise():
  codec = codecs.make("bf16")
  on_grid = normal((1000,)).astype(jnp.bfloat16).astype(jnp.float32)
  np.testing.assert_array_equal(codecs.roundtrip(codec, on_grid), on_grid)
  x = normal((1000,), seed=1) * 37.0
  err = np.abs(np.asarray(codecs.roundtrip(codec, x)) - np.asarray(x))
  assert np.all(err <= 2.0**-8 * np.abs(np.asarray(x)))
  assert err.max() > 0  # not vacuous
  # Round to nearest even: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7.
  ties = jnp.asarray([1 + 2**-8, 1 + 3 * 2**-8], jnp.float32)
  np.testing.assert_array_equal(codecs.roundtrip(codec, ties), [1.0, 1 + 2**-6])


# ----------------------------------------------------------------------------
# Per-block quantizers.


def on_grid_values(name, seed=0):
  """Values on the codec's grid in blocks whose scale is a power of two (so the
  scale absmax/levels is computed exactly), each block reaching its absmax."""
  rng = np.random.default_rng(seed)
  n_blocks = 5
  scale_N = 2.0 ** rng.integers(-10, 5, n_blocks)
  if name in ("int8", "int4"):
    levels = 127 if name == "int8" else 7
    grid = np.arange(-levels, levels + 1, dtype=np.float64)
  elif name == "fp4":
    levels = 6.0
    mags = np.asarray(codecs.FP4_E2M1_VALUES)
    grid = np.concatenate([-mags, mags])
  else:
    levels = 448.0
    all_fp8 = np.arange(256, dtype=np.uint8).view(jnp.float8_e4m3fn).astype(np.float64)
    grid = all_fp8[np.isfinite(all_fp8)]
  q = rng.choice(grid, size=(n_blocks, BLOCK))
  q[:, 0] = levels * rng.choice([-1.0, 1.0], n_blocks)  # the block's absmax
  return jnp.asarray((q * scale_N[:, None]).reshape(-1), jnp.float32)


@pytest.mark.parametrize("name", QUANTIZERS)
def test_quantizer_exact_on_its_grid(name):
  codec = codecs.make(name, block_size=BLOCK)
  x = on_grid_values(name)
  np.testing.assert_array_equal(codecs.roundtrip(codec, x), x)


def quantizer_bound(name, x, block):
  """The documented bound on |x - x_hat|, per value (numpy float64)."""
  a = np.abs(np.asarray(x, np.float64)).reshape(-1)
  if name == "int8":
    return block_scales(x, block, 127) / 2
  if name == "int4":
    return block_scales(x, block, 7) / 2
  if name == "fp8":
    return np.maximum(2.0**-4 * a, 2.0**-10 * block_scales(x, block, 448))
  return np.maximum(block_scales(x, block, 6) / 4, a / 4)  # fp4


@pytest.mark.parametrize("name", QUANTIZERS)
@pytest.mark.parametrize("n,block", [(1000, 128), (1024, 128), (77, 32), (5, 128)])
def test_quantizer_within_bound_on_normal_data_with_zero_blocks(name, n, block):
  codec = codecs.make(name, block_size=block)
  x = with_zero_block(n, block, seed=n) if n > 2 * block else normal((n,), seed=n)
  y = np.asarray(codecs.roundtrip(codec, x), np.float64)
  assert np.all(np.isfinite(y))
  err = np.abs(y - np.asarray(x, np.float64))
  bound = quantizer_bound(name, x, block)
  # Float32 rounding of x/s and q*s adds a few ulps of the block's absmax.
  slack = 4 * 2.0**-24 * block_scales(x, block, 1)
  assert np.all(err <= bound + slack), (err - bound).max()
  if n > 2 * block:
    np.testing.assert_array_equal(y[block : 2 * block], 0.0)


def test_fp4_rounds_to_nearest_ties_to_even_like_ml_dtypes():
  # Every midpoint, and points around it, at scale 1 (one block with absmax 6).
  mags = np.asarray(codecs.FP4_E2M1_VALUES, np.float32)
  mids = (mags[:-1] + mags[1:]) / 2
  y = np.concatenate([mags, mids, mids * (1 + 1e-6), mids * (1 - 1e-6)])
  y = np.concatenate([y, -y, np.linspace(-7, 7, 1001, dtype=np.float32)])
  codes = codecs.fp4_e2m1_round(jnp.asarray(y))
  got = np.asarray(codecs.fp4_e2m1_value(codes))
  want = np.asarray(jnp.asarray(y).astype(jnp.float4_e2m1fn).astype(jnp.float32))
  np.testing.assert_array_equal(got, want)
  # The nearest representable value, always.
  grid = np.concatenate([-mags, mags])
  nearest = np.min(np.abs(np.clip(y, -6, 6)[:, None] - grid[None, :]), axis=1)
  np.testing.assert_array_equal(np.abs(got - np.clip(y, -6, 6)), nearest)


def test_quantizers_preserve_shape_and_dtype_and_jit():
  for name in codecs.CODECS:
    codec = codecs.make(name)
    for shape in [(), (5, 7, 3), (0, 4)]:
      x = normal(shape, seed=3)
      eager = codecs.roundtrip(codec, x)
      jitted = jax.jit(codec.decode)(jax.jit(codec.encode)(x))
      assert eager.shape == shape and eager.dtype == jnp.float32, (name, shape)
      np.testing.assert_array_equal(jitted, eager)
  # A bfloat16 input is cast to float32 first.
  y = codecs.roundtrip(codecs.make("int8"), normal((10,)).astype(jnp.bfloat16))
  assert y.dtype == jnp.float32


def test_tree_roundtrip():
  codec = codecs.make("int4", block_size=16)
  tree = {"w": normal((4, 9), seed=1), "b": [normal((3,), seed=2)]}
  out = codecs.tree_roundtrip(codec, tree)
  assert jax.tree.structure(out) == jax.tree.structure(tree)
  for leaf, x in zip(jax.tree.leaves(out), jax.tree.leaves(tree)):
    np.testing.assert_array_equal(leaf, codecs.roundtrip(codec, x))
  assert codecs.tree_encoded_bytes(codec, tree) == (36 / 2 + 3 * 4) + (3 / 2 + 4)


# ----------------------------------------------------------------------------
# Bytes on the wire.


def test_encoded_bytes_hand_values():
  n = 1000
  assert codecs.make("identity").encoded_bytes(n) == 4000
  assert codecs.make("bf16").encoded_bytes(n) == 2000
  # ceil(1000 / 128) = 8 blocks, 4 bytes of scale each.
  assert codecs.make("int4", block_size=128).encoded_bytes(n) == 500 + 8 * 4
  assert codecs.make("fp4", block_size=128).encoded_bytes(n) == 500 + 8 * 4
  assert codecs.make("int8", block_size=128).encoded_bytes(n) == 1000 + 8 * 4
  assert codecs.make("fp8", block_size=128).encoded_bytes(n) == 1000 + 8 * 4
  assert codecs.make("int8", block_size=100).encoded_bytes(n) == 1000 + 10 * 4
  assert codecs.make("int4").encoded_bytes(1) == 0.5 + 4
  # topk, chunks of 256: ceil(1000/256) = 4 chunks, the last has 232 values;
  # density 1/32 keeps 8 per chunk; indices take 8 bits.
  topk = lambda bits: codecs.make("topk", chunk_size=256, density=1 / 32, value_bits=bits)
  assert topk(32).encoded_bytes(n) == 32 * (8 + 32) / 8
  assert topk(16).encoded_bytes(n) == 32 * (8 + 16) / 8
  assert topk(8).encoded_bytes(n) == 32 * (8 + 8) / 8 + 4 * 4
  assert topk(4).encoded_bytes(n) == 32 * (8 + 4) / 8 + 4 * 4
  assert topk(2).encoded_bytes(n) == 32 * (8 + 2) / 8 + 4 * 4
  # chunk 1000 (10 index bits), density 0.01: k = 10 from one chunk; a last
  # chunk of 3 values keeps only its 3 real values.
  c = codecs.make("topk", chunk_size=1000, density=0.01, value_bits=2)
  assert c.encoded_bytes(1000) == 10 * 12 / 8 + 4
  assert c.encoded_bytes(1003) == 13 * 12 / 8 + 8
  for name in codecs.CODECS:
    assert codecs.make(name).encoded_bytes(0) == 0


def test_traffic_dense_allreduce_and_sparse_allgather():
  # A codec's payload is moved by comm's collectives: summed on the way (ring
  # all-reduce) when dense, gathered and decoded (ring all-gather) otherwise.
  n, k = 1000, 4
  ident, bf16, int8 = (codecs.make(c) for c in ("identity", "bf16", "int8"))
  assert clock.ring_allreduce(1, k, ident.encoded_bytes(n)) == clock.ring_allreduce(n, k, 4)
  assert clock.ring_allreduce(1, k, bf16.encoded_bytes(n)) == clock.ring_allreduce(n, k, 2)
  assert clock.ring_allgather(int8.encoded_bytes(n), k) == clock.Traffic(
      3 * (1000 + 8 * 4), 3
  )
  assert clock.ring_allgather(int8.encoded_bytes(n), 1) == clock.Traffic(0.0, 0)
  assert ident.dense and bf16.dense
  assert not any(codecs.make(c).dense for c in ("fp8", "fp4", "int8", "int4", "topk"))


# ----------------------------------------------------------------------------
# Chunk-wise top-k.


@pytest.mark.parametrize("bits", codecs.TOPK_VALUE_BITS)
def test_topk_keeps_the_k_largest_per_chunk(bits):
  chunk, density, n = 64, 0.1, 1000  # k = round(6.4) = 6; 16 chunks, last has 40
  codec = codecs.make("topk", chunk_size=chunk, density=density, value_bits=bits)
  k = codecs.topk_k(chunk, density)
  assert k == 6
  x = normal((n,), seed=bits)
  payload = jax.jit(codec.encode)(x)
  assert payload.data["indices"].shape == (16, k)
  y = np.asarray(codec.decode(payload))
  xs = np.asarray(x)
  for c in range(16):
    xc, yc = xs[c * chunk : (c + 1) * chunk], y[c * chunk : (c + 1) * chunk]
    kept = np.flatnonzero(yc)
    assert len(kept) == k
    dropped = np.setdiff1d(np.arange(len(xc)), kept)
    assert np.abs(xc[kept]).min() >= np.abs(xc[dropped]).max()
    v = xc[kept]
    if bits == 32:
      np.testing.assert_array_equal(yc[kept], v)
    elif bits == 16:
      assert np.all(np.abs(yc[kept] - v) <= 2.0**-8 * np.abs(v))
    elif bits == 2:
      np.testing.assert_allclose(yc[kept], np.sign(v) * np.abs(v).mean(), rtol=1e-6)
    else:
      s = np.abs(v).max() / (127 if bits == 8 else 7)
      assert np.all(np.abs(yc[kept] - v) <= s / 2 * (1 + 1e-5))
      np.testing.assert_array_equal(np.sign(yc[kept]), np.sign(v))


def test_topk_padding_zeros_and_small_last_chunk():
  codec = codecs.make("topk", chunk_size=16, density=0.5, value_bits=32)  # k = 8
  x = jnp.concatenate([jnp.zeros(16), -jnp.arange(1.0, 21.0)])  # 36 values
  y = np.asarray(codecs.roundtrip(codec, x))
  np.testing.assert_array_equal(y[:16], 0.0)  # zero chunk: no NaN, zeros out
  np.testing.assert_array_equal(y[16:32], np.where(np.arange(16) >= 8, x[16:32], 0))
  np.testing.assert_array_equal(y[32:], x[32:])  # last chunk, 4 real values < k
  # k covers the whole chunk: exact.
  full = codecs.make("topk", chunk_size=16, density=1.0)
  x = normal((5, 7))
  np.testing.assert_array_equal(codecs.roundtrip(full, x), x)


# ----------------------------------------------------------------------------
# Registry and config.


def test_make_and_from_config():
  assert codecs.make("int8", block_size=64) == codecs.make("int8", block_size=64)
  assert hash(codecs.make("fp4")) == hash(codecs.make("fp4"))
  assert codecs.make("int8", block_size=64) != codecs.make("int8", block_size=32)
  with pytest.raises(ValueError, match="unknown codec"):
    codecs.make("fp2")
  with pytest.raises(ValueError, match="takes"):
    codecs.make("bf16", block_size=4)
  with pytest.raises(ValueError, match="density"):
    codecs.make("topk", density=0.0)
  with pytest.raises(ValueError, match="value_bits"):
    codecs.make("topk", value_bits=3)
  with pytest.raises(ValueError, match="block_size"):
    codecs.make("int8", block_size=0)
  cfg = ml_collections.ConfigDict(
      dict(
          codec="topk",
          block_size=64,
          chunk_size=512,
          density=0.02,
          value_bits=2,
          ef_beta=0.9,
      )
  )
  assert codecs.from_config(cfg) == codecs.make(
      "topk", chunk_size=512, density=0.02, value_bits=2
  )
  assert codecs.ef_beta_from_config(cfg) == 0.9
  cfg.codec = "int4"
  assert codecs.from_config(cfg) == codecs.make("int4", block_size=64)
  assert codecs.from_config({}) == codecs.make("identity")
  assert codecs.from_config({"codec": "fp8", "block_size": None}) == codecs.make("fp8")
  assert codecs.ef_beta_from_config({}) is None
  with pytest.raises(ValueError, match="ef_beta"):
    codecs.ef_beta_from_config({"ef_beta": 1.5})


# ----------------------------------------------------------------------------
# Error feedback.


@pytest.mark.parametrize("beta", [1.0, 0.9])
@pytest.mark.parametrize(
    "name,kw",
    [
        ("int4", {"block_size": 32}),
        ("fp4", {}),
        ("topk", {"chunk_size": 64, "value_bits": 2}),
    ],
)
def test_error_feedback_conserves_the_accumulated_deltas(name, kw, beta):
  compression = exchange.Compression(codecs.make(name, **kw), ef_beta=beta)
  step = jax.jit(exchange.encode_workers, static_argnums=0)
  # Two workers: a leading axis, each worker its own residual.
  shapes = {"w": (2, 13, 17), "b": (2, 5)}
  residual = {k: jnp.zeros(s) for k, s in shapes.items()}
  weighted_sent = {k: np.zeros(s) for k, s in shapes.items()}
  weighted_delta = {k: np.zeros(s) for k, s in shapes.items()}
  steps = 6
  for t in range(steps):
    delta = {k: normal(s, seed=10 * t + i) for i, (k, s) in enumerate(shapes.items())}
    sent, new_residual = step(compression, delta, residual)
    # One step: sent + e_t == beta e_{t-1} + delta (float32 subtraction only).
    for k in shapes:
      acc = beta * np.asarray(residual[k]) + np.asarray(delta[k])
      np.testing.assert_allclose(sent[k] + new_residual[k], acc, rtol=0, atol=1e-6)
      weighted_sent[k] = beta * weighted_sent[k] + np.asarray(sent[k], np.float64)
      weighted_delta[k] = beta * weighted_delta[k] + np.asarray(delta[k], np.float64)
    residual = new_residual
  for k in shapes:
    assert np.abs(np.asarray(residual[k])).max() > 0  # lossy: not vacuous
    np.testing.assert_allclose(
        weighted_sent[k] + np.asarray(residual[k], np.float64),
        weighted_delta[k],
        rtol=0,
        atol=1e-5,
    )


def test_error_feedback_with_identity_has_zero_residual():
  compression = exchange.Compression(codecs.make("identity"), ef_beta=0.5)
  residual = {"w": jnp.zeros((2, 8, 3))}
  for t in range(3):
    delta = {"w": normal((2, 8, 3), seed=t)}
    acc = 0.5 * residual["w"] + delta["w"]
    sent, residual = exchange.encode_workers(compression, delta, residual)
    np.testing.assert_array_equal(sent["w"], acc)
    np.testing.assert_array_equal(residual["w"], 0.0)


@pytest.mark.parametrize("name", QUANTIZERS)
def test_quantizer_tiny_blocks_decode_to_zeros_without_nan(name):
  # Block 0: magnitudes ~1e-38, whose scale absmax/levels is below float32's
  # smallest normal: sent as scale 0, decoded as zeros. Block 1: ~1e-30, fine.
  x = jnp.concatenate([normal((32,)) * 1e-38, normal((32,), seed=1) * 1e-30])
  payload = jax.jit(codecs.make(name, block_size=32).encode)(x)
  y = np.asarray(codecs.make(name, block_size=32).decode(payload), np.float64)
  assert np.all(np.isfinite(y))
  assert payload.data["scales"][0] == 0 and payload.data["scales"][1] > 0
  np.testing.assert_array_equal(y[:32], 0.0)
  err = np.abs(y[32:] - np.asarray(x[32:], np.float64))
  assert np.all(err <= 1.01 * quantizer_bound(name, x[32:], 32))
