r"""Shard-aligned segments of a message: what each of a worker's devices encodes.

When a worker spans ``S = fsdp · tensor`` devices (``runtime/layout.py``), each
of its leaves is encoded as ``S`` segments, one per device, and each device
encodes, sends and decodes its own segment: no device gathers a whole leaf, and
what crosses the replica axis from each device is ``1/S`` of the worker's
payload (``wire.py``).

A leaf of ``n`` values (flattened row-major, as every codec flattens it) is cut
into the codec's granules, ``g`` values each (``block_size`` of the per-block
quantizers, ``chunk_size`` of top-k; ``N = ⌈n/g⌉`` of them), zero-padded to
``S ⌈N/S⌉`` granules and split into ``S`` segments of

.. math::
  n_s = g \lceil N / S \rceil

values: segment ``s`` holds granules ``[s⌈N/S⌉, (s+1)⌈N/S⌉)``. A granule never
straddles two segments, and every codec encodes its granules independently
(each block its own scale, each chunk its own top-k), so the decoded segments,
joined and trimmed to ``n``, are the whole leaf's ``roundtrip`` value for value:
the result does not depend on ``S``. The zero granules of the padding encode to
zero scales and codes; they are sent, at most ``S − 1`` granules' payload per
leaf beyond ``codec.encoded_bytes(n)`` (:func:`padding_values`;
:func:`wire_bytes` counts a worker's segments, which ``benchmarks/wire.py``
prints beside the clock's bytes).

With ``S = 1`` a segment is the leaf itself, unreshaped: the program is the one
without segments.

Each device runs the exchange on its own segments (:meth:`Segments.on_devices`:
a ``shard_map`` over the model axes nested in the one over ``replica``), so
its collectives over ``replica`` join the same segment of every worker. The
compiler moves a leaf from its parameter layout (``embed`` over fsdp,
whichever dimension that is) to its segments, and the averaged segments back,
by all-to-alls between a worker's own devices, never across workers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from autoloco_jax.compression import codecs, wire_format
from autoloco_jax.runtime import replicas


def granule(codec: codecs.Codec) -> int:
  """``g``: values per independently encoded unit (a block or a chunk)."""
  params = dict(codec.params)
  return int(params.get("chunk_size", params.get("block_size", 1)))


def segment_size(n: int, g: int, count: int) -> int:
  """``n_s = g ⌈⌈n/g⌉ / S⌉`` (the module docstring)."""
  granules = -(-n // g)
  return g * -(-granules // count)


def padding_values(shapes: list[tuple], g: int, count: int) -> int:
  """Zero values the segments add to leaves of ``shapes``: ``S n_s − n`` each."""
  total = 0
  for shape in shapes:
    n = math.prod(shape)
    total += count * segment_size(n, g, count) - n
  return total


def wire_bytes(codec: codecs.Codec, shapes: list[tuple], count: int) -> int:
  """Bytes one worker's message of leaves ``shapes`` puts on the wire when cut
  into ``count`` segments per leaf (``wire_format.wire_bytes`` of each
  segment, all of a worker's devices together); ``count = 1``: the leaves'
  own."""
  if count > 1:
    g = granule(codec)
    shapes = [(segment_size(math.prod(s), g, count),) for s in shapes for _ in range(count)]
  return sum(wire_format.wire_bytes(codec, [tuple(s) for s in shapes]).values())


@dataclasses.dataclass(frozen=True)
class Segments:
  """How the leaves of one message are cut.

  Attributes:
    shapes: the leaves' shapes (one worker's).
    count: ``S``, segments per leaf (1: a leaf is its own segment).
    sizes: ``n_s`` per leaf.
    axes: the mesh axes the segments' axis is split over.
  """

  shapes: tuple[tuple[int, ...], ...]
  count: int = 1
  sizes: tuple[int, ...] = ()
  axes: tuple[str, ...] = ()

  @classmethod
  def of(cls, codec: codecs.Codec, shapes: list[tuple]) -> "Segments":
    """Segments for the mesh being traced (``replicas.traced_model_axes``)."""
    shapes = tuple(tuple(s) for s in shapes)
    axes = replicas.traced_model_axes()
    if not axes:
      return cls(shapes)
    mesh = jax.sharding.get_abstract_mesh()
    count = math.prod(dict(mesh.shape)[a] for a in axes)
    g = granule(codec)
    sizes = tuple(segment_size(math.prod(s), g, count) for s in shapes)
    return cls(shapes, count, sizes, axes)

  @property
  def split_up(self) -> bool:
    return self.count > 1

  @property
  def segment_shapes(self) -> list[tuple[int, ...]]:
    """The shapes a codec sees: ``(n_s,)`` per leaf, or the leaves' own."""
    if not self.split_up:
      return list(self.shapes)
    return [(n,) for n in self.sizes]

  def spec(self, lead: int) -> P:
    """The spec of ``[*lead, S, n_s]`` segments: ``S`` over :attr:`axes`."""
    return P(*(None,) * lead, self.axes, None)

  def _rows(self, i: int, x: jax.Array, lead: int) -> jax.Array:
    """``x`` held split over :attr:`axes` along leaf ``i``'s first dimension,
    when ``S`` divides it: its flat form is then ``S`` contiguous pieces, and
    a reshape between the two moves nothing (a leaf split on another
    dimension, ``embed`` second, reaches it by an all-to-all, not by
    gathering the leaf)."""
    if not self.axes or not self.shapes[i] or self.shapes[i][0] % self.count:
      return x
    spec = P(*(None,) * lead, self.axes, *(None,) * (len(self.shapes[i]) - 1))
    return jax.lax.with_sharding_constraint(x, spec)

  def split(self, i: int, x: jax.Array) -> jax.Array:
    """Leaf ``i`` with leading axes, ``[*lead, *shape]``, as ``[*lead, S, n_s]``
    (float32)."""
    if not self.split_up:
      return x
    shape = self.shapes[i]
    lead = x.shape[: x.ndim - len(shape)]
    flat = self._rows(i, x.astype(jnp.float32), len(lead)).reshape(*lead, -1)
    pad = self.count * self.sizes[i] - flat.shape[-1]
    if pad:
      flat = jnp.pad(flat, [(0, 0)] * len(lead) + [(0, pad)])
    return flat.reshape(*lead, self.count, self.sizes[i])

  def join(self, i: int, y: jax.Array) -> jax.Array:
    """Inverse of :meth:`split`: ``[*lead, S, n_s]`` back to ``[*lead, *shape]``
    (the padding dropped)."""
    if not self.split_up:
      return y
    shape = self.shapes[i]
    lead = y.shape[:-2]
    flat = y.reshape(*lead, -1)[..., : math.prod(shape)]
    return self._rows(i, flat.reshape(*lead, *shape), len(lead))

  def on_devices(
      self,
      fn: Callable[..., tuple[list, ...]],
      leaves: list[jax.Array],
      *whole: Any,
      out_leads: tuple[int, ...],
  ) -> tuple[list, ...]:
    """``fn(segments, *whole)`` on each device's own segments of ``leaves``.

    ``fn`` sees each leaf ``i`` as ``[*lead, n_s]`` (this device's segment, a
    flat leaf of ``n_s`` values) and ``whole`` as it is, and returns a tuple
    of lists, one array per leaf, list ``j`` with ``out_leads[j]`` leading
    axes and the segment last. The results are joined back to the leaves'
    shapes. Without segments, ``fn(leaves, *whole)`` itself.
    """
    if not self.split_up:
      return fn(leaves, *whole)
    lead_in = leaves[0].ndim - len(self.shapes[0])
    parts = [self.split(i, x) for i, x in enumerate(leaves)]

    def body(parts, *whole):
      local = [p.reshape(*p.shape[:-2], p.shape[-1]) for p in parts]
      return tuple([y[..., None, :] for y in out] for out in fn(local, *whole))

    n = len(self.shapes)
    outs = jax.shard_map(
        body,
        mesh=jax.sharding.get_abstract_mesh(),
        in_specs=([self.spec(lead_in)] * n, *(P(),) * len(whole)),
        out_specs=tuple([self.spec(lead)] * n for lead in out_leads),
        axis_names=set(self.axes),
    )(parts, *whole)
    return tuple([self.join(i, y) for i, y in enumerate(out)] for out in outs)
