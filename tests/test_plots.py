"""The report's plots keep a study's long title inside the figure, tell apart
more labels than the colour cycle holds, and draw a frontier apart from the
rows read against it."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import numpy as np

from experiments import plots

LONG = (
    "Momentum schedules (report): AutoLoCo vs schedule-tuned DiLoCo, "
    "base/shakespeare: final loss vs syncs (communication events)"
)


def test_a_long_title_wraps_inside_the_figure():
  # The narrowest panel the reports draw: the left one of write_plots' pair.
  fig, (ax, zoom) = plt.subplots(1, 2, figsize=(13, 4.5))
  ax.plot([1, 2], [3, 4])
  plots.set_title(zoom, "zoom: near the best final loss")
  plots.set_title(ax, LONG)
  fig.tight_layout()
  renderer = fig.canvas.get_renderer()
  title = ax.title.get_window_extent(renderer)
  box = fig.bbox
  right = zoom.title.get_window_extent(renderer)
  assert box.x0 <= title.x0 and title.x1 <= right.x0 and title.y1 <= box.y1
  lines = ax.get_title().split("\n")
  assert len(lines) == 2 and max(map(len, lines)) <= plots.TITLE_WIDTH
  assert " ".join(lines) == LONG
  plt.close(fig)


def test_a_report_of_fourteen_labels_draws_each_in_its_own_style():
  # The schedule report draws 14 labels; the colour cycle has 10, so with
  # colour alone diloco_h10 and adaptive_on_schedule were drawn alike.
  labels = [f"run{i}" for i in range(14)]
  stats = {
      l: dict(syncs=(10.0 * (i + 1), 0.0), final_eval_bpb=(2.0 + 0.01 * i, 0.01))
      for i, l in enumerate(labels)
  }
  result = dict(title="t", labels=labels, stats=stats, frontier=[])
  fig = plots.plot_frontier(result)
  handles, names = fig.axes[0].get_legend_handles_labels()
  assert names == labels
  drawn = []
  for h in handles:
    line = h.lines[0]  # an errorbar's marker line
    drawn.append((matplotlib.colors.to_hex(line.get_color()), line.get_marker()))
  assert len(set(drawn)) == 14, drawn
  assert drawn[0][0] == drawn[10][0] and drawn[0][1] != drawn[10][1]
  plt.close(fig)
  fig, ax = plt.subplots()
  runs = {
      l: [dict(eval=dict(tokens=[1.0, 2.0], eval_bpb=[3.0 - 0.01 * i, 2.9]))]
      for i, l in enumerate(labels)
  }
  plots.plot_curves(runs, "tokens", ax=ax)
  styles = {
      (matplotlib.colors.to_hex(line.get_color()), line.get_linestyle()) for line in ax.lines
  }
  assert len(styles) == 14 and len(ax.lines) == 14
  assert np.allclose(ax.lines[0].get_ydata()[[0, -1]], [3.0, 2.9])
  plt.close(fig)


def test_the_frontier_is_drawn_apart_from_the_rows_it_is_read_against():
  # issue 42's plots: six DiLoCo points and eight rows; with one colour cycle
  # over all fourteen, the rows took the frontier's colours (sparseloco_d1 was
  # diloco_h10's blue).
  front = [f"diloco_h{h}" for h in (10, 14, 20, 30, 40, 60)]
  rows = [f"row{i}" for i in range(8)]
  stats = {
      l: dict(bytes_per_worker=(1e6 * (i + 1), 0.0), final_eval_bpb=(2.2 - 0.01 * i, 0.01),
              loss_by_seed=[2.2, 2.21, 2.19])
      for i, l in enumerate(front + rows)
  }
  result = dict(title="t", labels=front + rows, stats=stats, frontier=front)
  fig = plots.plot_frontier(result, "bytes_per_worker", band="t95")
  ax = fig.axes[0]
  handles, names = ax.get_legend_handles_labels()
  assert names == ["tuned fixed-H frontier (black)"] + rows
  row_colors = [matplotlib.colors.to_hex(h.lines[0].get_color()) for h in handles[1:]]
  assert len(set(row_colors)) == len(rows) and "#000000" not in row_colors
  assert {t.get_text() for t in ax.texts} == set(front)
  # Bars: the 95% t-interval of the mean (n = 3, sd 0.01), as the y label says.
  assert "95% t-interval" in ax.get_ylabel()
  plt.close(fig)
