"""Injected faults: workers dropping out of rounds, and a poisoned round.

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
    to exercise the numerical-fault guard end to end.
"""

from __future__ import annotations

from typing import Any

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
