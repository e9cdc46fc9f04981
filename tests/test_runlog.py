"""How a finished run is read (experiments/runlog.py): full-model syncs, the
trainer's communication events over a streaming run's fragments. Synthetic run
folders only: nothing is trained (a trained streaming row:
tests/test_studies_quick.py::test_a_streaming_row_counts_full_model_syncs)."""

import json

from experiments import runlog


def _write_run(path, syncs_by_eval, syncs, config=None):
  """A run folder as the trainer leaves it: eval records, a summary line and,
  unless ``config`` is None, its ``config.json``."""
  path.mkdir()
  rows = [dict(step=10 * (i + 1), tokens=1, syncs=n, bytes_per_worker=0.0,
               sim_time=0.0, eval_bpb=3.0) for i, n in enumerate(syncs_by_eval)]
  rows.append(dict(summary=True, algorithm="diloco", final_eval_bpb=2.5, syncs=syncs,
                   network="homogeneous"))
  (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  if config is not None:
    (path / "config.json").write_text(json.dumps(config))
  return str(path)


def test_a_streaming_runs_fragment_syncs_count_one_full_model_sync_per_cycle(tmp_path):
  workdir = _write_run(tmp_path / "stream", [4, 8, 10], 12,
                       dict(algorithm="diloco", stream=dict(fragments=4, tau=1)))
  run = runlog.load_run(workdir, seed=3)
  assert runlog.events_per_sync(workdir) == 4
  assert run["summary"]["sync_events"] == 12
  assert run["summary"]["syncs"] == 3.0
  assert run["eval"]["syncs"] == [1.0, 2.0, 2.5]


def test_a_run_that_does_not_stream_keeps_its_count(tmp_path):
  plain = _write_run(tmp_path / "plain", [5], 10,
                     dict(algorithm="diloco", stream=dict(fragments=1, tau=0)))
  bare = _write_run(tmp_path / "bare", [5], 10)  # no config.json: counted as is
  for workdir in (plain, bare):
    run = runlog.load_run(workdir)
    assert run["summary"]["syncs"] == run["summary"]["sync_events"] == 10
    assert run["eval"]["syncs"] == [5]
