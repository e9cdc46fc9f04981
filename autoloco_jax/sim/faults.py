"""Injected faults: workers dropping out of rounds, and a poisoned round.

``for_round`` is what the trainer asks before each round: the state, poisoned
when the round is ``nan_at_round``, and the workers present (``None``: all).

DiLoCo reports robustness to workers leaving and joining. Here a dropped worker
still computes its round (a straggler whose result arrives too late), but its
pseudo-gradient is left out of the average, which is taken over the workers
present; at the sync it restarts from the new global parameters like everyone.
At least one worker is always present: if every worker would drop, worker
``round mod K`` stays.

``config.faults``:
  drop_prob: each worker independently misses each round with this probability,
    drawn from ``(seed, round)`` so a resumed run drops the same workers.
  drop_schedule: explicit drops, ``"ROUND:W[,W...][;ROUND:W...]"``, e.g.
    ``"2:1;5:0,3"`` drops worker 1 in round 2 and workers 0 and 3 in round 5
    (rounds count from 0).
  nan_at_round: multiplies the parameters by NaN before that round (-1: never),
    to exercise the numerical-fault guard end to end. The parameters are
    found by name, not by algorithm: every floating leaf under a state field
    named ``params`` or ``*_params`` or ``params_*`` (``params_K``,
    ``global_params``, DDP's one model ``params``, NoLoCo's
    ``outer_params_K``), wherever the state keeps it (:func:`poison`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def parse_schedule(text: str, num_workers: int) -> dict[int, set[int]]:
  """``"2:1;5:0,3"`` -> ``{2: {1}, 5: {0, 3}}``; clear errors for bad entries."""
  schedule: dict[int, set[int]] = {}
  for entry in filter(None, (e.strip() for e in text.split(";"))):
    try:
      round_text, workers_text = entry.split(":")
      workers = {int(w) for w in workers_text.split(",") if w.strip()}
      round_index = int(round_text)
    except ValueError:
      raise ValueError(
          f"config.faults.drop_schedule: cannot parse {entry!r}; "
          "expected ROUND:W[,W...] entries separated by ';'"
      ) from None
    bad = [w for w in workers if not 0 <= w < num_workers]
    if round_index < 0 or bad:
      raise ValueError(
          f"config.faults.drop_schedule: entry {entry!r} names a round "
          f"< 0 or workers outside [0, {num_workers})"
      )
    schedule.setdefault(round_index, set()).update(workers)
  return schedule


def enabled(cfg: Any) -> bool:
  return bool(cfg.drop_prob > 0 or cfg.drop_schedule)


def present_workers(
    cfg: Any, num_workers: int, round_index: int, seed: int
) -> np.ndarray:
  """float32 [K]: 1 for the workers whose round ``round_index`` counts, 0 for dropped."""
  present = np.ones(num_workers, bool)
  if cfg.drop_prob > 0:
    rng = np.random.default_rng([seed, round_index, 0xD0])
    present &= rng.random(num_workers) >= cfg.drop_prob
  for w in parse_schedule(cfg.drop_schedule, num_workers).get(round_index, ()):
    present[w] = False
  if not present.any():
    present[round_index % num_workers] = True
  return present.astype(np.float32)


def refuse_unsupported(cfg: Any, algo: Any) -> None:
  """Raises ``ValueError`` when ``cfg`` drops workers and ``algo`` (an
  ``Algorithm``) cannot leave them out of its average."""
  if enabled(cfg) and not algo.supports_faults:
    raise ValueError(f"config.faults: worker faults are not supported by {algo.name}")


def for_round(
    cfg: Any, state: Any, round_index: int, num_workers: int, seed: int
) -> tuple[Any, np.ndarray | None]:
  """The faults of round ``round_index`` (0-based): ``(state, present_K)``, the
  state poisoned (:func:`poison`) if it is ``cfg.nan_at_round``, and the workers
  present (:func:`present_workers`; ``None``: all of them, no drops configured)."""
  if round_index == cfg.nan_at_round:
    state = poison(state)
  present_K = (
      present_workers(cfg, num_workers, round_index, seed) if enabled(cfg) else None
  )
  return state, present_K


def _is_params(path: tuple) -> bool:
  """Whether a leaf's path goes through a field named ``params``, ``*_params``
  or ``params_*`` (a NamedTuple attribute, not a key of the model's own dicts)."""
  return any(
      isinstance(key, jax.tree_util.GetAttrKey) and "params" in key.name.split("_")
      for key in path
  )


@jax.jit
def _times_nan(leaves: list) -> list:
  return [x * jnp.nan for x in leaves]


def poison(state: Any) -> Any:
  """``state`` with every floating leaf of its parameters multiplied by NaN,
  wherever the state keeps them (``_is_params``); the other leaves unchanged.

  Raises:
    ValueError: the state has no floating leaf under a parameters field.
  """
  leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(state)
  leaves = [x for _, x in leaves_with_paths]
  hit = [
      i
      for i, (path, x) in enumerate(leaves_with_paths)
      if _is_params(path) and jnp.issubdtype(x.dtype, jnp.floating)
  ]
  if not hit:
    raise ValueError(
        "config.faults.nan_at_round: the run state has no floating-point field named "
        "params, *_params or params_* to poison"
    )
  for i, x in zip(hit, _times_nan([leaves[i] for i in hit])):
    leaves[i] = x
  return jax.tree.unflatten(treedef, leaves)
