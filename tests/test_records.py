"""Finished runs kept once (``experiments/records.py``) and the command that keeps
and restores them (``experiments/archive.py``): the committed records load as
the runs they were, writing only ever adds a batch, restoring leaves this
checkout's own runs alone, and a study's runs are all of its phases' and
cells'. Nothing here trains: the runs are the committed records, or small
fabricated ones."""

import json
import os

import ml_collections
import pytest
from absl import app, flags

from autoloco_jax.run import config_check
from autoloco_jax.sim import planner
from configs.studies import compression_many, evidence, gossip_g1, gossip_g2
from configs.studies import noloco_n1, schedule
from experiments import archive, engine, per_document, records, runlog, sweep
from tests.helpers import ROOT

RECORDS = os.path.join(ROOT, records.RECORDS_DIR)


@pytest.fixture(scope="module")
def committed():
  """Every committed batch's records, by the batch's path (read once: seconds)."""
  return {path: records.read_batch(path) for path in records.batches(RECORDS)}


def _kind(record: dict) -> tuple:
  """What sets a run's files apart: its algorithm (AutoLoCo's round trace, the
  gossip methods), streaming (syncs counted per fragment), divergence."""
  streaming = record["config"].get("stream", {}).get("fragments", 1) > 1
  return record["name"].split("-")[0], streaming, "diverged" in record


def _sample(batch: list[dict]) -> list[dict]:
  """The first two records of each :func:`_kind` in a batch."""
  out, seen = [], {}
  for record in batch:
    seen[_kind(record)] = seen.get(_kind(record), 0) + 1
    if seen[_kind(record)] <= 2:
      out.append(record)
  return out


def _name_of(config: dict) -> str:
  """``sweep.run_dir``'s name of a stored config (the study's ConfigDict, as
  ``config.json`` keeps it)."""
  return os.path.basename(sweep.run_dir("", ml_collections.ConfigDict(config)))


def test_the_committed_records_hold_each_run_once_in_small_batches(committed):
  paths = list(committed)
  assert len(paths) >= 9
  names = [r["name"] for batch in committed.values() for r in batch]
  assert len(names) == len(set(names)) >= 2302  # a run two studies share, once
  assert all(os.path.getsize(p) < 2 * 2**20 for p in paths)
  assert sum(os.path.getsize(p) for p in paths) < 15 * 2**20


@pytest.mark.parametrize(
    "path", records.batches(RECORDS), ids=lambda p: os.path.relpath(p, RECORDS)
)
def test_restored_records_load_as_finished_runs(committed, path, tmp_path):
  """A sample of every batch (each algorithm, streaming and diverged runs)
  restores to a run the sweep counts as settled, under the name its config
  hashes to, that the reports, the per-document comparison and the planner's
  replay read."""
  sample = _sample(committed[path])
  for record in sample:
    workdir = records.to_workdir(record, str(tmp_path))
    stored = config_check.stored_config(workdir)
    assert stored == record["config"] and _name_of(stored) == record["name"]
    assert sweep.is_settled(workdir)
    hs = planner.h_sequence(os.path.join(workdir, "metrics.jsonl"))
    assert len(hs) == len(record["rounds"])
    if "diverged" in record:
      assert sweep.diverged(workdir) and not sweep.is_finished(workdir)
      continue
    assert sweep.is_finished(workdir)
    run = runlog.load_run(workdir, record["seed"])
    assert run["summary"]["final_eval_bpb"] == record["summary"]["final_eval_bpb"]
    assert run["eval"]["eval_bpb"] and len(run["eval"]["step"]) == len(
        run["eval"]["eval_bpb"]
    )
    assert bool(run["rounds"]) == (record["config"]["algorithm"] == "autoloco")
    tokens, bpb = per_document.document_bpb(workdir)
    assert len(tokens) == len(bpb) > 0


def test_the_sample_covers_autoloco_streaming_gossip_and_diverged_runs(committed):
  kinds = {_kind(r) for batch in committed.values() for r in _sample(batch)}
  algorithms = {k[0] for k in kinds}
  assert {"autoloco", "diloco", "noloco", "gasloc", "gossip_adamw", "ddp"} <= algorithms
  assert any(k[1] for k in kinds) and any(k[2] for k in kinds)  # streaming, diverged


def _finish(workdir: str, seed: int = 0, diverged: bool = False) -> None:
  """A settled run's files, as the trainer and the sweep leave them (no
  training): rows with the diagnostics the records drop, and an eval."""
  os.makedirs(workdir, exist_ok=True)
  rows = [
      dict(
          step=10,
          round=1,
          h=10,
          next_h=10,
          syncs=1,
          tokens=64,
          bytes_per_worker=4.0,
          sim_time=1.0,
          sim_time_hetero=2.0,
          peak_bandwidth=8.0,
          grad_norm=1.5,
          loss_mean=3.0,
      ),
      dict(
          step=20,
          round=2,
          h=10,
          next_h=10,
          syncs=2,
          tokens=128,
          bytes_per_worker=8.0,
          sim_time=2.0,
          sim_time_hetero=4.0,
          peak_bandwidth=8.0,
          grad_norm=1.2,
          eval_bpb=3.1,
          eval_loss=2.1,
          eval_tokens=64,
          eval_bytes=64.0,
      ),
  ]
  summary = dict(
      summary=True,
      algorithm="diloco",
      step=20,
      final_eval_bpb=3.0,
      final_eval_tokens=64,
      final_eval_bytes=64.0,
      syncs=2,
      network="homogeneous",
  )
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for row in rows + ([] if diverged else [summary]):
      f.write(json.dumps(row) + "\n")
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(dict(seed=seed, algorithm="diloco"), f)
  name = sweep.DIVERGED if diverged else "final_eval.json"
  content = (
      dict(error="loss is nan")
      if diverged
      else dict(
          final_eval_tokens=64,
          final_eval_bytes=64.0,
          documents={"": dict(tokens=[32, 32], loss_sum=[40.0, 50.0])},
      )
  )
  with open(os.path.join(workdir, name), "w") as f:
    json.dump(content, f)


def _files(folder: str) -> dict:
  """``{path: (bytes, mtime)}`` of every file under ``folder``."""
  out = {}
  for parent, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(parent, name)
      with open(path, "rb") as f:
        out[path] = (f.read(), os.stat(path).st_mtime_ns)
  return out


def test_a_record_keeps_what_the_readers_read_and_round_trips(tmp_path):
  run = str(tmp_path / "runs" / "diloco-0123456789ab")
  _finish(run, seed=3)
  record = records.from_workdir(run)
  assert record["name"] == "diloco-0123456789ab" and record["seed"] == 3
  assert "grad_norm" not in record["rounds"][0] and "loss_mean" not in record["rounds"][0]
  assert (
      record["rounds"][1]["eval_loss"] == 2.1
      and record["rounds"][0]["sim_time_hetero"] == 2.0
  )
  back = records.to_workdir(record, str(tmp_path / "fresh"))
  assert records.from_workdir(back) == record
  assert runlog.load_run(back) | dict(workdir=run) == runlog.load_run(run)
  unsettled = str(tmp_path / "runs" / "diloco-unfinished")
  os.makedirs(unsettled)
  with pytest.raises(ValueError, match="no settled run"):
    records.from_workdir(unsettled)


def test_writing_only_adds_a_batch_of_the_new_runs(tmp_path):
  """Append-only: a second write of the same runs adds nothing and touches no
  file; a run finished since adds one batch holding it alone; a run another
  study's records hold is not stored again."""
  store, root = str(tmp_path / "records"), str(tmp_path / "runs")
  runs = [os.path.join(root, f"diloco-{i:012x}") for i in range(4)]
  for i, run in enumerate(runs[:2]):
    _finish(run, seed=i)
  _finish(runs[2], seed=2, diverged=True)
  os.makedirs(runs[3])  # not finished: not kept
  count, first = records.add(runs, "a", store)
  assert count == 3 and os.path.dirname(first) == os.path.join(store, "a")
  before = _files(store)
  assert records.add(runs, "a", store) == (0, None)
  assert records.add(runs[:2], "b", store) == (0, None)  # another study sharing them
  assert _files(store) == before
  _finish(runs[3], seed=3)
  count, second = records.add(runs, "b", store)
  assert count == 1 and [r["name"] for r in records.read_batch(second)] == [
      "diloco-000000000003"
  ]
  assert {p: v for p, v in _files(store).items() if p != second} == before
  assert sorted(records.read(store)) == sorted(os.path.basename(r) for r in runs)


def test_a_run_trained_again_after_diverging_is_kept_as_finished(tmp_path):
  store, run = str(tmp_path / "records"), str(tmp_path / "runs" / "diloco-00000000000a")
  _finish(run, diverged=True)
  assert records.add([run], "a", store)[0] == 1
  os.remove(os.path.join(run, sweep.DIVERGED))
  _finish(run)
  assert records.add([run], "a", store)[0] == 1
  assert "diverged" not in records.read(store)["diloco-00000000000a"]
  assert len(records.batches(store)) == 2


def test_restore_leaves_a_run_already_there_untouched(tmp_path):
  store, root, fresh = (str(tmp_path / d) for d in ("records", "runs", "fresh"))
  runs = [os.path.join(root, f"diloco-{i:012x}") for i in range(3)]
  for i, run in enumerate(runs):
    _finish(run, seed=i)
  records.add(runs, "a", store)
  mine = os.path.join(fresh, os.path.basename(runs[0]))
  os.makedirs(mine)
  with open(os.path.join(mine, "metrics.jsonl"), "w") as f:
    f.write("this checkout's own run\n")
  before = _files(mine)
  assert records.restore(fresh, store, [os.path.basename(runs[1]), "diloco-absent"]) == 1
  assert records.restore(fresh, store) == 1
  assert records.restore(fresh, store) == 0
  assert _files(mine) == before
  assert sorted(os.listdir(fresh)) == sorted(os.path.basename(r) for r in runs)
  assert all(
      sweep.is_finished(os.path.join(fresh, os.path.basename(r))) for r in runs[1:]
  )


def test_a_cells_phases_that_can_be_built_are_kept_and_restored(tmp_path, monkeypatch):
  """With no phase report yet only the ``regime`` and ``coarse`` phases of a
  cell can be built; their finished runs are kept (an unfinished one is not)
  and restored into a fresh root, where each is finished."""
  monkeypatch.setattr(evidence, "QUICK_DIR", str(tmp_path / "reports"))
  root, store, fresh = (str(tmp_path / d) for d in ("runs", "records", "fresh"))
  wanted = {
      workdir
      for phase in ("regime", "coarse")
      for *_, workdir in sweep.jobs(
          engine.build(evidence, f"{phase},base,shakespeare,quick"), root
      )
  }
  got = archive.cell_workdirs("base", "shakespeare", root, quick=True)
  assert set(got) == wanted
  unfinished, *finished = sorted(wanted)
  for workdir in finished:
    _finish(workdir)
  os.makedirs(unfinished)
  cell = archive.cell_name("base", "shakespeare")
  assert cell == os.path.join("evidence_v2", "base_shakespeare")
  assert records.add(got, cell, store)[0] == len(finished)
  names = [os.path.basename(w) for w in got]
  assert records.restore(fresh, store, names) == len(finished)
  assert sorted(os.listdir(fresh)) == sorted(os.path.basename(w) for w in finished)
  assert all(
      sweep.is_finished(os.path.join(fresh, os.path.basename(w))) for w in finished
  )


def test_a_study_with_cells_keeps_every_cell(tmp_path, monkeypatch):
  """A study whose argument picks a cell (N1's worker counts) has every cell's
  runs, not only the default's: with no phase report, each cell's coarse pass."""
  monkeypatch.setattr(noloco_n1, "DOCS_DIR", str(tmp_path / "reports"))
  root = str(tmp_path / "runs")
  assert engine.cells(noloco_n1) == ["k4", "k8", "k16"]
  wanted = {
      workdir
      for k in noloco_n1.WORKERS
      for *_, workdir in sweep.jobs(engine.build(noloco_n1, f"coarse,k{k}"), root)
  }
  got = archive.study_workdirs(noloco_n1, root)
  assert set(got) == wanted and len(got) == len(wanted)
  assert {engine.cells(m)[0] for m in (gossip_g1, gossip_g2, schedule)} == {
      "",
      "shakespeare",
      "many,python",
  }


def _command(monkeypatch, *args: str) -> None:
  """``python -m experiments.archive ARGS``, in this process: its flags parsed
  by a flag set of its own."""
  values = flags.FlagValues()
  holders = archive.define_flags(values)
  argv = values(["archive", *args])
  monkeypatch.setattr(archive, "_FLAGS", holders)
  archive.main(argv)


def test_the_command_line_keeps_restores_and_refuses(tmp_path, monkeypatch, capsys):
  """The module docstring's commands: a study's finished runs kept, a cell
  that shares some of them keeps only the rest, and each restores its own runs
  from the records of both."""
  root, store = str(tmp_path / "runs"), str(tmp_path / "records")
  where = [f"--root={root}", f"--records={store}"]
  study = os.path.join(ROOT, "configs", "studies", "compression_many.py")
  workdirs = archive.study_workdirs(compression_many, root)
  shared = [w for w in archive.cell_workdirs("many", "python", root) if w in workdirs]
  own = [w for w in workdirs if w not in shared][-2:]  # its ablation's
  for workdir in own + shared[:2]:
    _finish(workdir)
  _command(monkeypatch, "many", "python", *where)
  assert capsys.readouterr().out.startswith("2 new finished runs recorded in ")
  _command(monkeypatch, "--study", study, *where)
  assert capsys.readouterr().out.startswith("2 new finished runs recorded in ")
  assert sorted(os.listdir(store)) == ["compression_many", "evidence_v2"]
  fresh = [f"--root={tmp_path / 'fresh'}", f"--records={store}"]
  _command(monkeypatch, "--study", study, "--restore", *fresh)
  assert capsys.readouterr().out.startswith("4 runs restored")
  _command(monkeypatch, "--restore", *fresh)
  assert capsys.readouterr().out.startswith("0 runs restored")
  _command(monkeypatch, "many", "python", *where)
  assert capsys.readouterr().out == "0 new finished runs recorded\n"
  with pytest.raises(app.UsageError, match="unknown cell many pythn"):
    _command(monkeypatch, "many", "pythn", *where)
  with pytest.raises(app.UsageError, match="usage"):
    _command(monkeypatch, *where)
