"""Tables, claims and plots from runs' ``metrics.jsonl`` files.

Used by the sweep runner (``experiments/sweep.py``) and by the quickstart
notebook to compare runs:

  runs = {"diloco": [report.load_run("runs/d")], "autoloco": [report.load_run("runs/a")]}
  report.plot_curves(runs, "tokens")            # eval loss against tokens

Every statistic over seeds is a mean and a spread, the sample standard
deviation (``ddof=1``; 0 for one seed).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from autoloco_jax import metrics as metrics_lib

#: Per-eval columns kept for curves, and per-round columns for adaptive runs.
EVAL_KEYS = ("step", "tokens", "syncs", "bytes_per_worker", "sim_time", "eval_bpb")
ROUND_KEYS = ("step", "h", "outer_lr", "outer_momentum", "ratio")
#: Final numbers kept from a run's summary line.
SUMMARY_KEYS = (
    "algorithm",
    "final_eval_bpb",
    "syncs",
    "bytes_per_worker",
    "sim_time",
    "network",
    "tokens",
    "tokens_per_sec",
    "wall_time",
    "num_params",
    "peak_bandwidth",
)

X_LABELS = {
    "tokens": "tokens",
    "syncs": "syncs (communication events)",
    "bytes_per_worker": "bytes sent per worker",
    "step": "inner step",
}


# ----------------------------------------------------------------------------
# Reading runs.


def load_run(workdir: str, seed: int | None = None) -> dict:
  """One finished run: its final numbers, eval curve and adaptive round trace.

  Returns ``dict(seed, workdir, summary, eval, rounds)``; ``eval`` and
  ``rounds`` map a column to a list (``sim_time_<network>`` columns included).

  Raises:
    ValueError: the run has no summary line (not finished).
  """
  records = metrics_lib.read(os.path.join(workdir, "metrics.jsonl"))
  if not records or not records[-1].get("summary"):
    raise ValueError(f"{workdir} holds no finished run (no summary line)")
  summary = records[-1]
  rows = records[:-1]
  extra = sorted(k for k in summary if k.startswith("sim_time_"))
  evals = [r for r in rows if "eval_bpb" in r]
  eval_cols = {k: [r.get(k) for r in evals] for k in EVAL_KEYS + tuple(extra)}
  adaptive = summary["algorithm"] == "autoloco"
  round_cols = {k: [r.get(k) for r in rows] for k in ROUND_KEYS} if adaptive else {}
  return dict(
      seed=seed,
      workdir=workdir,
      summary={k: summary.get(k) for k in SUMMARY_KEYS + tuple(extra)},
      eval=eval_cols,
      rounds=round_cols,
  )


def sim_key(run: dict, network: str) -> str:
  """The column holding ``run``'s simulated time on ``network``."""
  return "sim_time" if run["summary"]["network"] == network else f"sim_time_{network}"


# ----------------------------------------------------------------------------
# Statistics and claims.


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
  peaks = [r["summary"].get("peak_bandwidth") for r in runs]
  if all(p is not None for p in peaks):
    out["peak_bandwidth"] = mean_std(peaks)
  for net in networks:
    out[f"sim_time@{net}"] = mean_std([r["summary"][sim_key(r, net)] for r in runs])
  return out


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


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> dict:
  """Mean of paired per-seed differences with its Student-t interval.

  ``mean ± t_{(1+level)/2, n-1} · sd / sqrt(n)``; with one seed the half-width is
  infinite (no interval).

  Returns:
    ``dict(n, mean, half_width, low, high, per_seed)``.
  """
  from scipy import stats as sstats

  d = np.asarray(diffs, np.float64)
  n = int(d.size)
  mean = float(d.mean()) if n else float("nan")
  if n > 1:
    half = float(sstats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
  else:
    half = float("inf")
  return dict(
      n=n,
      mean=mean,
      half_width=half,
      low=mean - half,
      high=mean + half,
      per_seed=d.tolist(),
  )


def verdict(ci: dict, tolerance: float) -> str:
  """The plain verdict of a loss difference's interval (lower loss is better):

  * ``better``: the interval excludes 0 below;
  * ``equal``: it lies inside ``±tolerance`` (even if it excludes 0 above: a
    difference too small to matter, see ``significant`` in :func:`compare`);
  * ``worse``: it excludes 0 above and leaves the tolerance;
  * ``inconclusive``: none of these (too few seeds or too much spread).
  """
  if ci["high"] < 0:
    return "better"
  if -tolerance <= ci["low"] and ci["high"] <= tolerance:
    return "equal"
  if ci["low"] > 0:
    return "worse"
  return "inconclusive"


def seed_frontier(runs: dict[str, list[dict]], frontier: Sequence[str], i: int):
  """Seed ``i``'s (syncs, loss) frontier points of the ``frontier`` labels, sorted
  by syncs."""
  return sorted(
      (runs[l][i]["summary"]["syncs"], runs[l][i]["summary"]["final_eval_bpb"])
      for l in frontier
  )


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
) -> dict:
  """A paired comparison of ``candidate`` against ``reference`` on the same seeds.

  ``reference`` is a label, or ``"frontier"``: the fixed-H frontier of each seed
  interpolated at the candidate's sync count on that seed. Returns the loss
  difference's interval (candidate minus reference, bits/byte), its verdict at
  ``tolerance``, the sync ratio, and against the frontier the syncs it needs for
  the candidate's loss (``syncs_saved``: 1 - candidate syncs / those syncs, with
  its interval over the seeds where the frontier reaches that loss).
  """
  cand = runs[candidate]
  seeds = [r["seed"] for r in cand]
  diffs, saved, ref_syncs = [], [], []
  for i, r in enumerate(cand):
    loss, syncs = r["summary"]["final_eval_bpb"], r["summary"]["syncs"]
    if reference == "frontier":
      pts = seed_frontier(runs, frontier, i)
      diffs.append(loss - frontier_loss_at(pts, syncs))
      need = frontier_syncs_at(pts, loss)
      if need:
        saved.append(1.0 - syncs / need)
      ref_syncs.append(need)
    else:
      ref = runs[reference][i]
      if ref["seed"] != r["seed"]:
        raise ValueError(f"{candidate} and {reference} are not on the same seeds")
      diffs.append(loss - ref["summary"]["final_eval_bpb"])
      ref_syncs.append(ref["summary"]["syncs"])
      saved.append(1.0 - syncs / ref["summary"]["syncs"])
  ci = paired_interval(diffs, level)
  return dict(
      candidate=candidate,
      reference=reference,
      seeds=seeds,
      loss=ci,
      verdict=verdict(ci, tolerance),
      tolerance=tolerance,
      syncs=float(np.mean([r["summary"]["syncs"] for r in cand])),
      reference_syncs=ref_syncs,
      syncs_saved=paired_interval(saved, level) if saved else None,
      frontier_reaches=len(saved),
  )


def comparison_sentence(c: dict) -> str:
  """One line of the report: the interval and its plain verdict."""
  ci = c["loss"]
  ref = (
      "the tuned frontier at equal syncs"
      if c["reference"] == "frontier"
      else (f"`{c['reference']}`")
  )
  words = dict(
      better="**better** (the interval excludes 0)",
      worse="**worse** (the interval excludes 0)",
      equal=f"**equal quality** (inside ±{c['tolerance']:g}"
      + (", though the interval excludes 0 above" if ci["low"] > 0 else "")
      + ")",
      inconclusive=f"**inconclusive** (neither excludes 0 nor inside ±{c['tolerance']:g})",
  )[c["verdict"]]
  text = (
      f"`{c['candidate']}` vs {ref}: {ci['mean']:+.4f} bits/byte, 95% CI "
      f"[{ci['low']:+.4f}, {ci['high']:+.4f}] (n = {ci['n']}): {words}."
  )
  sv = c.get("syncs_saved")
  if sv:
    what = (
        "fewer syncs than the frontier needs for its loss"
        if c["reference"] == ("frontier")
        else "fewer syncs"
    )
    text += (
        f" {sv['mean']:+.0%} {what} (CI [{sv['low']:+.0%}, {sv['high']:+.0%}]"
        + (
            f", on the {c['frontier_reaches']} of {ci['n']} seeds where the frontier "
            "reaches it)"
            if c["frontier_reaches"] < ci["n"]
            else ")"
        )
        + "."
    )
  return text


def collect(study: Any, runs: dict[str, list[dict]]) -> dict:
  """Everything the report states, JSON-able: per-label statistics, claims,
  and every run's final numbers and curves."""
  networks = tuple(study.networks)
  all_stats = {label: stats(runs[label], networks) for label in study.labels}
  # Simulated time to reach the reference's final loss (mean over seeds; None
  # if a seed never does): the "converges N times faster" measure.
  for label, ref in study.reference.items():
    target = all_stats[ref]["final_eval_bpb"][0]
    for net in networks:
      times = [time_to_loss(r, sim_key(r, net), target) for r in runs[label]]
      all_stats[label][f"time_to_ref_loss@{net}"] = (
          None if any(t is None for t in times) else float(np.mean(times))
      )
  order = list(study.labels)
  claims = {
      name: evaluate_claim(
          all_stats, c.reference, c.candidate, c.min_saving, tuple(study.frontier)
      )
      for name, c in sorted(
          study.claims.items(), key=lambda item: order.index(item[1].candidate)
      )
  }
  tolerance = float(study.get("tolerance", 0.01))
  comparisons = [
      compare(runs, cand, ref, tuple(study.frontier), tolerance)
      for cand, ref in study.get("comparisons", ())
  ]
  return dict(
      name=study.name,
      title=study.title,
      comparisons=comparisons,
      quick=bool(study.quick),
      seeds=list(study.seeds),
      labels=list(study.labels),
      reference=dict(study.reference),
      frontier=list(study.frontier),
      networks=list(networks),
      stats=all_stats,
      claims=claims,
      runs={label: runs[label] for label in study.labels},
  )


# ----------------------------------------------------------------------------
# Markdown.


def _pm(ms: tuple[float, float], fmt: str = "{:.3f}") -> str:
  m, s = ms
  return f"{fmt.format(m)} ± {fmt.format(s)}"


def _describe(config: Any) -> str:
  """A run's algorithm and its knobs, e.g. ``autoloco, lr_quadratic 10..80, momentum``."""
  a = config.algorithm
  parts = [a, f"K={config.num_workers}"]
  if a == "autoloco":
    i = config.interval
    parts += [
        f"{i.controller} H0={i.h} [{i.h_min}..{i.h_max}]",
        f"correction {config.autoloco.correction}",
    ]
    on_change = config.autoloco.get("on_change", "keep")
    if on_change != "keep":
      parts.append(f"momentum buffer {on_change}")
  elif a != "ddp":
    parts.append(f"H={config.interval.h}")
  if config.data.partition != "iid":
    parts.append(config.data.partition)
  return ", ".join(parts)


def _saving(value: float, reference: float) -> str:
  """``+37%`` (fewer than the reference), or ``5.0x as many``."""
  if value <= reference:
    return f"{1 - value / reference:+.0%}"
  return f"{value / reference:.1f}x as many"


def markdown(study: Any, result: dict) -> str:
  """The study's table (mean ± spread over seeds) and its claims, in markdown."""
  st, nets = result["stats"], result["networks"]
  head = (
      [
          "run",
          "what",
          "final eval bits/byte",
          "Δ vs ref",
          "syncs",
          "syncs saved",
          "MB/worker",
      ]
      + [f"sim s ({n})" for n in nets]
      + [f"× ref ({n})" for n in nets]
  )
  head += [f"to ref loss × ({n})" for n in nets]
  lines = [
      f"Seeds: {', '.join(map(str, result['seeds']))}. Loss in bits/byte on the "
      "validation plays; ± is the sample standard deviation over seeds; "
      "`Δ`, `saved` and `×` compare means with the run's reference. `sim s`: "
      "simulated wall-clock seconds on that network (fixed compute time per "
      "step), `× ref` its ratio to the reference's (below 1 is faster); "
      "`to ref loss ×`: simulated time until the run's eval loss first reaches "
      "the reference's final loss, over the reference's whole time (mean over "
      "seeds; `never` if a seed does not reach it).",
      "",
      "| " + " | ".join(head) + " |",
      "| --- | --- | " + " | ".join(["---:"] * (len(head) - 2)) + " |",
  ]
  for label in result["labels"]:
    s = st[label]
    ref = result["reference"].get(label)
    r = st.get(ref) if ref else None
    cells = [f"`{label}`", _describe(study.runs[label]), _pm(s["final_eval_bpb"])]
    cells.append(
        f"{s['final_eval_bpb'][0] - r['final_eval_bpb'][0]:+.3f}" if r else "ref"
    )
    cells.append(f"{s['syncs'][0]:.1f}")
    cells.append(_saving(s["syncs"][0], r["syncs"][0]) if r else "")
    cells.append(f"{s['bytes_per_worker'][0] / 1e6:.1f}")
    cells += [f"{s[f'sim_time@{n}'][0]:.1f}" for n in nets]
    cells += [
        f"{s[f'sim_time@{n}'][0] / r[f'sim_time@{n}'][0]:.2f}" if r else "" for n in nets
    ]
    for n in nets:
      t = s.get(f"time_to_ref_loss@{n}")
      cells.append(
          "" if not r else "never" if t is None else f"{t / r[f'sim_time@{n}'][0]:.2f}"
      )
    lines.append("| " + " | ".join(cells) + " |")
  for name, c in result["claims"].items():
    lines += ["", claim_sentence(name, c)]
  if result.get("comparisons"):
    lines += [
        "",
        "Paired comparisons (per seed: candidate minus reference, final eval "
        "bits/byte; 95% Student-t interval over the seeds):",
        "",
    ]
    lines += [f"* {comparison_sentence(c)}" for c in result["comparisons"]]
  return "\n".join(lines) + "\n"


def claim_sentence(name: str, c: dict) -> str:
  verdict = "**holds**" if c["holds"] else "**does not hold**"
  fewer = (
      f"{c['sync_saving']:.0%} fewer"
      if c["sync_saving"] >= 0
      else f"{-c['sync_saving']:.0%} more"
  )
  paired = ""
  if c.get("paired_deltas") and len(c["paired_deltas"]) > 1:
    paired = ", per seed " + ", ".join(f"{d:+.3f}" for d in c["paired_deltas"])
  text = (
      f"Claim `{name}`: `{c['candidate']}` uses {fewer} syncs "
      f"than `{c['reference']}` (needed: {c['min_saving']:.0%} fewer) with a final loss "
      f"{c['loss_delta']:+.3f} bits from it{paired} (seed spread of the reference "
      f"{c['tolerance']:.3f}): {verdict}."
  )
  if c.get("frontier_loss_at_syncs") is not None:
    text += (
        f" Against fixed-H DiLoCo at the same syncs (interpolated loss "
        f"{c['frontier_loss_at_syncs']:.3f}) it is "
        f"{'below (better than)' if c['below_frontier'] else 'above (worse than)'} "
        "the frontier."
    )
  if c.get("below_whole_frontier"):
    text += (
        f" Its loss is below every fixed-H point (the best: "
        f"{c['frontier_best'][1]:.3f} in {c['frontier_best'][0]:.0f} syncs), so no fixed "
        "H in this study reaches it."
    )
  if c.get("saving_at_equal_loss") is not None:
    text += (
        f" Fixed-H DiLoCo needs {c['frontier_syncs_at_loss']:.1f} syncs for the "
        f"same loss: a saving of {c['saving_at_equal_loss']:.0%} at equal loss."
    )
  return text


# ----------------------------------------------------------------------------
# Plots.


def _mean_curve(runs: Sequence[dict], x_key: str, y_key: str = "eval_bpb", num: int = 60):
  """Seeds interpolated onto a common x grid: (x, mean, min, max), or None."""
  pairs = []
  for r in runs:
    x = np.asarray([v for v in r["eval"].get(x_key, []) if v is not None], np.float64)
    y = np.asarray(r["eval"][y_key][: len(x)], np.float64)
    if len(x):
      pairs.append((x, y))
  if not pairs:
    return None
  lo, hi = max(p[0][0] for p in pairs), min(p[0][-1] for p in pairs)
  grid = np.linspace(lo, hi, num) if hi > lo else np.asarray([lo])
  ys = np.stack([np.interp(grid, x, y) for x, y in pairs])
  return grid, ys.mean(0), ys.min(0), ys.max(0)


def plot_curves(
    runs: dict[str, list[dict]], x_key: str, ax=None, log_x: bool = False, title: str = ""
):
  """Eval loss against ``x_key`` (an eval column), one line per label: the mean
  over seeds, shaded between the lowest and highest seed."""
  import matplotlib.pyplot as plt

  if ax is None:
    _, ax = plt.subplots(figsize=(7, 4.5))
  for label, label_runs in runs.items():
    curve = _mean_curve(label_runs, x_key)
    if curve is None:
      continue
    x, mean, lo, hi = curve
    (line,) = ax.plot(x, mean, label=label, marker="." if len(x) == 1 else None)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
  if log_x:
    ax.set_xscale("log")
  xlabel = (
      f"simulated wall-clock, s ({x_key[len('sim_time_'):]})"
      if x_key.startswith("sim_time_")
      else X_LABELS.get(x_key, x_key)
  )
  ax.set_xlabel(xlabel)
  ax.set_ylabel("eval loss (bits/byte)")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  return ax


def _with_sim_column(runs: dict[str, list[dict]], network: str) -> dict:
  """Copies of ``runs`` whose eval curves have ``sim_time_<network>`` filled."""
  out = {}
  for label, label_runs in runs.items():
    out[label] = []
    for r in label_runs:
      ev = dict(r["eval"])
      ev[f"sim_time_{network}"] = ev[sim_key(r, network)]
      out[label].append(dict(r, eval=ev))
  return out


def plot_rounds(
    runs: dict[str, list[dict]],
    keys: Sequence[str],
    ylabels: Sequence[str],
    title: str = "",
):
  """Per-round values (``h``, ``outer_lr``, ...) against the inner step
  for adaptive runs: seed 0 solid, other seeds faint."""
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(len(keys), 1, figsize=(7, 3 * len(keys)), squeeze=False)
  for ax, key, ylabel in zip(axes[:, 0], keys, ylabels):
    for label, label_runs in runs.items():
      color = None
      for i, r in enumerate(label_runs):
        step, value = r["rounds"]["step"], r["rounds"][key]
        (line,) = ax.step(
            step,
            value,
            where="pre",
            color=color,
            alpha=1.0 if i == 0 else 0.3,
            label=label if i == 0 else None,
        )
        color = line.get_color()
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  axes[-1, 0].set_xlabel("inner step (end of round)")
  axes[0, 0].set_title(title)
  fig.tight_layout()
  return fig


def plot_frontier(result: dict):
  """Final eval loss against syncs (mean ± spread) for every label; the
  frontier labels joined by a line."""
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(7, 4.5))
  st = result["stats"]
  for label in result["labels"]:
    (x, xs), (y, ys) = st[label]["syncs"], st[label]["final_eval_bpb"]
    ax.errorbar(x, y, xerr=xs, yerr=ys, fmt="o", capsize=3, label=label)
  if result["frontier"]:
    pts = frontier_points(st, result["frontier"])
    ax.plot(pts[:, 0], pts[:, 1], "k--", alpha=0.5, label="fixed-H Pareto frontier")
  ax.set_xlabel("syncs")
  ax.set_ylabel("final eval loss (bits/byte)")
  ax.set_title(f"{result['title']}: final loss vs syncs")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def _zoom(ax, best: float) -> None:
  """Limits ``ax`` to losses within 0.25 bits of the ``best`` final loss,
  where the runs that train separate."""
  ax.set_ylim(best - 0.03, best + 0.25)


def write_plots(result: dict, report_dir: str) -> list[str]:
  """Writes the study's PNGs; returns their file names."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  runs, title = result["runs"], result["title"]
  names = []

  def save(fig, name):
    fig.savefig(os.path.join(report_dir, name), dpi=110)
    plt.close(fig)
    names.append(name)

  best = min(s["final_eval_bpb"][0] for s in result["stats"].values())
  curves = [
      ("tokens", runs, False),
      ("syncs", runs, True),
      ("bytes_per_worker", runs, True),
  ]
  curves += [
      (f"sim_time_{net}", _with_sim_column(runs, net), True) for net in result["networks"]
  ]
  for x_key, x_runs, log_x in curves:
    fig, (full, zoom) = plt.subplots(1, 2, figsize=(13, 4.5))
    plot_curves(x_runs, x_key, ax=full, log_x=log_x, title=title)
    plot_curves(
        x_runs, x_key, ax=zoom, log_x=log_x, title="zoom: near the best final loss"
    )
    _zoom(zoom, best)
    fig.tight_layout()
    save(fig, f"loss_vs_{x_key}.png")
  save(plot_frontier(result), "final_loss_vs_syncs.png")
  adaptive = {label: rs for label, rs in runs.items() if rs and rs[0]["rounds"]}
  if adaptive:
    save(
        plot_rounds(adaptive, ("h",), ("H (inner steps)",), f"{title}: H over training"),
        "interval.png",
    )
    save(
        plot_rounds(
            adaptive,
            ("outer_lr", "outer_momentum"),
            ("outer lr α_t", "outer momentum β_t"),
            f"{title}: outer step over training",
        ),
        "outer.png",
    )
  return names


def write_report(study: Any, runs: dict[str, list[dict]], report_dir: str) -> dict:
  """Writes ``summary.json``, the plots and ``results.md`` to ``report_dir``;
  returns the collected result."""
  os.makedirs(report_dir, exist_ok=True)
  result = collect(study, runs)
  with open(os.path.join(report_dir, "summary.json"), "w") as f:
    json.dump(_finite(result), f, indent=1)
  plots = write_plots(result, report_dir)
  body = [f"# {study.title}", "", markdown(study, result)]
  body += [f"![{name[:-4]}]({name})" for name in plots]
  with open(os.path.join(report_dir, "results.md"), "w") as f:
    f.write("\n".join(body) + "\n")
  result["plots"] = plots
  return result


def _finite(tree: Any) -> Any:
  """NaN and inf as strings, so the JSON is strict."""
  if isinstance(tree, dict):
    return {k: _finite(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_finite(v) for v in tree]
  if isinstance(tree, float) and not math.isfinite(tree):
    return str(tree)
  return tree
