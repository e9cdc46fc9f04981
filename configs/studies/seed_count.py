"""How many seeds a paired comparison needs: the report's seed-count rule.

A paired Student-t interval over ``n`` seeds whose per-seed differences have
spread ``sd`` has half-width ``t_{(1+level)/2, n-1} sd / sqrt(n)``. The evidence
study sizes its report phase with it (``configs/studies/evidence.py``,
``report_seed_count``), from the spread its tuning seeds showed; the intervals
themselves are ``experiments/seed_stats.py`` and ``experiments/syncs_saved.py``.
"""

from __future__ import annotations

import math


def seeds_needed(
    sd: float, half_width: float, level: float = 0.95, minimum: int = 10
) -> int:
  """The seeds a paired t-interval needs for a half-width of ``half_width``
  when the per-seed differences have spread ``sd``: the smallest ``n >=
  minimum`` with ``t_{(1+level)/2, n-1} sd / sqrt(n) <= half_width``."""
  from scipy import stats

  if half_width <= 0:
    raise ValueError(f"half_width must be > 0, got {half_width}")
  n = max(minimum, 2)
  while stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n) > half_width:
    n += 1
    if n > 100_000:
      break
  return n


def plan(sds: dict[str, float], tolerance: float, minimum: int, maximum: int,
         quick: bool = False) -> dict:
  """A report's seed plan from the tuning seeds' spreads ``sds`` (one per paired
  difference it decides): the largest ``sd``, the count whose t-interval
  resolves ``tolerance`` at it (:func:`seeds_needed`), kept in ``[minimum,
  maximum]``, and the half-width that count reaches (quick: 2 seeds). ``sds``
  comes back as pairs: a study field cannot hold a nested dict."""
  sd = max(sds.values())
  out = dict(sd=sd, sds=tuple(sds.items()), tolerance=tolerance)
  if quick:
    return dict(out, seeds=2, needed=2, half_width=None)
  needed = seeds_needed(sd, tolerance, minimum=minimum)
  seeds = min(needed, maximum)
  return dict(out, seeds=seeds, needed=needed, half_width=resolvable(sd, seeds))


def resolvable(sd: float, n: int, level: float = 0.95) -> float:
  """The half-width a paired t-interval over ``n`` seeds reaches at spread ``sd``."""
  from scipy import stats

  if n < 2:
    return float("inf")
  return float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))
