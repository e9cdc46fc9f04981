"""Config validation at start, and the check that a resumed run is the same run."""

from __future__ import annotations

import json
import os
from typing import Any

from autoloco_jax import ranges
from autoloco_jax.algorithms import registry

#: Fields added after runs were stored, each with the value the code used before
#: the field existed (what reproduces those runs): absent from a stored config
#: and equal to this, they are no change, and they are left out of a study run's
#: name (``experiments/sweep.run_dir``). These are history, not defaults: the
#: defaults live in ``configs/common.py`` and may change; these never do.
VALUES_BEFORE_THE_FIELD = {
    "stream.fragments": 1,
    "stream.mode": "strided",
    "stream.unit": "block",
    "stream.tau": 0,
    "stream.mix": 0.5,
    "stream.eager": False,
    "compress.codec": "identity",
    "compress.block_size": 128,
    "compress.chunk_size": 4096,
    "compress.density": 1 / 64,
    "compress.value_bits": 32,
    "compress.ef_beta": None,
    "compress.aggregate": "mean",
    "autoloco.on_change": "keep",
    "interval.syncs": 0,
    "interval.shape": "linear",
    "interval.ratio": 3.0,
    "interval.split": 0.5,
    "network.overlap_backward": 0.0,
    "model.attention": "auto",
    "model.remat": "none",
    "gossip_adamw.weight": 0.0,
    "diloco.beta_shape": "linear",
    "diloco.beta_rounds": 0,
    "inner.microbatches": 1,
}

#: Fields that do not change the training trajectory: a resumed run may change them.
RESUME_FREE = (
    "provenance", "log.", "eval.", "checkpoint.", "num_devices", "mesh.", "chunk_steps"
)


def _lookup(config: Any, dotted: str) -> tuple[bool, Any]:
  node = config
  for part in dotted.split("."):
    if part not in node:
      return False, None
    node = node[part]
  return True, node


def validate(config: Any) -> None:
  """Checks a config before anything runs; errors name the field.

  Each range is checked once, where its field is read: the algorithm's typed
  groups check the groups they own (``registry.GROUPS``) when
  ``registry.from_config`` builds them, and this walks :data:`ranges.FIELDS`
  for the other numeric fields the config has.
  """
  for name, field_range in ranges.FIELDS.items():
    if name.split(".")[0] in registry.GROUPS:
      continue
    present, value = _lookup(config, name)
    if present:
      field_range.check(f"config.{name}", value)
  m = config.inner.get("microbatches", 1)
  if config.data.batch_size % m:
    raise ValueError(
        f"config.inner.microbatches={m} must divide config.data.batch_size="
        f"{config.data.batch_size} (equal micro-batches)"
    )
  fsdp = config.get("mesh", {}).get("fsdp", 1)
  if config.data.batch_size % (fsdp * m):
    raise ValueError(
        f"config.mesh.fsdp={fsdp} x config.inner.microbatches={m} must divide "
        f"config.data.batch_size={config.data.batch_size}: each worker's batch "
        f"(each micro-batch) is split over its fsdp devices"
    )
  registry.from_config(config)


def _flatten(tree: dict, prefix: str = "") -> dict:
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


CONFIG_FILE = "config.json"


def stored_config(workdir: str) -> dict | None:
  """The config stored in ``workdir/config.json`` by :func:`check_resume` (with
  its ``provenance``), or None if the workdir stores none."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def check_resume(config: Any, workdir: str, allow_change: bool = False) -> None:
  """Refuses to resume a run under a config that changes its trajectory.

  The config is stored as ``workdir/config.json``, with what produced the run
  under ``provenance`` (``provenance.collect``). If the workdir already holds
  checkpoints, every field outside :data:`RESUME_FREE` must match the stored
  config, else ``ValueError`` names the fields (``allow_change`` overrides).
  Then the current config is stored.
  """
  path = os.path.join(workdir, CONFIG_FILE)
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
    from autoloco_jax.run import provenance

    # Written whole, then renamed: the other processes read it at the same time.
    with open(path + ".tmp", "w") as f:
      json.dump(dict(new, provenance=provenance.collect()), f, indent=2)
    os.replace(path + ".tmp", path)


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
  stored = stored_config(workdir)
  if stored is None:
    return []
  old = {k: v for k, v in _flatten(stored).items() if not k.startswith(RESUME_FREE)}
  new = trajectory_fields(config)
  # A field added to the configs after the run was stored, left empty, is no change.
  added_empty = {
      k
      for k in set(new) - set(old)
      if new[k] in ([], (), "", None)
      or (k in VALUES_BEFORE_THE_FIELD and new[k] == VALUES_BEFORE_THE_FIELD[k])
  }
  return [
      f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
      for k in sorted(set(old) | set(new) - added_empty)
      if old.get(k) != new.get(k)
  ]
