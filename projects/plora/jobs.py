"""PLoRA jobs: one LoRA fine-tuning job's config and its optimizer.

A job (:class:`LoraConfig`) is a rank, alpha, peak learning rate, target
layers and seed. Every job of a sweep shares the optimizer's other fields
(:data:`OPT_FIELDS`); :func:`adapter_optimizer` is the project's inner AdamW
with the adapter's own peak learning rate, so jobs with different learning
rates can share one packed program (:mod:`packed`).
"""

from __future__ import annotations

import dataclasses
import numbers
import types
from typing import Any, Iterable, Sequence

import jax
import optax

from autoloco_jax.runtime import inner
from projects.plora import lora

# ----------------------------------------------------------------------------
# Configs.


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """One fine-tuning job of the sweep.

  Attributes:
    name: unique name (used in plans, results and errors).
    rank: LoRA rank ``r >= 1``.
    alpha: LoRA alpha; the update is scaled by ``alpha / r``.
    lr: peak learning rate of the job's AdamW (shared warmup/cosine shape).
    targets: dense layers to adapt (``lora.LAYERS`` or aliases ``attn``,
      ``mlp``, ``all``); stored resolved, in canonical order.
    seed: seeds the adapter's init and (in the experiment) its data stream.
  """

  name: str
  rank: int
  alpha: float
  lr: float
  targets: tuple[str, ...] = ("qkv", "out")
  seed: int = 0

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"LoraConfig.name must be a non-empty string, got {self.name!r}")
    lora._check_rank(self.rank, f"rank of config {self.name!r}")
    if not self.alpha > 0:
      raise ValueError(f"config {self.name!r}: alpha must be > 0, got {self.alpha!r}")
    if not self.lr > 0:
      raise ValueError(f"config {self.name!r}: lr must be > 0, got {self.lr!r}")
    if (
        isinstance(self.seed, bool)
        or not isinstance(self.seed, numbers.Integral)
        or self.seed < 0
    ):
      raise ValueError(
          f"config {self.name!r}: seed must be an integer >= 0, got {self.seed!r}"
      )
    try:
      targets = lora.resolve_targets(self.targets)
    except ValueError as e:
      raise ValueError(f"config {self.name!r}: {e}") from None
    object.__setattr__(self, "targets", targets)


def _check_configs(configs: Sequence[LoraConfig]) -> tuple[LoraConfig, ...]:
  configs = tuple(configs)
  if not configs:
    raise ValueError("no LoRA configs given")
  names = [c.name for c in configs]
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup:
    raise ValueError(f"LoRA config names must be unique; repeated: {dup}")
  return configs


def union_targets(configs: Iterable[LoraConfig]) -> tuple[str, ...]:
  return lora.resolve_targets([t for c in configs for t in c.targets])


# ----------------------------------------------------------------------------
# Per-adapter optimizer.


#: Optimizer fields shared by every job of a sweep (``config.inner`` has them).
OPT_FIELDS = (
    "warmup_steps",
    "min_lr_ratio",
    "weight_decay",
    "b1",
    "b2",
    "eps",
    "clip_norm",
)


def _opt_key(opt_cfg: Any) -> tuple:
  """The shared optimizer fields as a hashable ``((name, value), ...)``."""
  if isinstance(opt_cfg, tuple):
    return opt_cfg
  get = (
      opt_cfg.get if hasattr(opt_cfg, "get") else lambda k, d=None: getattr(opt_cfg, k, d)
  )
  missing = [k for k in OPT_FIELDS if get(k) is None]
  if missing:
    raise ValueError(f"optimizer config is missing field(s) {missing}")
  return tuple((k, float(get(k))) for k in OPT_FIELDS)


def _relative(opt_cfg: Any) -> types.SimpleNamespace:
  ns = types.SimpleNamespace(**dict(_opt_key(opt_cfg)))
  ns.warmup_steps = int(ns.warmup_steps)
  ns.lr = 1.0
  return ns


def _scale_by_adapter_lr() -> optax.GradientTransformation:
  """Multiplies every update by the adapter's own ``params['frozen']['lr']``."""

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("per-adapter lr scaling needs params in tx.update")
    lr = params["frozen"]["lr"]
    return jax.tree.map(lambda u: u * lr, updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def adapter_optimizer(
    opt_cfg: Any, total_steps: int
) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """The inner optimizer of the project, with a per-adapter peak learning rate.

  ``inner.optimizer`` (clip by global norm, AdamW with decoupled weight decay on
  matrices) runs on the trainable ``params['factors']`` under the schedule
  ``η(s) / η_peak`` (peak 1), then the update is multiplied by the adapter's
  ``params['frozen']['lr']``. AdamW's update is ``-η(s) (adam + wd θ)``, so this
  is AdamW with the adapter's own peak ``lr`` (vmap gives each adapter its own
  value). Frozen leaves (mask, scale, lr) get exactly zero updates.

  Returns:
    ``(tx, relative_schedule)``.
  """
  rel = _relative(opt_cfg)
  schedule = inner.schedule(rel, total_steps)
  tx = optax.chain(
      optax.multi_transform(
          {"train": inner.optimizer(rel, schedule), "frozen": optax.set_to_zero()},
          {"factors": "train", "frozen": "frozen"},
      ),
      _scale_by_adapter_lr(),
  )
  return tx, schedule
