"""Config validation at start, and the check that a resumed run is the same run."""

from __future__ import annotations

import json
import math
import os
from typing import Any

# field: (type, low, high, low inclusive, high inclusive); a bound of None is open.
_RANGES = {
    "seed": (int, 0, None, True, False),
    "num_workers": (int, 1, None, True, False),
    "num_devices": (int, 0, None, True, False),
    "total_steps": (int, 1, None, True, False),
    "chunk_steps": (int, 0, None, True, False),
    "model.d_model": (int, 1, None, True, False),
    "model.num_layers": (int, 1, None, True, False),
    "model.num_heads": (int, 1, None, True, False),
    "model.mlp_dim": (int, 1, None, True, False),
    "data.seq_len": (int, 1, None, True, False),
    "data.batch_size": (int, 1, None, True, False),
    "data.val_fraction": (float, 0.0, 1.0, False, False),
    "data.max_bytes": (int, 0, None, True, False),
    "inner.lr": (float, 0.0, None, False, False),
    "inner.warmup_steps": (int, 0, None, True, False),
    "inner.min_lr_ratio": (float, 0.0, 1.0, True, True),
    "inner.weight_decay": (float, 0.0, None, True, False),
    "inner.b1": (float, 0.0, 1.0, True, False),
    "inner.b2": (float, 0.0, 1.0, True, False),
    "inner.eps": (float, 0.0, None, False, False),
    "inner.clip_norm": (float, 0.0, None, False, False),
    "diloco.alpha": (float, 0.0, None, False, False),
    "diloco.beta": (float, 0.0, 1.0, True, False),
    "autoloco.h_ref": (int, 0, None, True, False),
    "noloco.alpha": (float, 0.0, None, False, False),
    "noloco.beta": (float, 0.0, 1.0, True, False),
    "gasloc.eta": (float, 0.0, None, False, False),
    "gasloc.gamma": (float, 0.0, 1.0, True, False),
    "gasloc.alpha": (float, 0.0, None, True, False),
    "interval.h": (int, 1, None, True, False),
    "interval.h_min": (int, 1, None, True, False),
    "interval.h_max": (int, 0, None, True, False),
    "interval.c": (float, 0.0, None, True, False),
    "interval.target": (float, 0.0, 1.0, False, False),
    "interval.grow": (float, 1.0, None, False, False),
    "interval.shrink": (float, 0.0, 1.0, False, False),
    "interval.ema": (float, 0.0, 1.0, True, False),
    "interval.hysteresis": (float, 0.0, None, True, False),
    "eval.every_steps": (int, 1, None, True, False),
    "eval.batch_size": (int, 1, None, True, False),
    "eval.num_batches": (int, 1, None, True, False),
    "comm.bytes_per_param": (float, 0.0, None, False, False),
    "stream.fragments": (int, 1, None, True, False),
    "stream.tau": (int, 0, None, True, False),
    "stream.mix": (float, 0.0, 1.0, True, True),
    "compress.block_size": (int, 1, None, True, False),
    "compress.chunk_size": (int, 1, None, True, False),
    "compress.density": (float, 0.0, 1.0, False, True),
    "checkpoint.every_rounds": (int, 1, None, True, False),
    "checkpoint.keep": (int, 1, None, True, False),
    "faults.drop_prob": (float, 0.0, 1.0, True, False),
    "faults.nan_at_round": (int, -1, None, True, False),
    "network.step_time": (float, 0.0, None, True, False),
    "gossip.pool_size": (int, 1, None, True, False),
    "gossip.group_size": (int, 2, None, True, False),
}

#: Fields added after runs were stored, with the value that reproduces those
#: runs: absent from a stored config and equal to this, they are no change.
ADDED_DEFAULTS = {
    "stream.fragments": 1,
    "stream.mode": "strided",
    "stream.tau": 0,
    "stream.mix": 0.5,
    "stream.eager": False,
    "compress.codec": "identity",
    "compress.block_size": 128,
    "compress.chunk_size": 4096,
    "compress.density": 1 / 64,
    "compress.value_bits": 32,
    "compress.ef_beta": None,
    "autoloco.on_change": "keep",
}

#: Fields that do not change the training trajectory: a resumed run may change them.
RESUME_FREE = ("provenance", "log.", "eval.", "checkpoint.", "num_devices", "chunk_steps")


def _lookup(config: Any, dotted: str) -> tuple[bool, Any]:
  node = config
  for part in dotted.split("."):
    if part not in node:
      return False, None
    node = node[part]
  return True, node


def validate(config: Any) -> None:
  """Range-checks every numeric field the trainer knows; errors name the field."""
  for name, (kind, low, high, low_in, high_in) in _RANGES.items():
    present, value = _lookup(config, name)
    if not present:
      continue
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
      raise ValueError(f"config.{name} must be an integer, got {value!r}")
    if kind is float and (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    ):
      raise ValueError(f"config.{name} must be a finite number, got {value!r}")
    too_low = low is not None and (value < low if low_in else value <= low)
    too_high = high is not None and (value > high if high_in else value >= high)
    if too_low or too_high:
      interval = (
          ("[" if low_in else "(")
          + f"{low}, "
          + (f"{high}" if high is not None else "inf")
          + ("]" if high_in else ")")
      )
      what = f">= {low}" if high is None and low_in else f"in {interval}"
      raise ValueError(f"config.{name} must be {what}, got {value!r}")
  h_max = config.interval.get("h_max", 0)
  if h_max and h_max < config.interval.get("h_min", 1):
    raise ValueError(
        f"config.interval.h_max ({h_max}) must be >= config.interval.h_min "
        f"({config.interval.h_min}) or 0"
    )


def _flatten(tree: dict, prefix: str = "") -> dict:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def check_resume(config: Any, workdir: str, allow_change: bool = False) -> None:
  """Refuses to resume a run under a config that changes its trajectory.

  The config is stored as ``workdir/config.json``, with what produced the run
  under ``provenance`` (``provenance.collect``). If the workdir already holds
  checkpoints, every field outside :data:`RESUME_FREE` must match the stored
  config, else ``ValueError`` names the fields (``allow_change`` overrides).
  Then the current config is stored.
  """
  path = os.path.join(workdir, "config.json")
  new = json.loads(config.to_json_best_effort())
  ckpt_dir = os.path.join(workdir, "checkpoints")
  has_checkpoints = os.path.isdir(ckpt_dir) and any(
      name.isdigit() for name in os.listdir(ckpt_dir)
  )
  if has_checkpoints and not allow_change:
    changed = changed_fields(config, workdir)
    if changed:
      raise ValueError(
          f"{workdir} holds a run with another config ({', '.join(changed)}); resuming "
          "would change its trajectory. Use a new --workdir, or pass "
          "--allow_config_change."
      )
  import jax

  if jax.process_index() == 0:
    from autoloco_jax import provenance

    with open(path, "w") as f:
      json.dump(dict(new, provenance=provenance.collect()), f, indent=2)


def trajectory_fields(config: Any) -> dict:
  """The config's fields that determine the run's trajectory (all but
  :data:`RESUME_FREE`), flattened to dotted names."""
  flat = _flatten(json.loads(config.to_json_best_effort()))
  return {k: v for k, v in flat.items() if not k.startswith(RESUME_FREE)}


def changed_fields(config: Any, workdir: str) -> list[str]:
  """``"field: old -> new"`` for each trajectory field that differs between
  ``config`` and the one stored in ``workdir/config.json`` (none stored: []).
  A field the stored config lacks counts only if the new value is not empty, so
  runs stored before an optional field existed (e.g. ``network.also``) resume."""
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    old = {
        k: v for k, v in _flatten(json.load(f)).items() if not k.startswith(RESUME_FREE)
    }
  new = trajectory_fields(config)
  # A field added to the configs after the run was stored, left empty, is no change.
  added_empty = {
      k
      for k in set(new) - set(old)
      if new[k] in ([], (), "", None)
      or (k in ADDED_DEFAULTS and new[k] == ADDED_DEFAULTS[k])
  }
  return [
      f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
      for k in sorted(set(old) | set(new) - added_empty)
      if old.get(k) != new.get(k)
  ]
