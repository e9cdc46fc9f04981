"""The compression table (experiments/evidence_tables.py): rows against a named
reference, ratios, seed counts and, beside a frontier, both intervals.
Synthetic summaries only: nothing is trained."""

from experiments import evidence_tables

MB = 1e6


def _stats(loss, syncs, bytes_, peak, seeds=(100, 101, 102)):
  return dict(final_eval_bpb=(loss, 0.01), syncs=(syncs, 0.0), bytes_per_worker=(bytes_, 0.0),
              peak_bandwidth=(peak, 0.0), seeds=list(seeds))


def _cells(line):
  """A markdown table row's cells."""
  return [c.strip() for c in line.strip().strip("|").split("|")]


def _comparison(candidate, reference, low, high, verdict):
  loss = dict(n=3, mean=(low + high) / 2, half_width=(high - low) / 2, low=low, high=high)
  return dict(candidate=candidate, reference=reference, loss=loss, verdict=verdict)


def test_rows_against_diloco_at_h_ref_with_ratios_and_both_intervals():
  summary = dict(
      seeds=[100, 101, 102],
      labels=["diloco_h10", "diloco_h20", "sparse", "stream"],
      stats=dict(
          diloco_h10=_stats(2.13, 300, 768 * MB, 128 * MB),
          diloco_h20=_stats(2.16, 150, 384 * MB, 128 * MB),
          sparse=_stats(2.15, 150, 3.84 * MB, 1.28 * MB),
          stream=_stats(2.14, 150, 384 * MB, 32 * MB),
      ),
      comparisons=[
          _comparison("sparse", "frontier", -0.03, 0.01, "inconclusive"),
          _comparison("sparse", "diloco_h20", -0.002, 0.003, "equal"),
          _comparison("stream", "diloco_h20", -0.03, -0.01, "better"),
      ],
  )
  lines = evidence_tables.compression_section(
      summary, ref="diloco_h20", command="configs/studies/compression_many.py:report")
  rows = {_cells(line)[0]: _cells(line) for line in lines if line.startswith("| `")}
  # The frontier's other points are not rows: only the reference and its candidates.
  assert list(rows) == ["`diloco_h20`", "`sparse`", "`stream`"]
  sparse, stream = rows["`sparse`"], rows["`stream`"]
  assert sparse[4] == "100.0×" and sparse[6] == "100.0×"  # bytes ÷, peak ÷
  assert stream[4] == "1.0×" and stream[6] == "4.0×"
  assert sparse[8] == "3"  # seeds
  assert sparse[9] == "+0.0005 [-0.0020, +0.0030]" and sparse[10] == "equal"
  assert sparse[11] == "-0.0100 [-0.0300, +0.0100]" and sparse[12] == "inconclusive"
  assert stream[11] == stream[12] == ""  # no frontier comparison for it
  assert "Δ vs frontier" in lines[2]


def test_without_a_frontier_every_row_is_against_diloco():
  summary = dict(
      seeds=[100, 101],
      labels=["diloco", "int8"],
      stats=dict(diloco=_stats(2.9, 30, 148 * MB, 246 * MB, (100, 101)),
                 int8=_stats(2.91, 30, 76 * MB, 127 * MB, (100, 101))),
      comparisons=[_comparison("int8", "diloco", -0.01, 0.03, "inconclusive")],
  )
  lines = evidence_tables.compression_section(summary)
  assert "Δ vs frontier" not in "\n".join(lines)
  int8 = _cells(next(line for line in lines if line.startswith("| `int8`")))
  assert len(int8) == 11
  assert int8[4] == "1.9×" and int8[8] == "2" and int8[10] == "inconclusive"


def test_each_target_is_met_only_with_its_cost_and_equal_quality():
  """A row meets the issue's target when its cost ratio reaches it and its Δ's
  verdict is equal or better; a reached cost with an inconclusive Δ is not
  resolved; a missed cost or a worse Δ is a miss."""
  summary = dict(
      seeds=[100, 101, 102],
      labels=["ref", "sparse_ok", "sparse_wide", "sparse_small", "stream_worse"],
      stats=dict(
          ref=_stats(2.16, 150, 384 * MB, 128 * MB),
          sparse_ok=_stats(2.16, 150, 3.7 * MB, 1.2 * MB),
          sparse_wide=_stats(2.16, 150, 3.7 * MB, 1.2 * MB),
          sparse_small=_stats(2.16, 150, 10.8 * MB, 3.6 * MB),
          stream_worse=_stats(2.20, 150, 384 * MB, 16 * MB),
      ),
      comparisons=[
          _comparison("sparse_ok", "ref", -0.002, 0.003, "equal"),
          _comparison("sparse_wide", "ref", -0.01, 0.01, "inconclusive"),
          _comparison("sparse_small", "ref", -0.03, -0.01, "better"),
          _comparison("stream_worse", "ref", 0.02, 0.05, "worse"),
      ],
  )
  targets = {"bytes": (100.0, ("sparse_ok", "sparse_wide", "sparse_small")),
             "peak": (4.0, ("stream_worse",))}
  rows = {
      _cells(l)[0]: _cells(l)
      for l in evidence_tables.targets_section(summary, "ref", targets)
      if l.startswith("| `")
  }
  assert rows["`sparse_ok`"][2:] == ["103.78×", "met", "equal", "yes"]
  assert rows["`sparse_wide`"][3:] == ["met", "inconclusive", "not resolved"]
  assert rows["`sparse_small`"][2:] == ["35.56×", "missed", "better", "no"]
  assert rows["`stream_worse`"][1:] == ["≥ 4× lower peak bandwidth", "8.00×", "met", "worse", "no"]
