"""Compressed payloads on the wire (compression/packing.py, wire_format.py,
wire.py): codes packed losslessly, the all-gathered payloads' sync equal to the
decode-then-mean sync bit for bit, the compiled collectives carrying int8 and
uint8 codes, their bytes the clock's, and the benchmark command."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.compression import codecs, packing, shards, wire_format
from autoloco_jax.runtime import replicas, state as state_lib
from autoloco_jax.runtime.contract import Setup
from benchmarks import wire as wire_benchmark
from tests.helpers import config, run_main, tokens, toy_loss, toy_params

K = 4

#: The codecs the sync is checked with: ``(codec, its config fields)``.
CODECS = {
    "int8": ("int8", dict(block_size=16)),
    "fp4": ("fp4", dict(block_size=16)),
    "topk32": ("topk", dict(chunk_size=16, density=0.25, value_bits=32)),
    "topk2": ("topk", dict(chunk_size=16, density=0.25, value_bits=2)),
}


def _bits(x):
  x = np.asarray(x)
  return x.view(np.uint8 if x.dtype.itemsize == 1 else f"u{x.dtype.itemsize}")


# ----------------------------------------------------------------------------
# Packing.


@pytest.mark.parametrize("width", [1, 2, 3, 4, 8, 12, 13, 16])
@pytest.mark.parametrize("n", [0, 1, 7, 33])
def test_pack_bits_round_trip(width, n):
  codes = np.random.default_rng(width * 100 + n).integers(0, 2**width, n)
  packed = jax.jit(packing.pack_bits, static_argnums=1)(jnp.asarray(codes), width)
  assert packed.dtype == jnp.uint8
  assert packed.shape == (packing.packed_bytes(n, width),) == (math.ceil(n * width / 8),)
  np.testing.assert_array_equal(packing.unpack_bits(packed, n, width), codes)


def test_pack_bits_layout_is_least_significant_bit_first():
  # Two 12-bit indices in three bytes; two nibbles, the first low; 2-bit codes.
  packed = packing.pack_bits(jnp.asarray([0xABC, 0x123]), 12)
  np.testing.assert_array_equal(packed, [0xBC, 0x3A, 0x12])
  np.testing.assert_array_equal(packing.pack_bits(jnp.asarray([0x5, 0xE, 0x7]), 4), [0xE5, 0x07])
  np.testing.assert_array_equal(packing.pack_bits(jnp.asarray([1, 3, 0, 2, 1]), 2), [0x8D, 0x01])


@pytest.mark.parametrize("width", [2, 4, 8])
def test_signed_codes_round_trip(width):
  q = jnp.arange(-(2 ** (width - 1)), 2 ** (width - 1), dtype=jnp.int8)
  u = packing.to_unsigned(q, width)
  assert u.dtype == jnp.uint8 and int(u.max()) < 2**width
  np.testing.assert_array_equal(packing.to_signed(u, width), q)


# ----------------------------------------------------------------------------
# One worker's payload as buffers.

ALL_CODECS = [
    codecs.int8(16),
    codecs.fp8(16),
    codecs.int4(16),
    codecs.fp4(16),
    *(codecs.topk(16, 0.25, bits) for bits in codecs.TOPK_VALUE_BITS),
    codecs.topk(4096, 1 / 64, 2),  # SparseLoCo's: 12-bit indices
    codecs.topk(10, 0.5, 4),  # k = 5 > the last chunk's 3 values
    codecs.topk(1, 1.0, 32),  # no index bits
]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: f"{c.name}{dict(c.params)}")
def test_wire_format_round_trip_and_bytes(codec):
  """``decode(from_wire(to_wire(x)))`` is ``roundtrip(x)`` bit for bit; the
  buffers are ``wire_bytes`` long and exceed ``encoded_bytes`` by under a
  byte per packed stream."""
  rng = np.random.default_rng(0)
  shapes = [(3, 7), (33,), (16,), (5,), (2, 2, 1)]
  leaves = [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in shapes]
  buffers, sent = jax.jit(lambda x: wire_format.to_wire(codec, x))(leaves)
  back = jax.jit(lambda b: wire_format.from_wire(codec, b, shapes))(buffers)
  for x, s, b in zip(leaves, sent, back):
    want = _bits(codecs.roundtrip(codec, x))
    np.testing.assert_array_equal(_bits(s), want)
    np.testing.assert_array_equal(_bits(b), want)
  assert {k: v.dtype for k, v in buffers.items()} == {
      k: jnp.dtype(wire_format.DTYPES[k]) for k in buffers
  }
  sizes = wire_format.wire_bytes(codec, shapes)
  assert sizes == {k: v.size * v.dtype.itemsize for k, v in buffers.items()}
  extra = sum(sizes.values()) - codecs.tree_encoded_bytes(codec, leaves)
  packed = sum(
      1 for s in shapes for f, b, _ in wire_format.streams(codec, math.prod(s)) if b == "u8"
  )
  assert 0 <= extra < max(packed, 1)
  if codec.name in ("int8", "fp8") or dict(codec.params).get("value_bits") in (32, 16):
    if codec.name != "topk" or dict(codec.params)["chunk_size"] == 1:
      assert extra == 0


# ----------------------------------------------------------------------------
# The sync: wire against decode-then-mean.


def _cfg(codec, aggregate="mean", ef_beta=0.5, fragments=1):
  name, fields = CODECS[codec]
  c = config("diloco", K=K, h=2)
  c.compress.codec = name
  c.compress.ef_beta = ef_beta
  c.compress.aggregate = aggregate
  for key, value in fields.items():
    c.compress[key] = value
  c.stream.fragments = fragments
  return c


def _build(cfg, num_devices, on_wire):
  mesh = replicas.make_mesh(K, num_devices)
  hparams = registry.from_config(cfg)
  compression = dataclasses.replace(hparams.compression, wire=on_wire)
  hparams = dataclasses.replace(hparams, compression=compression)
  algo = hparams.build(Setup.from_config(cfg, toy_loss, mesh))
  return algo, state_lib.place(algo.init_state(toy_params()), mesh), mesh


def _three_rounds(cfg, num_devices, on_wire, present):
  algo, state, mesh = _build(cfg, num_devices, on_wire)
  data, metrics = tokens(K, 6), []
  for r in range(3):
    state = algo.inner(state, replicas.put_workers(data[:, 2 * r : 2 * r + 2], mesh), np.int32(2))
    state, m = algo.sync(state, replicas.put_workers(np.float32(present), mesh))
    metrics.append(m)
  return jax.device_get((state, metrics))


def _assert_same_bits(a, b):
  leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(leaves_a) == len(leaves_b)
  for x, y in zip(leaves_a, leaves_b):
    assert np.asarray(x).dtype == np.asarray(y).dtype
    np.testing.assert_array_equal(_bits(x), _bits(y))


@pytest.mark.parametrize("aggregate", ["mean", "senders"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_wire_sync_is_the_decode_then_mean_sync_bit_for_bit(codec, aggregate):
  """Three rounds with error feedback and worker 1 absent: the whole state
  (parameters, outer momentum, residuals) and every metric, bit for bit."""
  cfg = _cfg(codec, aggregate)
  present = [1, 0, 1, 1]
  _assert_same_bits(
      _three_rounds(cfg, 4, True, present), _three_rounds(cfg, 4, False, present)
  )


@pytest.mark.parametrize(
    "num_devices, codec, ef_beta, fragments",
    [(1, "int8", 0.5, 2), (2, "int8", None, 1), (2, "topk2", 0.5, 2), (4, "fp4", 0.5, 2)],
)
def test_wire_sync_bit_for_bit_on_any_mesh_and_fragment(num_devices, codec, ef_beta, fragments):
  """1, 2 and 4 devices, without error feedback, and streaming fragments (only
  the fragment's leaves are sent)."""
  cfg = _cfg(codec, ef_beta=ef_beta, fragments=fragments)
  ones = [1, 1, 1, 1]
  _assert_same_bits(
      _three_rounds(cfg, num_devices, True, ones), _three_rounds(cfg, num_devices, False, ones)
  )


# ----------------------------------------------------------------------------
# The compiled program.


def _compiled_collectives(cfg, on_wire):
  algo, state, mesh = _build(cfg, 4, on_wire)
  present = replicas.put_workers(np.ones(K, np.float32), mesh)
  return wire_benchmark.collectives(algo.sync.lower(state, present).compile().as_text())


@pytest.mark.parametrize("codec, values", [("int8", "s8"), ("fp4", "u8"), ("topk2", "u8")])
def test_compiled_sync_gathers_codes_not_float32(codec, values):
  """The payload's all-gathers carry the codes (int8, packed uint8) and the
  float32 scales, their bytes per worker ``wire_bytes``; no collective moves a
  parameter-sized float32 array. Decode-then-mean all-reduces float32."""
  cfg = _cfg(codec)
  found = _compiled_collectives(cfg, True)
  payload = [c for c in found if c["payload"]]
  assert {c["op"] for c in payload} == {"all-gather"}
  dtypes = {a["dtype"] for c in payload for a in c["arrays"]}
  assert dtypes == {values, "f32"}
  shapes = wire_format.shapes_of(jax.tree.leaves(toy_params()))
  want = wire_format.wire_bytes(codecs.from_config(cfg.compress), shapes)
  assert sum(c["bytes"] for c in payload) == K * sum(want.values())
  num_params = sum(math.prod(s) for s in shapes)
  for c in found:  # scales, presence and scalar statistics only
    if not c["payload"]:
      assert all(math.prod(a["shape"]) < num_params // 8 for a in c["arrays"]), c
  old = _compiled_collectives(cfg, False)
  assert any(
      c["op"] == "all-reduce" and any(math.prod(a["shape"]) == 128 for a in c["arrays"])
      for c in old
  )


def test_wire_command(tmp_path):
  """``python -m benchmarks.wire`` on SparseLoCo at :tiny: the compiled
  payload per worker is the clock's, up to the packed streams' rounding."""
  out = tmp_path / "wire.json"
  text = run_main(
      "benchmarks.wire", "--config", "configs/sparseloco.py:tiny", "--out", str(out)
  )
  result = json.loads(out.read_text())
  (branch,) = result["branches"]
  assert "payload per worker" in text and result["devices"] == 4
  assert {a["dtype"] for c in branch["collectives"] if c["payload"] for a in c["arrays"]} == {
      "u8",
      "f32",
  }
  clock, compiled = branch["clock_payload_bytes"], branch["wire_bytes_per_worker"]
  assert clock <= compiled < clock + 2 * 64  # two packed streams per leaf, < 64 leaves
  assert not branch["clock_dense"]


# ----------------------------------------------------------------------------
# The gossip methods: payloads to the neighbours by ppermute.


def _gossip_cfg(name, topo, codec, ef_beta=0.5, **extra):
  codec_name, fields = CODECS[codec]
  c = config(name, K=K, h=2, lr=0.7, momentum=0.5, total=40)
  c.gossip.topology = topo
  c.compress.codec = codec_name
  c.compress.ef_beta = ef_beta
  for key, value in {**fields, **extra}.items():
    c.compress[key] = value
  return c


@pytest.mark.parametrize(
    "name, topo, codec, num_devices",
    [
        ("noloco", "matching", "int8", 4),
        ("noloco", "complete", "fp4", 4),
        ("noloco", "ring", "topk2", 2),
        ("gasloc", "ring", "int8", 2),
        ("gasloc", "complete", "int8", 2),
        ("gasloc", "exponential", "topk32", 4),
    ],
)
def test_gossip_wire_exchange_is_the_decoded_exchange_bit_for_bit(name, topo, codec, num_devices):
  """NoLoCo and GASLoC with the payloads on the wire (ppermute'd codes, or
  all-gathered on the complete graph): three rounds, the whole state and every
  metric bit for bit."""
  cfg = _gossip_cfg(name, topo, codec)
  ones = [1, 1, 1, 1]
  _assert_same_bits(
      _three_rounds(cfg, num_devices, True, ones), _three_rounds(cfg, num_devices, False, ones)
  )


def test_gossip_compiled_exchange_permutes_codes():
  """NoLoCo's pairs on 4 devices: the payload crosses by collective-permutes
  of int8 codes and float32 scales, a worker's ``wire_bytes`` per round's
  matching; no float32 parameter-sized permute is left."""
  cfg = _gossip_cfg("noloco", "matching", "int8")
  found = _compiled_collectives(cfg, True)
  payload = [c for c in found if c["payload"]]
  assert {c["op"] for c in payload} == {"collective-permute"}
  assert {a["dtype"] for c in payload for a in c["arrays"]} == {"s8", "f32"}
  shapes = wire_format.shapes_of(jax.tree.leaves(toy_params()))
  want = wire_format.wire_bytes(codecs.from_config(cfg.compress), shapes)
  # One table of the pool per lax.switch branch; in each, one partner, one row.
  per_branch = {}
  for c in payload:
    per_branch[c["branch"]] = per_branch.get(c["branch"], 0) + c["bytes"]
  assert len(per_branch) == 3  # the 3 matchings of 4 workers
  assert set(per_branch.values()) == {sum(want.values())}
  assert not any(
      c["op"] == "collective-permute" and not c["payload"] and c["bytes"] >= 128 * 4
      for c in found
  )


# ----------------------------------------------------------------------------
# A worker spanning devices: each device sends its own segments (shards.py).


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("count", [2, 3, 4])
def test_segments_decode_to_the_whole_leaf_bit_for_bit(codec, count):
  """A leaf cut into ``S`` segments of whole blocks (chunks), each encoded on
  its own, decodes to the whole leaf's ``roundtrip`` bit for bit: a granule
  never straddles two segments, so the result does not depend on ``S``."""
  name, fields = CODECS[codec]
  c = codecs.make(name, **fields)
  shapes = [(37, 5), (16,), (3, 4, 11), (1,)]  # sizes not multiples of 16, nor of S
  rng = np.random.default_rng(count)
  leaves = [jnp.asarray(rng.standard_normal(s).astype(np.float32)) for s in shapes]
  g = shards.granule(c)
  segs = shards.Segments(
      tuple(shapes), count, tuple(shards.segment_size(math.prod(s), g, count) for s in shapes)
  )
  for i, x in enumerate(leaves):
    parts = segs.split(i, x)
    assert parts.shape == (count, segs.sizes[i]) and segs.sizes[i] % g == 0
    got = segs.join(i, jax.vmap(lambda p: codecs.roundtrip(c, p))(parts))
    np.testing.assert_array_equal(_bits(got), _bits(codecs.roundtrip(c, x)))
    np.testing.assert_array_equal(_bits(segs.join(i, parts)), _bits(x))
  padding = shards.padding_values(shapes, g, count)
  assert padding == sum(count * n - math.prod(s) for s, n in zip(shapes, segs.sizes))
  assert padding < len(shapes) * count * g


@pytest.mark.parametrize(
    "module, overrides",
    [
        ("sparseloco", {}),
        ("sparseloco", {"compress.codec": "int8"}),
        ("noloco", {"compress.codec": "fp4", "compress.ef_beta": 0.9}),
    ],
)
def test_a_worker_spanning_two_devices_sends_each_segment_once(module, overrides):
  """``replica 2 × fsdp 2``: each device all-gathers (or ``ppermute``s) only its
  segments' buffers, a worker's two devices together its whole payload
  (``shards.wire_bytes``: the clock's bytes plus the segments' padding), and
  nothing gathers a parameter-sized array inside the sync (a leaf moves
  between its layout and its segments by all-to-alls)."""
  import importlib

  cfg = importlib.import_module(f"configs.{module}").get_config("tiny")
  cfg.num_devices, cfg.mesh.fsdp = 4, 2
  for key, value in overrides.items():
    section, field = key.split(".")
    cfg[section][field] = value
  result = wire_benchmark.measure(cfg)
  assert result["worker_devices"] == 2
  smallest_split = 64 * 64 // 2
  for branch in result["branches"]:
    assert branch["wire_bytes_per_worker"] == result["segment_bytes"]
    assert result["model_bytes"] <= result["segment_bytes"] < 1.3 * result["model_bytes"]
    for c in branch["collectives"]:
      if c["op"] == "all-gather" and not c["payload"]:
        assert all(math.prod(a["shape"]) < smallest_split for a in c["arrays"]), c
