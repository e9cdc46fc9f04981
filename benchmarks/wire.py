"""What a config's compiled sync moves across the replica axis, beside the clock.

  XLA_FLAGS=--xla_force_host_platform_device_count=4 \\
    python -m benchmarks.wire --config configs/sparseloco.py:tiny \\
    [--config.compress.codec=int8]  # or fp4, fp8, int4; top-k is the config's own

Lowers and compiles the run's sync (``algo.sync.lower(state, present_K)``) on
abstract inputs (nothing is trained), reads the compiled HLO text
(``.compile().as_text()``) for its cross-replica collectives (all-gather,
all-reduce, collective-permute, reduce-scatter, all-to-all) and prints each
with its dtype, shape and bytes: the bytes of its result on one device, and for
an all-gather the bytes per worker (the result over ``K``). The collectives
that carry the encoded payloads (``compression/wire.py``, named ``wire_payload``
in the HLO's metadata: the DiLoCo family's all-gathers, the gossip methods'
collective-permutes) are summed per worker (:func:`payload_per_worker`) and set
beside the simulated clock's payload for the same round
(``Algorithm.comm_pattern``: the ``payload_bytes`` of one worker's message,
``codecs.tree_encoded_bytes``, times a gossip round's messages); the two agree
up to each packed stream's rounding to whole bytes (``wire_format.py``), and
for gossip when no neighbour shares a device (``K`` devices). With one device
XLA keeps no collective: run it with several (``XLA_FLAGS`` above). With
``--config.mesh.fsdp=F`` a worker spans ``F`` devices, each sending its own
segment of every leaf (``compression/shards.py``): the compiled payload is
then a worker's ``F`` devices together, the clock's bytes plus the segments'
padding (``shards.wire_bytes``, printed as "a whole model's message").

Prints a table per sync branch (a streaming sync has one per event) and, with
``--out``, writes the JSON (:func:`condensed`: the payload's collectives, the
others' bytes summed by operation).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from jax.sharding import NamedSharding
from ml_collections import config_flags

from autoloco_jax.compression import codecs, shards, wire_format
from autoloco_jax.data import corpus
from autoloco_jax.run import assembly
from autoloco_jax.runtime import replicas

_CONFIG = config_flags.DEFINE_config_file(
  "config", "configs/sparseloco.py:tiny", "Run config."
)
_OUT = flags.DEFINE_string("out", "", "Also write the JSON here.")

COLLECTIVES = (
  "all-gather",
  "all-reduce",
  "collective-permute",
  "reduce-scatter",
  "all-to-all",
)
_ITEM_BYTES = {"s8": 1, "u8": 1, "pred": 1, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f32": 4}
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
_LINE = re.compile(
  r"=\s*(\(.*?\)|\w+\[[\d,]*\](?:\{[^}]*\})?)\s+(" + "|".join(COLLECTIVES) + r")(?:-start)?\("
)


def _device_groups(line: str) -> list[list[int]]:
  """The device groups of an HLO collective: ``replica_groups`` (listed, or
  iota ``[G,S]<=[dims]T(perm)``) or a permute's ``source_target_pairs``."""
  listed = re.search(r"(?:replica_groups|source_target_pairs)=\{((?:\{[\d,]*\},?)*)\}", line)
  if listed:
    return [[int(i) for i in g.split(",") if i] for g in re.findall(r"\{([\d,]*)\}", listed.group(1))]
  iota = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
  if not iota:
    return []
  shape, dims = [[int(i) for i in x.split(",")] for x in iota.groups()[:2]]
  ids = np.arange(int(np.prod(dims))).reshape(dims)
  if iota.group(3):
    ids = ids.transpose([int(i) for i in iota.group(3).split(",")])
  return ids.reshape(shape).tolist()


def collectives(hlo_text: str, replica_of: dict[int, int] | None = None) -> list[dict]:
  """The collectives of a compiled HLO text, in order: ``op``, the arrays of
  its result (``dtype``, ``shape``), their ``bytes`` on one device,
  ``branch`` (the ``lax.switch`` branch it is in, from its metadata, or 0)
  and ``payload``: its metadata names ``wire_payload`` and, given
  ``replica_of`` (device id -> its index on the replica axis), its devices
  differ in replica index (a collective between a worker's own devices, with
  ``config.mesh.fsdp > 1``, is no wire between workers)."""
  out = []
  for line in hlo_text.splitlines():
    m = _LINE.search(line)
    if not m or "-done(" in line:
      continue
    arrays = [
      (dtype, tuple(int(d) for d in dims.split(",") if d))
      for dtype, dims in _ARRAY.findall(m.group(1))
    ]
    branch = re.search(r"branch_(\d+)_fun", line)
    crosses = replica_of is None or any(
      len({replica_of[i] for i in group}) > 1 for group in _device_groups(line)
    )
    out.append(
      dict(
        op=m.group(2),
        arrays=[dict(dtype=d, shape=list(s)) for d, s in arrays],
        bytes=sum(_ITEM_BYTES.get(d, 4) * int(np.prod(s)) for d, s in arrays),
        branch=int(branch.group(1)) if branch else 0,
        payload="wire_payload" in line and crosses,
      )
    )
  return out


def payload_per_worker(
    found: list[dict], num_workers: int, num_rows: int, worker_devices: int = 1
) -> float:
  """Bytes per worker of the payload's collectives (:func:`collectives`), all
  of its ``worker_devices`` devices together (each sends its own segments,
  ``compression/shards.py``): an all-gather's result on a device holds every
  worker's part from that device's position once; a collective-permute's is
  what one device receives, the same in each of the ``num_rows`` rows of the
  replica axis (a gossip method's rows from other devices; neighbours on the
  same device take no wire)."""
  total = 0.0
  for c in found:
    if c["payload"] and c["op"] == "all-gather":
      total += c["bytes"] * worker_devices / num_workers
    elif c["payload"] and c["op"] == "collective-permute":
      total += c["bytes"] * num_rows * worker_devices / num_workers
  return total


def measure(config: Any) -> dict:
  """The compiled sync's collectives per branch, and the clock's payload."""
  mesh = assembly.make_mesh(config)
  built = assembly.build(config, mesh, corpus.VOCAB_SIZE)
  state = assembly.abstract_state(config, built)
  algo = built.algo
  k = config.num_workers
  present = jax.ShapeDtypeStruct(
    (k,), jnp.float32, sharding=NamedSharding(mesh, replicas.WORKERS)
  )
  replica_of = {
    int(d.id): int(np.unravel_index(i, mesh.devices.shape)[0])
    for i, d in enumerate(mesh.devices.flat)
  }
  found = collectives(algo.sync.lower(state, present).compile().as_text(), replica_of)
  devices = int(mesh.devices.size)
  rows = replicas.replica_rows(mesh)
  span = replicas.model_size(mesh)
  shapes = [tuple(x.shape[1:]) for x in jax.tree.leaves(state.params_K)]
  codec = codecs.from_config(config.compress)
  branches = []
  for b in sorted({c["branch"] for c in found} | {0}):
    mine = [c for c in found if c["branch"] == b]
    comm = algo.comm_pattern(b, int(config.interval.h))
    branches.append(
      dict(
        branch=b,
        collectives=mine,
        wire_bytes_per_worker=payload_per_worker(mine, k, rows, span),
        clock_payload_bytes=comm.payload_bytes,
        clock_messages=1 if comm.neighbors_DxK is None else len(comm.neighbors_DxK),
        clock_kind=comm.kind,
        clock_dense=comm.dense,
      )
    )
  return dict(
    config=algo.name,
    codec=config.compress.codec,
    num_workers=k,
    devices=devices,
    worker_devices=span,
    # A whole model's message: its leaves' bytes, and on ``span`` segments each.
    model_bytes=shards.wire_bytes(codec, shapes, 1) if wire_format.carries(codec) else None,
    segment_bytes=shards.wire_bytes(codec, shapes, span) if wire_format.carries(codec) else None,
    branches=branches,
  )


def _table(result: dict) -> str:
  lines = [
    f"{result['config']} codec={result['codec']} K={result['num_workers']} "
    f"devices={result['devices']} ({result['worker_devices']} per worker)"
  ]
  if result["segment_bytes"] is not None and result["worker_devices"] > 1:
    lines.append(
      f"a whole model's message: {result['model_bytes']} B, on "
      f"{result['worker_devices']} segments per leaf {result['segment_bytes']} B "
      "(the segments' padding, compression/shards.py)"
    )
  for b in result["branches"]:
    lines.append(f"branch {b['branch']}:")
    lines.append(f"  {'op':<20}{'role':<9}{'arrays':<40}{'bytes':>10}{'B/worker':>10}")
    for c in b["collectives"]:
      arrays = " ".join(f"{a['dtype']}{a['shape']}" for a in c["arrays"])
      per = f"{c['bytes'] / result['num_workers']:.0f}" if c["op"] == "all-gather" else ""
      role = "payload" if c["payload"] else "other"
      lines.append(f"  {c['op']:<20}{role:<9}{arrays:<40}{c['bytes']:>10}{per:>10}")
    clock = b["clock_payload_bytes"]
    if b["clock_kind"] == "arrive":
      lines.append("  an arrival: nothing is sent")
      continue
    messages = b["clock_messages"]
    collective = {"gossip": f"{messages} message(s)"}.get(
      b["clock_kind"], "all-reduce" if b["clock_dense"] else "all-gather"
    )
    clock = "the model" if clock is None else f"{clock * messages:g} B"
    lines.append(
      f"  payload per worker: compiled {b['wire_bytes_per_worker']:.0f} B, "
      f"clock {clock} ({b['clock_kind']}, {collective})"
    )
  return "\n".join(lines)


def condensed(result: dict) -> dict:
  """``result`` with each branch's payload collectives listed and the others
  summed by operation (``other_bytes``: bytes on one device), what ``--out``
  writes (a 1B sync has over a thousand collectives between a worker's own
  devices)."""
  branches = []
  for b in result["branches"]:
    other: dict[str, int] = {}
    for c in b["collectives"]:
      if not c["payload"]:
        other[c["op"]] = other.get(c["op"], 0) + c["bytes"]
    payload = [c for c in b["collectives"] if c["payload"]]
    branches.append(dict(b, collectives=payload, other_bytes=other))
  return dict(result, branches=branches)


def main(argv):
  del argv
  result = measure(_CONFIG.value)
  print(_table(result))
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      f.write(json.dumps(condensed(result), indent=2) + "\n")


if __name__ == "__main__":
  from experiments import cli

  cli.run(main)
