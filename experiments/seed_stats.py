"""Statistics over seeds: a label's means and spreads, the fixed-H frontier, claims,
and paired comparisons with their Student-t intervals.

Every statistic over seeds is a mean and a spread, the sample standard
deviation (``ddof=1``; 0 for one seed).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from experiments.runlog import sim_key


def mean_std(values: Sequence[float]) -> tuple[float, float]:
  v = np.asarray(values, np.float64)
  return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def stats(runs: Sequence[dict], networks: Sequence[str] = ()) -> dict:
  """Mean and spread over seeds of a label's final numbers."""
  out = {
      "seeds": [r["seed"] for r in runs],
      # Per seed, for paired comparisons (the same seed: the same initial
      # weights and data order in every run of a study).
      "loss_by_seed": [r["summary"]["final_eval_bpb"] for r in runs],
  }
  for key in (
      "final_eval_bpb",
      "syncs",
      "bytes_per_worker",
      "wall_time",
      "tokens_per_sec",
  ):
    out[key] = mean_std([r["summary"][key] for r in runs])
  gains = [late_gain(r) for r in runs]
  if gains and all(g is not None for g in gains):
    out["late_gain"] = mean_std(gains)
  events = [r["summary"].get("sync_events") for r in runs]
  if all(e is not None for e in events):
    out["sync_events"] = mean_std(events)
  peaks = [r["summary"].get("peak_bandwidth") for r in runs]
  if all(p is not None for p in peaks):
    out["peak_bandwidth"] = mean_std(peaks)
  for net in networks:
    out[f"sim_time@{net}"] = mean_std([r["summary"][sim_key(r, net)] for r in runs])
  return out


def late_gain(run: dict, fraction: float = 0.2) -> float | None:
  """How much the eval loss still falls over the last ``fraction`` of a run's
  steps: the training-time eval (the spread sample, bits/byte) at ``(1 -
  fraction) T``, linear between evals, minus the last one. None without evals
  on both sides of that step."""
  steps = np.asarray(run["eval"]["step"], np.float64)
  loss = np.asarray(run["eval"]["eval_bpb"], np.float64)
  if len(steps) < 2:
    return None
  at = (1.0 - fraction) * steps[-1]
  if at < steps[0]:
    return None
  return float(np.interp(at, steps, loss) - loss[-1])


def time_to_loss(run: dict, x_key: str, target: float) -> float | None:
  """The first ``x_key`` (e.g. a simulated time) at which ``run``'s eval loss
  reaches ``target``, linear between evals; None if it never does."""
  x = run["eval"][x_key]
  y = run["eval"]["eval_bpb"]
  for i, (xi, yi) in enumerate(zip(x, y)):
    if yi <= target:
      if i == 0:
        return float(xi)
      x0, y0 = x[i - 1], y[i - 1]
      return float(x0 + (xi - x0) * (y0 - target) / (y0 - yi))
  return None


def ref_targets(ref_runs: list[dict]) -> dict:
  """Each seed's target for the time to the reference's loss: the reference
  run's last training-time eval on that seed. The curves a time is read from
  are training-time evals (the spread sample), so the target is on the same
  eval set; the final whole-split eval is another set (in the many/Python
  cell 0.005-0.026 bits/byte below the last training-time eval on the runs
  checked), which a curve may never reach (``experiments/report.py`` and
  ``experiments/time_to_target.py`` both read times against these)."""
  return {r["seed"]: r["eval"]["eval_bpb"][-1] for r in ref_runs if r["eval"]["eval_bpb"]}


def frontier_points(all_stats: dict, labels: Sequence[str]) -> np.ndarray:
  """The Pareto frontier of the ``labels``' ``(syncs, loss)`` means (N x 2,
  sorted by syncs): the points no other point beats in both syncs and loss, so
  loss falls strictly as syncs grow along it."""
  pts = sorted(
      (all_stats[l]["syncs"][0], all_stats[l]["final_eval_bpb"][0]) for l in labels
  )
  kept = []
  for syncs, loss in pts:  # by syncs, then loss: keep each new best loss
    if not kept or loss < kept[-1][1]:
      if kept and kept[-1][0] == syncs:
        continue
      kept.append((syncs, loss))
  return np.asarray(kept, np.float64).reshape(-1, 2)


def evaluate_claim(
    all_stats: dict,
    reference: str,
    candidate: str,
    min_saving: float,
    frontier: Sequence[str] = (),
) -> dict:
  """ "``candidate`` needs at least ``min_saving`` fewer syncs than ``reference``
  with a final eval loss no worse than the reference's mean plus its seed
  spread". With ``frontier`` (fixed-H runs), also where the candidate sits
  against it: the frontier's loss at the candidate's syncs (linear in syncs
  between the points) and the syncs the frontier needs for the candidate's loss.
  """
  ref, cand = all_stats[reference], all_stats[candidate]
  saving = 1.0 - cand["syncs"][0] / ref["syncs"][0]
  delta = cand["final_eval_bpb"][0] - ref["final_eval_bpb"][0]
  tolerance = ref["final_eval_bpb"][1]
  paired = (
      np.subtract(cand["loss_by_seed"], ref["loss_by_seed"]).tolist()
      if cand.get("seeds") and cand["seeds"] == ref.get("seeds")
      else None
  )
  out = dict(
      reference=reference,
      candidate=candidate,
      min_saving=min_saving,
      sync_saving=saving,
      loss_delta=delta,
      tolerance=tolerance,
      paired_deltas=paired,
      equal_quality=bool(delta <= tolerance),
      holds=bool(saving >= min_saving and delta <= tolerance),
  )
  if frontier and candidate not in frontier:
    pts = frontier_points(all_stats, frontier)
    s, l = cand["syncs"][0], cand["final_eval_bpb"][0]
    inside = pts[0, 0] <= s <= pts[-1, 0]
    out["frontier_loss_at_syncs"] = (
        float(np.interp(s, pts[:, 0], pts[:, 1])) if inside else None
    )
    out["below_frontier"] = bool(l < out["frontier_loss_at_syncs"]) if inside else None
    # Syncs the frontier needs to reach the candidate's loss (loss falls along it).
    by_loss = pts[::-1]
    reach = by_loss[0, 1] <= l <= by_loss[-1, 1]
    out["frontier_syncs_at_loss"] = (
        float(np.interp(l, by_loss[:, 1], by_loss[:, 0])) if reach else None
    )
    out["saving_at_equal_loss"] = (
        1.0 - s / out["frontier_syncs_at_loss"]
        if reach and out["frontier_syncs_at_loss"]
        else None
    )
    out["below_whole_frontier"] = bool(l < pts[:, 1].min())
    out["frontier_best"] = [float(pts[-1, 0]), float(pts[-1, 1])]
  return out


def t_quantile(n: int, level: float = 0.95) -> float:
  """``t_{(1+level)/2, n-1}``: the Student-t quantile of a two-sided interval
  over ``n`` paired seeds."""
  from scipy import stats as sstats

  return float(sstats.t.ppf(0.5 + level / 2, n - 1))


def half_width(sd: float, n: int, level: float = 0.95) -> float:
  """``t_{(1+level)/2, n-1} sd / sqrt(n)``: the half-width of a paired
  t-interval over ``n`` seeds whose differences have spread ``sd`` (infinite
  below two seeds)."""
  if n < 2:
    return float("inf")
  return t_quantile(n, level) * sd / math.sqrt(n)


def seeds_needed(sd: float, tolerance: float, level: float = 0.95, minimum: int = 10) -> int:
  """The smallest ``n >= minimum`` whose :func:`half_width` at ``sd`` is at
  most ``tolerance``: the seeds a report needs to resolve its tolerance."""
  if tolerance <= 0:
    raise ValueError(f"tolerance must be > 0, got {tolerance}")
  n = max(minimum, 2)
  while half_width(sd, n, level) > tolerance and n < 100_000:
    n += 1
  return n


def seed_plan(
    sds: dict,
    tolerance: float,
    minimum: int,
    maximum: int,
    quick: bool = False,
    fixed: int | None = None,
) -> dict:
  """A report's fresh seeds from the tuning seeds' spreads ``sds`` (one per
  paired difference it decides): the largest ``sd``, the count that resolves
  ``tolerance`` at it (:func:`seeds_needed`) kept in ``[minimum, maximum]``,
  and the half-width that count reaches (a quick check: 2 seeds). A report
  whose seeds are ``fixed`` (another report's) gets the count it needed and
  the half-width its ``fixed`` seeds reach. ``sds`` comes back as pairs (a
  study field holds no nested dict)."""
  sd = max(sds.values())
  out = dict(sd=sd, sds=tuple(sds.items()), tolerance=tolerance)
  if fixed is not None:
    needed = seeds_needed(sd, tolerance, minimum=minimum)
    reached = half_width(sd, fixed) if fixed > 1 else None
    return dict(out, seeds=fixed, needed=needed, half_width=reached)
  if quick:
    return dict(out, seeds=2, needed=2, half_width=None)
  needed = seeds_needed(sd, tolerance, minimum=minimum)
  seeds = min(needed, maximum)
  return dict(out, seeds=seeds, needed=needed, half_width=half_width(sd, seeds))


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> dict:
  """Mean of paired per-seed differences with its Student-t interval.

  ``mean ± t_{(1+level)/2, n-1} · sd / sqrt(n)``; with one seed the half-width is
  infinite (no interval).

  Returns:
    ``dict(n, mean, half_width, low, high, per_seed)``.
  """
  d = np.asarray(diffs, np.float64)
  n = int(d.size)
  mean = float(d.mean()) if n else float("nan")
  half = half_width(float(d.std(ddof=1)) if n > 1 else 0.0, n, level)
  return dict(
      n=n,
      mean=mean,
      half_width=half,
      low=mean - half,
      high=mean + half,
      per_seed=d.tolist(),
  )


def verdict(ci: dict, tolerance: float, lower_is_better: bool = True) -> str:
  """The plain verdict of a difference's interval, one rule for both signs:

  * ``equal``: the interval lies inside ``±tolerance`` (ends included), whether
    or not it excludes 0: a resolved difference too small to matter, a gain as
    much as a loss;
  * ``better`` / ``worse``: otherwise, the interval excludes 0 on the better /
    worse side (a loss difference is better below 0; a saving, with
    ``lower_is_better=False``, above it);
  * ``inconclusive``: none of these (too few seeds or too much spread).
  """
  low, high = ci["low"], ci["high"]
  if -tolerance <= low and high <= tolerance:
    return "equal"
  if high < 0:
    return "better" if lower_is_better else "worse"
  if low > 0:
    return "worse" if lower_is_better else "better"
  return "inconclusive"


def seed_frontier(
    runs: dict[str, list[dict]], frontier: Sequence[str], i: int, key: str = "final_eval_bpb"
):
  """Seed ``i``'s (syncs, loss) frontier points of the ``frontier`` labels, sorted
  by syncs; the loss is the summary's ``key``."""
  return sorted((runs[l][i]["summary"]["syncs"], runs[l][i]["summary"][key]) for l in frontier)


def frontier_loss_at(points, syncs: float) -> float:
  """Loss of a frontier at ``syncs``: linear in syncs between its points, and its
  end points' loss beyond them (no extrapolation)."""
  x, y = zip(*points)
  return float(np.interp(syncs, x, y))


def frontier_syncs_at(points, loss: float) -> float | None:
  """Syncs the frontier needs for ``loss`` (linear between points, loss taken
  monotone along the frontier's lower envelope); None outside its loss range."""
  env, best = [], float("inf")
  for x, y in points:  # by syncs: keep the running best loss
    best = min(best, y)
    env.append((x, best))
  xs, ys = zip(*env)
  if not ys[-1] <= loss <= ys[0]:
    return None
  for j in range(1, len(env)):
    (x0, y0), (x1, y1) = env[j - 1], env[j]
    if y1 <= loss <= y0:
      return float(x0 if y0 == y1 else x0 + (x1 - x0) * (y0 - loss) / (y0 - y1))
  return float(xs[0])


def compare(
    runs: dict[str, list[dict]],
    candidate: str,
    reference: str,
    frontier: Sequence[str],
    tolerance: float,
    level: float = 0.95,
    key: str = "final_eval_bpb",
) -> dict:
  """A paired comparison of ``candidate`` against ``reference`` on the same seeds.

  ``reference`` is a label, or ``"frontier"``: the fixed-H frontier of each seed
  interpolated at the candidate's sync count on that seed. Returns the loss
  difference's interval (candidate minus reference, bits/byte), its verdict at
  ``tolerance``, the sync ratio, and against the frontier the syncs it needs for
  the candidate's loss (``syncs_saved``: 1 - candidate syncs / those syncs, with
  its interval over the seeds where the frontier reaches that loss). The loss is
  the summary's ``key``: the headline model's, or ``final_eval_bpb_worker``, the
  model one worker holds (``runlog.worker_bpb``).
  """
  cand = runs[candidate]
  seeds = [r["seed"] for r in cand]
  diffs, saved, ref_syncs = [], [], []
  for i, r in enumerate(cand):
    loss, syncs = r["summary"][key], r["summary"]["syncs"]
    if reference == "frontier":
      pts = seed_frontier(runs, frontier, i, key)
      diffs.append(loss - frontier_loss_at(pts, syncs))
      need = frontier_syncs_at(pts, loss)
      if need:
        saved.append(1.0 - syncs / need)
      ref_syncs.append(need)
    else:
      ref = runs[reference][i]
      if ref["seed"] != r["seed"]:
        raise ValueError(f"{candidate} and {reference} are not on the same seeds")
      diffs.append(loss - ref["summary"][key])
      ref_syncs.append(ref["summary"]["syncs"])
      saved.append(1.0 - syncs / ref["summary"]["syncs"])
  ci = paired_interval(diffs, level)
  return dict(
      candidate=candidate,
      reference=reference,
      model="worker" if key == "final_eval_bpb_worker" else "headline",
      seeds=seeds,
      loss=ci,
      verdict=verdict(ci, tolerance),
      tolerance=tolerance,
      syncs=float(np.mean([r["summary"]["syncs"] for r in cand])),
      reference_syncs=ref_syncs,
      syncs_saved=paired_interval(saved, level) if saved else None,
      frontier_reaches=len(saved),
  )
