r"""Fragments of the parameters for streaming syncs (Streaming DiLoCo).

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) splits the model
into ``P`` fragments and synchronises one fragment at a time. This module only
says which leaf of a parameter pytree belongs to which fragment; a fragment's
sync is ``fragment_sync.Fragment`` and their schedule ``streaming.py``.

Units. The transformer's blocks ``block_0 … block_{L−1}`` (``transformer.py``) are
the units of the partition: every leaf under ``block_i`` belongs to the
fragment of block ``i``. Leaves outside the blocks follow the end of the
network they sit at:

* ``embed`` (the input end; with tied embeddings also the output projection)
  goes with block 0;
* every other leaf outside the blocks (``final_norm``, ``head``: the output
  end) goes with block ``L − 1``.

A tree without any ``block_i`` (a toy model, an adapter tree) treats each leaf
as one unit, in flattening order.

Finer units (``unit = "sublayer"``): each block's sub-layers are units of their
own, block by block, so a model of ``L`` blocks splits into up to ``2L``
fragments (the attention and the MLP of the transformer; a child ``x_norm`` goes
with its sub-layer ``x``, the order is the tree's). The embedding goes with the
first unit, the output end with the last. The paper's fragments are groups of
layers; this lets a shallow model (the studies' 2 blocks) have ``P = 4``.

Modes, for ``n`` units and ``P`` fragments:

* ``strided`` (the paper's choice): unit ``i`` goes to fragment ``i mod P``,
  so fragment ``p`` holds blocks ``p, p + P, p + 2P, …``;
* ``contiguous``: unit ``i`` goes to fragment ``⌊i P / n⌋``, consecutive
  blocks together.

With ``P > n`` some fragments are empty (their syncs send nothing); with
``P = 1`` everything is fragment 0.
"""

from __future__ import annotations

import re
from typing import Any

import jax

MODES = ("strided", "contiguous")
UNITS = ("block", "sublayer")

_BLOCK = re.compile(r"^block_(\d+)$")


def _key_name(entry: Any) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(entry, attr):
      return str(getattr(entry, attr))
  return str(entry)


def _unit_of(path: tuple, num_blocks: int) -> int | None:
  """The block index a leaf belongs to (None outside the blocks)."""
  for entry in path:
    m = _BLOCK.match(_key_name(entry))
    if m:
      return int(m.group(1))
  names = [_key_name(e) for e in path]
  if "embed" in names:
    return 0
  return num_blocks - 1


def _sublayer_of(path: tuple) -> str | None:
  """The sub-layer of a leaf inside a block (its child of ``block_i``, with a
  ``_norm`` suffix dropped); None outside the blocks."""
  names = [_key_name(e) for e in path]
  for i, name in enumerate(names[:-1]):
    if _BLOCK.match(name):
      child = names[i + 1]
      return child[: -len("_norm")] if child.endswith("_norm") else child
  return None


def _units(paths: list, num_blocks: int, unit: str) -> tuple[list[int], int]:
  """Each leaf's unit and the number of units, for a tree with blocks."""
  blocks = [_unit_of(path, num_blocks) for path in paths]
  if unit == "block":
    return blocks, num_blocks
  subs = [_sublayer_of(path) for path in paths]
  order = list(dict.fromkeys(s for s in subs if s is not None))
  num_units = num_blocks * len(order)
  units = [
      b * len(order) + order.index(s) if s is not None else (0 if b == 0 else num_units - 1)
      for b, s in zip(blocks, subs)
  ]
  return units, num_units


def assign(unit: int, num_units: int, num_fragments: int, mode: str) -> int:
  """The fragment of unit ``unit`` of ``num_units`` (see the module docstring)."""
  if mode == "strided":
    return unit % num_fragments
  if mode == "contiguous":
    return unit * num_fragments // num_units
  raise ValueError(f"unknown fragment mode {mode!r}; choose one of {MODES}")


def leaf_fragments(params: Any, num_fragments: int, mode: str, unit: str = "block") -> list[int]:
  """The fragment of every leaf of ``params``, in ``jax.tree.leaves`` order.

  ``params`` may hold arrays or shape structs; only its structure is read.

  Raises:
    ValueError: ``num_fragments < 1``, an unknown ``mode`` or ``unit``.
  """
  if num_fragments < 1:
    raise ValueError(f"stream.fragments must be >= 1, got {num_fragments}")
  if mode not in MODES:
    raise ValueError(f"unknown stream.mode {mode!r}; choose one of {MODES}")
  if unit not in UNITS:
    raise ValueError(f"unknown stream.unit {unit!r}; choose one of {UNITS}")
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
  blocks = {
      int(m.group(1)) for path in paths for e in path if (m := _BLOCK.match(_key_name(e)))
  }
  if blocks:
    units, num_units = _units(paths, max(blocks) + 1, unit)
  else:
    num_units = len(paths)
    units = list(range(num_units))
  return [assign(u, num_units, num_fragments, mode) for u in units]
