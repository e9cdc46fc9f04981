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


def assign(unit: int, num_units: int, num_fragments: int, mode: str) -> int:
  """The fragment of unit ``unit`` of ``num_units`` (see the module docstring)."""
  if mode == "strided":
    return unit % num_fragments
  if mode == "contiguous":
    return unit * num_fragments // num_units
  raise ValueError(f"unknown fragment mode {mode!r}; choose one of {MODES}")


def leaf_fragments(params: Any, num_fragments: int, mode: str) -> list[int]:
  """The fragment of every leaf of ``params``, in ``jax.tree.leaves`` order.

  ``params`` may hold arrays or shape structs; only its structure is read.

  Raises:
    ValueError: ``num_fragments < 1`` or an unknown ``mode``.
  """
  if num_fragments < 1:
    raise ValueError(f"stream.fragments must be >= 1, got {num_fragments}")
  if mode not in MODES:
    raise ValueError(f"unknown stream.mode {mode!r}; choose one of {MODES}")
  paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
  blocks = {
      int(m.group(1)) for path in paths for e in path if (m := _BLOCK.match(_key_name(e)))
  }
  if blocks:
    num_units = max(blocks) + 1
    units = [_unit_of(path, num_units) for path in paths]
  else:
    num_units = len(paths)
    units = list(range(num_units))
  return [assign(u, num_units, num_fragments, mode) for u in units]
