"""The report's plots keep a study's long title inside the figure."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

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
