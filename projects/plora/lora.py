"""LoRA adapters on the dense layers of a frozen Flax model, as pure functions.

A LoRA adapter (Hu et al. 2021) replaces a frozen kernel ``W`` (``d_in x d_out``)
of a targeted dense layer by

.. math::

  W' = W + \\frac{\\alpha}{r} A B, \\qquad A \\in \\mathbb{R}^{d_{in} \\times r},
  \\; B \\in \\mathbb{R}^{r \\times d_{out}},

with ``A`` random and ``B = 0`` at init, so a fresh adapter leaves the model
unchanged; only ``A`` and ``B`` are trained.

**Padding and masks.** To train adapters of different ranks and target layers
as one array program (:mod:`packed`), an adapter is stored padded to a group rank
``R >= r`` and to a group's union of target layers, with a 0/1 mask ``m`` of
length ``R`` per layer. The forward uses ``A diag(m)`` and ``diag(m) B``, so

* a padded coordinate never changes the output, and its gradient is exactly
  zero (the chain rule multiplies it by ``m = 0``);
* padded coordinates are zero at init, and AdamW moves a parameter only by its
  Adam direction (zero moments give ``0 / (0 + eps) = 0``) and its decoupled
  weight decay (``wd * 0 = 0``), so they stay exactly zero;
* global-norm clipping sees the same norm (the extra entries are zero).

A rank-``r`` adapter padded to ``R`` is therefore the lone rank-``r`` adapter,
its optimizer trajectory included (up to float summation order). A layer an
adapter does not target has an all-zero mask.

**Factored forward.** ``lora_apply`` computes ``x W + s (x A) B`` inside the
model's forward pass, without materialising ``W'``, by intercepting the model's
``nn.Dense`` calls (``flax.linen.intercept_methods``): ``transformer.py`` is not
touched, and any Flax linen model whose dense layers are ``nn.Dense`` works.
Against the merged form ``x (W + s A B)`` it saves the ``O(d_in d_out r)``
merge and, above all, the full ``d_in x d_out`` weight gradient that the merged
form must build before projecting it onto ``A`` and ``B`` (measured in
``docs/plora.md``). ``merge`` folds an adapter into the base for evaluation and
export.

Adapter layout: ``factors`` and ``mask`` are flat dicts keyed by the dense
layer's path in the params tree, e.g. ``'block_0/attn/qkv'``.

References:
  Hu et al., LoRA: Low-Rank Adaptation of Large Language Models, 2021.
  https://arxiv.org/abs/2106.09685
"""

from __future__ import annotations

import math
import numbers
import zlib
from typing import Any, Callable, Iterable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

#: Dense layers of the project's transformer an adapter can target.
LAYERS = ("qkv", "out", "up", "down")
#: Shorthands accepted wherever targets are given.
ALIASES = {"attn": ("qkv", "out"), "mlp": ("up", "down"), "all": LAYERS}
MODES = ("factored", "merged")


class Adapter(NamedTuple):
  """One LoRA adapter, possibly padded (see the module docstring).

  Attributes:
    factors: ``{path: {"a": A_dxR, "b": B_Rxo}}``, the trainable parameters.
    mask: ``{path: m_R}``, 1.0 on the adapter's own rank coordinates of the
      layers it targets, 0.0 on padding (frozen).
    scale: ``alpha / r`` with the adapter's own rank ``r`` (frozen scalar).
  """

  factors: dict
  mask: dict
  scale: jax.Array


def resolve_targets(targets: Iterable[str] | str) -> tuple[str, ...]:
  """Target names (aliases expanded) in the canonical order of ``LAYERS``.

  Raises:
    ValueError: no target, or a name that is neither a layer nor an alias.
  """
  if isinstance(targets, str):
    targets = [t for t in targets.replace("+", ",").split(",") if t]
  names = set()
  for t in targets:
    if t in ALIASES:
      names.update(ALIASES[t])
    elif t in LAYERS:
      names.add(t)
    else:
      raise ValueError(
          f"unknown LoRA target layer {t!r}; choose from {list(LAYERS)} "
          f"or an alias {sorted(ALIASES)}"
      )
  if not names:
    raise ValueError(
        "LoRA targets are empty: name at least one layer " f"of {list(LAYERS)}"
    )
  return tuple(n for n in LAYERS if n in names)


def _check_rank(rank: Any, what: str = "rank") -> int:
  if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 1:
    raise ValueError(f"LoRA {what} must be an integer >= 1, got {rank!r}")
  return int(rank)


def dense_layers(
    base_params: Any, targets: Iterable[str] | str
) -> dict[str, tuple[int, int]]:
  """``{path: (d_in, d_out)}`` of the dense kernels named by ``targets``.

  A layer is a params subtree ``{..., name: {"kernel": d_in x d_out}}`` with
  ``name`` one of the targets; paths join the tree keys with ``/``.
  """
  names = resolve_targets(targets)
  found = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(base_params)[0]:
    keys = [getattr(k, "key", str(k)) for k in path]
    if len(keys) >= 2 and keys[-1] == "kernel" and keys[-2] in names:
      if len(leaf.shape) != 2:
        raise ValueError(
            f"LoRA target {'/'.join(keys[:-1])} has a kernel of "
            f"shape {leaf.shape}, not d_in x d_out"
        )
      found["/".join(keys[:-1])] = tuple(int(s) for s in leaf.shape)
  if not found:
    raise ValueError(f"the base params have no dense layer named {list(names)}")
  return found


def init(
    seed: int,
    base_params: Any,
    rank: int,
    alpha: float,
    targets: Iterable[str] | str,
    *,
    pad_rank: int | None = None,
    pad_targets: Iterable[str] | str | None = None,
) -> Adapter:
  """A fresh adapter: ``A ~ N(0, 1/d_in)``, ``B = 0``, scale ``alpha / rank``.

  ``A`` of layer ``path`` is drawn on the host from numpy's generator seeded
  with ``(seed, crc32(path))``, as ``rank`` rows of ``d_in`` normals,
  transposed. Column ``j`` is thus the stream's ``j``-th block whatever the
  rank that follows it, and the draw does not depend on the other layers. With
  ``pad_rank`` and ``pad_targets`` the adapter comes zero-padded to that rank,
  with zero, fully masked layers for the targets it does not adapt: its
  effective adapter is the unpadded one. (Host-side because threefry draws
  cost seconds of compilation per shape on CPU; adapters are tiny.)

  Raises:
    ValueError: rank < 1, pad_rank < rank, alpha <= 0, unknown targets, or
      ``pad_targets`` not a superset of ``targets``.
  """
  rank = _check_rank(rank)
  pad_rank = rank if pad_rank is None else _check_rank(pad_rank, "pad_rank")
  if pad_rank < rank:
    raise ValueError(f"pad_rank={pad_rank} is smaller than the adapter's rank={rank}")
  if not alpha > 0:
    raise ValueError(f"LoRA alpha must be > 0, got {alpha!r}")
  if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
    raise ValueError(f"LoRA seed must be an integer >= 0, got {seed!r}")
  own = resolve_targets(targets)
  union = own if pad_targets is None else resolve_targets(pad_targets)
  if not set(own) <= set(union):
    raise ValueError(
        f"pad_targets {list(union)} must include the adapter's " f"targets {list(own)}"
    )
  own_layers = dense_layers(base_params, own)
  factors, mask = {}, {}
  for path, (d_in, d_out) in dense_layers(base_params, union).items():
    a = np.zeros((d_in, pad_rank), np.float32)
    m = np.zeros((pad_rank,), np.float32)
    if path in own_layers:
      rng = np.random.default_rng([int(seed), zlib.crc32(path.encode())])
      a[:, :rank] = rng.standard_normal((rank, d_in)).T / math.sqrt(d_in)
      m[:rank] = 1.0
    factors[path] = {"a": jnp.asarray(a), "b": jnp.zeros((pad_rank, d_out), jnp.float32)}
    mask[path] = jnp.asarray(m)
  return Adapter(factors, mask, jnp.asarray(alpha / rank, jnp.float32))


def pad(
    adapter: Adapter, rank: int, layers: dict[str, tuple[int, int]] | None = None
) -> Adapter:
  """``adapter`` zero-padded to ``rank`` and to the layers ``{path: (d_in, d_out)}``."""
  cur = next(iter(adapter.mask.values())).shape[0]
  if _check_rank(rank) < cur:
    raise ValueError(f"cannot pad an adapter of padded rank {cur} down to {rank}")
  factors, mask = {}, {}
  for path, (d_in, d_out) in (layers or {}).items():
    if path not in adapter.factors:
      factors[path] = {"a": jnp.zeros((d_in, rank)), "b": jnp.zeros((rank, d_out))}
      mask[path] = jnp.zeros((rank,))
  for path, f in adapter.factors.items():
    extra = rank - cur
    factors[path] = {
        "a": jnp.pad(f["a"], ((0, 0), (0, extra))),
        "b": jnp.pad(f["b"], ((0, extra), (0, 0))),
    }
    mask[path] = jnp.pad(adapter.mask[path], (0, extra))
  order = sorted(factors)
  return Adapter(
      {p: factors[p] for p in order}, {p: mask[p] for p in order}, adapter.scale
  )


def compact(adapter: Adapter) -> Adapter:
  """The adapter without its padding: masked-out columns, rows and layers dropped.

  Host-side (reads the mask): use it to export one adapter of a packed group.
  """
  factors, mask = {}, {}
  for path, m in adapter.mask.items():
    keep = np.flatnonzero(np.asarray(m) > 0)
    if keep.size:
      f = adapter.factors[path]
      factors[path] = {
          "a": jnp.asarray(np.asarray(f["a"])[:, keep]),
          "b": jnp.asarray(np.asarray(f["b"])[keep, :]),
      }
      mask[path] = jnp.ones((keep.size,), jnp.float32)
  return Adapter(factors, mask, adapter.scale)


def rank_of(adapter: Adapter) -> int:
  """The adapter's own rank (the largest mask sum over its layers)."""
  return int(max(float(np.sum(np.asarray(m))) for m in adapter.mask.values()))


def num_params(adapter: Adapter) -> int:
  """Trainable parameters of the adapter without padding: sum of r (d_in + d_out)."""
  total = 0
  for path, m in adapter.mask.items():
    a, b = adapter.factors[path]["a"], adapter.factors[path]["b"]
    total += int(np.sum(np.asarray(m))) * (a.shape[0] + b.shape[1])
  return total


def delta(adapter: Adapter, path: str) -> jax.Array:
  """``ΔW = s (A diag(m)) (diag(m) B)`` of one layer, ``d_in x d_out``."""
  f, m = adapter.factors[path], adapter.mask[path]
  return adapter.scale * ((f["a"] * m[None, :]) @ (f["b"] * m[:, None]))


def merge(base_params: Any, adapter: Adapter) -> Any:
  """Base params with every adapted kernel replaced by ``W + ΔW`` (same tree).

  ``apply(merge(base, adapter), x)`` equals ``lora_apply(apply, base, adapter,
  x)`` up to float rounding; use it to evaluate or export a trained adapter.
  """

  def rec(tree, prefix):
    if not hasattr(tree, "items"):
      return tree
    out = {}
    for key, sub in tree.items():
      path = f"{prefix}/{key}" if prefix else key
      if path in adapter.factors and hasattr(sub, "items") and "kernel" in sub:
        out[key] = dict(
            sub, kernel=sub["kernel"] + delta(adapter, path).astype(sub["kernel"].dtype)
        )
      else:
        out[key] = rec(sub, path)
    return out

  missing = [p for p in adapter.factors if not _has_kernel(base_params, p)]
  if missing:
    raise ValueError(f"adapter layers {missing} are not dense layers of the base params")
  return rec(base_params, "")


def _has_kernel(tree: Any, path: str) -> bool:
  for key in path.split("/"):
    if not hasattr(tree, "items") or key not in tree:
      return False
    tree = tree[key]
  return hasattr(tree, "items") and "kernel" in tree


def _interceptor(adapter: Adapter, seen: set) -> Callable:
  """Adds ``s (x A') B'`` to the output of every adapted ``nn.Dense``; records
  the paths it adapted in ``seen``."""

  def intercept(next_fun, args, kwargs, context):
    y = next_fun(*args, **kwargs)
    module = context.module
    if context.method_name != "__call__" or not isinstance(module, nn.Dense):
      return y
    path = "/".join(module.path)
    if path not in adapter.factors:
      return y
    seen.add(path)
    f, m = adapter.factors[path], adapter.mask[path]
    x = args[0] if args else kwargs["inputs"]
    # Masks folded into the (small) factors, not the (large) activations.
    a = (f["a"] * m[None, :]).astype(y.dtype)
    b = ((adapter.scale * m)[:, None] * f["b"]).astype(y.dtype)
    return y + (x.astype(y.dtype) @ a) @ b

  return intercept


def lora_apply(
    apply: Callable,
    base_params: Any,
    adapter: Adapter,
    tokens_BxL: jax.Array,
    *,
    mode: str = "factored",
) -> jax.Array:
  """The model's forward pass with the adapter: ``x W + s (x A) B`` per layer.

  Args:
    apply: the model's pure ``apply(params, tokens_BxL)`` (``model.make``).
    base_params: frozen base params.
    adapter: an :class:`Adapter` whose layers are dense layers of the base.
    tokens_BxL: input tokens.
    mode: ``'factored'`` (default) intercepts each adapted ``nn.Dense`` and adds
      ``s (x A') B'``; ``'merged'`` runs ``apply(merge(base, adapter), x)``.

  Returns:
    Whatever ``apply`` returns (``logits_BxLxV`` for the project's model).
  """
  if mode == "merged":
    return apply(merge(base_params, adapter), tokens_BxL)
  if mode != "factored":
    raise ValueError(f"unknown lora_apply mode {mode!r}; choose from {MODES}")
  seen: set = set()
  with nn.intercept_methods(_interceptor(adapter, seen)):
    out = apply(base_params, tokens_BxL)
  # Checked at trace time: an adapter layer the model never called would
  # otherwise be trained (to nothing) silently.
  missing = sorted(set(adapter.factors) - seen)
  if missing:
    raise ValueError(f"adapter layers {missing} are not nn.Dense layers the model calls")
  return out
