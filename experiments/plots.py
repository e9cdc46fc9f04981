"""The report's plots: eval loss against tokens, syncs, bytes and simulated time,
final loss against syncs, and the adaptive runs' H and outer step over training."""

from __future__ import annotations

import os
import textwrap
from typing import Sequence

import numpy as np

from experiments.runlog import sim_key
from experiments import seed_stats
from experiments.seed_stats import frontier_points

X_LABELS = {
    "tokens": "tokens",
    "syncs": "syncs (full-model; a streaming run's P fragment syncs count one)",
    "bytes_per_worker": "bytes sent per worker",
    "peak_bandwidth": "peak bandwidth, bytes/s",
    "step": "inner step",
}
#: A title's characters per line: a study's long title wraps instead of running
#: off the figure's edges.
TITLE_WIDTH = 70


def set_title(ax, text: str) -> None:
  """``text`` as ``ax``'s title, wrapped at :data:`TITLE_WIDTH`."""
  ax.set_title(textwrap.fill(text, TITLE_WIDTH), fontsize=10)


#: Matplotlib's default cycle has 10 colours; past them a label keeps its
#: colour's place but takes the next marker and line style, so that 11-40
#: labels (a report of every control) stay told apart.
MARKERS = ("o", "s", "^", "D")
LINESTYLES = ("-", "--", ":", "-.")


def label_style(i: int) -> dict:
  """The ``i``-th label's colour, marker and line style: ``C{i mod 10}``, the
  ``i // 10``-th marker and line style (distinct for ``i < 40``)."""
  k = (i // 10) % len(MARKERS)
  return dict(color=f"C{i % 10}", marker=MARKERS[k], linestyle=LINESTYLES[k])


def _mean_curve(
    runs: Sequence[dict], x_key: str, y_key: str = "eval_bpb", num: int = 60,
    band: str = "range",
):
  """Seeds interpolated onto a common x grid: (x, mean, low, high), or None.
  ``band``: ``range`` (the lowest and highest seed) or ``t95`` (the Student-t
  95% interval of the mean, ``seed_stats.paired_interval``'s rule)."""
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
  mean = ys.mean(0)
  if band == "range":
    return grid, mean, ys.min(0), ys.max(0)
  if band != "t95":
    raise ValueError(f"unknown band {band!r}; choose range or t95")
  if len(ys) < 2:
    return grid, mean, mean, mean
  half = _t95(len(ys)) * ys.std(0, ddof=1) / np.sqrt(len(ys))
  return grid, mean, mean - half, mean + half


def plain_log_x(ax) -> None:
  """A log x axis labelled in plain numbers (``0.1``, ``3``, ``20``), without
  the minor ticks' ``3×10^0`` labels."""
  from matplotlib import ticker

  ax.set_xscale("log")
  ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def plot_curves(
    runs: dict[str, list[dict]], x_key: str, ax=None, log_x: bool = False, title: str = "",
    band: str = "range",
):
  """Eval loss against ``x_key`` (an eval column), one line per label: the mean
  over seeds, shaded between the lowest and highest seed (``band="t95"``: the
  95% interval of the mean)."""
  import matplotlib.pyplot as plt

  if ax is None:
    _, ax = plt.subplots(figsize=(7, 4.5))
  for i, (label, label_runs) in enumerate(runs.items()):
    curve = _mean_curve(label_runs, x_key, band=band)
    if curve is None:
      continue
    x, mean, lo, hi = curve
    style = label_style(i)
    ax.plot(
        x, mean, label=label, color=style["color"], linestyle=style["linestyle"],
        marker=style["marker"] if len(x) == 1 else None,
    )
    ax.fill_between(x, lo, hi, color=style["color"], alpha=0.2, linewidth=0)
  if log_x:
    plain_log_x(ax)
  xlabel = (
      f"simulated wall-clock, s ({x_key[len('sim_time_'):]})"
      if x_key.startswith("sim_time_")
      else X_LABELS.get(x_key, x_key)
  )
  ax.set_xlabel(xlabel)
  ax.set_ylabel("eval loss (bits/byte)")
  set_title(ax, title)
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
  set_title(axes[0, 0], title)
  fig.tight_layout()
  return fig


def plot_frontier(result: dict, x_key: str = "syncs", band: str = "range"):
  """Final eval loss against ``x_key`` (a per-label statistic: ``syncs``,
  ``bytes_per_worker``, ``peak_bandwidth``) for every label: the mean with
  error bars of its spread over seeds (``band="t95"``: the 95% t-interval of
  the mean, on the loss only). The frontier's labels are black, each named
  beside its point, and joined by a line (its Pareto points against syncs; its
  tuned points in order of ``x_key`` else); the other labels take the colours
  and markers of :func:`label_style` in their own order, the legend beside
  the axes."""
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(8.5, 4.5))
  st = result["stats"]
  front = set(result["frontier"] or ())
  others = [label for label in result["labels"] if label not in front]
  for label in result["labels"]:
    if x_key not in st[label]:
      continue
    (x, xs), (y, ys) = st[label][x_key], st[label]["final_eval_bpb"]
    if band == "t95":
      n = len(st[label]["loss_by_seed"])
      ys = _t95(n) * ys / np.sqrt(n) if n > 1 else 0.0
      xs = 0.0
    if label in front:
      ax.errorbar(x, y, xerr=xs, yerr=ys, fmt="o", color="k", capsize=2, ms=3,
                  elinewidth=0.8, alpha=0.6)
      ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, -9),
                  fontsize=6, color="0.2")
      continue
    style = label_style(others.index(label))
    ax.errorbar(
        x, y, xerr=xs, yerr=ys, fmt=style["marker"], color=style["color"], capsize=3,
        label=label,
    )
  if front:
    if x_key == "syncs":
      pts = frontier_points(st, result["frontier"])
    else:
      pts = np.asarray(sorted(
          (st[l][x_key][0], st[l]["final_eval_bpb"][0]) for l in result["frontier"]
      ))
    ax.plot(pts[:, 0], pts[:, 1], "k--", alpha=0.5, label="tuned fixed-H frontier (black)")
  if x_key != "syncs":
    ax.set_xscale("log")
  ax.margins(x=0.08)
  ax.set_xlabel(X_LABELS.get(x_key, x_key))
  bars = "95% t-interval of the mean" if band == "t95" else "± sd over seeds"
  ax.set_ylabel(f"final eval bits/byte (mean; bars: {bars})", fontsize=8)
  set_title(ax, f"{result['title']}: final loss vs {X_LABELS.get(x_key, x_key)}")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
  fig.tight_layout()
  return fig


def _t95(n: int) -> float:
  return seed_stats.t_quantile(n)


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

  # A quick study checks the pipeline: its pictures are drawn small.
  dpi = 40 if result.get("quick") else 110

  def save(fig, name):
    fig.savefig(os.path.join(report_dir, name), dpi=dpi)
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
  for x_key in result.get("cost_plots", ()):
    save(plot_frontier(result, x_key, band="t95"), f"final_loss_vs_{x_key}.png")
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
