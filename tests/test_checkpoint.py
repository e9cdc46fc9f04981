"""Nothing lost: kill, preemption, corrupted checkpoints, NaNs, worker faults."""

import os
import signal
import subprocess
import sys
import time

import chex
import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.run import checkpoint, trainer
from autoloco_jax.runtime import replicas, state as state_lib
from autoloco_jax.sim import faults
from tests.helpers import ROOT, config as toy_config, rounds, tiny, tokens, toy_loss, toy_params, trains

# A run long enough to be interrupted (about 40 rounds of a tiny model). The
# simulated clock's step time is fixed: a measured one differs between processes.
LONG = dict(
    total_steps=200,
    **{
        "interval.h": 5,
        "eval.every_steps": 50,
        "checkpoint.every_rounds": 1,
        "checkpoint.keep": 2,
        "network.step_time": 0.01,
    },
)
LONG_FLAGS = [
    "--config.total_steps=200",
    "--config.interval.h=5",
    "--config.eval.every_steps=50",
    "--config.checkpoint.every_rounds=1",
    "--config.checkpoint.keep=2",
    "--config.num_devices=1",
    "--config.network.step_time=0.01",
    "--config.num_workers=2",
    "--config.data.batch_size=8",
    "--config.log.progress=False",
    "--config.log.tensorboard=False",
]


def start(workdir):
  """Starts the CLI on ``workdir``; its output goes to ``workdir.log`` (a pipe
  nobody reads could fill up and block the child)."""
  log = open(f"{workdir}.log", "w")
  return subprocess.Popen(
      [
          sys.executable,
          "-m",
          "experiments.run",
          "--config",
          "configs/diloco.py:tiny",
          "--workdir",
          str(workdir),
      ]
      + LONG_FLAGS,
      cwd=ROOT,
      stdout=log,
      stderr=subprocess.STDOUT,
      text=True,
  )


def output(workdir):
  return open(f"{workdir}.log").read()


def wait_for_rounds(workdir, n, proc, timeout=120):
  path = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + timeout
  while time.time() < deadline:
    if proc.poll() is not None:
      raise AssertionError(
          "run ended before it could be interrupted:\n" + output(workdir)
      )
    if os.path.exists(path) and len(open(path).readlines()) >= n:
      return
    time.sleep(0.05)
  raise AssertionError("run made no progress")


def comparable(workdir):
  """Per-round records without wall-clock fields."""
  # Host wall-clock measurements differ between any two runs.
  timing = trainer.TIMING_FIELDS
  return [{k: v for k, v in r.items() if k not in timing} for r in rounds(workdir)]


def final_params(workdir):
  _, state, host = trainer.load_run(tiny(**LONG), str(workdir))
  assert host.step == 200
  return jax.device_get(state.params_K)


@pytest.fixture(scope="module")
@trains
def uninterrupted(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("uninterrupted")
  summary = trainer.train_and_evaluate(tiny(**LONG), str(workdir))
  return workdir, summary


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path, uninterrupted):
  reference, ref_summary = uninterrupted
  proc = start(tmp_path)
  wait_for_rounds(tmp_path, 12, proc)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  killed_at = len(rounds(tmp_path))
  assert 12 <= killed_at < 40

  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "experiments.run",
          "--config",
          "configs/diloco.py:tiny",
          "--workdir",
          str(tmp_path),
      ]
      + LONG_FLAGS,
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 0, result.stdout + result.stderr
  assert "Resumed from the checkpoint" in result.stdout
  # Bitwise on CPU: the same compiled programs on the same restored arrays.
  assert comparable(tmp_path) == comparable(reference)
  chex.assert_trees_all_equal(final_params(tmp_path), final_params(reference))


@pytest.mark.slow
def test_sigterm_saves_a_resumable_checkpoint(tmp_path, uninterrupted):
  reference, _ = uninterrupted
  proc = start(tmp_path)
  wait_for_rounds(tmp_path, 8, proc)
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=120)
  out = output(tmp_path)
  assert proc.returncode == 0, out
  assert "Resume by running the same command" in out
  stopped = rounds(tmp_path)[-1]["step"]
  assert stopped < 200
  assert max(checkpoint.Checkpointer(str(tmp_path)).steps()) == stopped

  summary = trainer.train_and_evaluate(tiny(**LONG), str(tmp_path))
  assert summary["final_eval_loss"] == uninterrupted[1]["final_eval_loss"]
  assert comparable(tmp_path) == comparable(reference)


@pytest.mark.slow
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
  cfg = tiny(**LONG)
  cfg.faults.nan_at_round = 3
  with pytest.raises(
      FloatingPointError, match=r"loss_mean is nan in round 4 \(inner step 20\)"
  ):
    trainer.train_and_evaluate(cfg, str(tmp_path))
  steps = checkpoint.Checkpointer(str(tmp_path)).steps()
  assert max(steps) == 15  # saved after round 3, never after the poisoned round
  _, state, host = trainer.load_run(cfg, str(tmp_path))
  assert host.step == 15
  assert all(
      np.isfinite(x).all() for x in jax.tree.leaves(jax.device_get(state.params_K))
  )


def _corrupt(ckpt_dir, step):
  """Truncates every file of one checkpoint's array data."""
  for root, _, files in os.walk(os.path.join(ckpt_dir, str(step), "state")):
    for name in files:
      with open(os.path.join(root, name), "r+b") as f:
        f.truncate(max(os.path.getsize(f.name) // 3, 1))


@pytest.mark.slow
def test_corrupted_latest_checkpoint_falls_back_to_the_previous(tmp_path):
  cfg = tiny(**LONG)
  cfg.total_steps = 100  # checkpoints kept at steps 95 and 100
  trainer.train_and_evaluate(cfg, str(tmp_path))
  ckpt_dir = os.path.join(tmp_path, "checkpoints")
  assert sorted(int(s) for s in os.listdir(ckpt_dir) if s.isdigit()) == [95, 100]
  _corrupt(ckpt_dir, 100)
  _, state, host = checkpoint.load_state(str(tmp_path), trainer.setup(cfg).state)
  assert host["step"] == 95

  _corrupt(ckpt_dir, 95)
  with pytest.raises(
      checkpoint.CheckpointError, match="no checkpoint .* could be restored"
  ):
    trainer.train_and_evaluate(cfg, str(tmp_path))


@pytest.mark.slow
def test_config_change_on_resume_is_refused(tmp_path):
  cfg = tiny(total_steps=10, **{"interval.h": 5, "eval.every_steps": 10})
  trainer.train_and_evaluate(cfg, str(tmp_path))
  changed = tiny(total_steps=10, **{"interval.h": 5, "eval.every_steps": 10})
  changed.inner.lr = 1e-3
  with pytest.raises(ValueError, match=r"inner.lr: 0.003 -> 0.001"):
    trainer.train_and_evaluate(changed, str(tmp_path))
  # Fields that do not alter the trajectory may change.
  same = tiny(total_steps=10, **{"interval.h": 5, "eval.every_steps": 5})
  trainer.train_and_evaluate(same, str(tmp_path))


def test_dropping_one_of_four_workers_averages_over_three():
  cfg = toy_config(K=4, lr=1.0, momentum=0.0)
  mesh = replicas.make_mesh(4, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  theta = jax.device_get(state.algo.global_params)
  state = algo.inner(state, replicas.put_workers(tokens(4, 3), mesh), np.int32(3))
  fast_K = jax.device_get(state.params_K)
  present = np.array([1, 0, 1, 1], np.float32)
  state, m = algo.sync(state, replicas.put_workers(present, mesh))
  # θ_{t+1} = θ_t − mean over workers 0, 2, 3 of (θ_t − θ_{t,k}).
  expected = jax.tree.map(
      lambda t, f: t - np.mean([t - f[k] for k in (0, 2, 3)], axis=0), theta, fast_K
  )
  chex.assert_trees_all_close(
      jax.tree.map(lambda x: np.asarray(x[1]), jax.device_get(state.params_K)),
      expected,
      rtol=1e-7,
      atol=1e-6,
  )
  assert m["workers_present"] == 3


@pytest.mark.slow
def test_worker_drops_are_seeded_and_logged(tmp_path):
  cfg = tiny(total_steps=40, **{"interval.h": 5, "eval.every_steps": 40})
  cfg.num_workers = 4
  cfg.faults.drop_prob = 0.3
  cfg.faults.drop_schedule = "0:1,2"
  a = [faults.present_workers(cfg.faults, 4, r, 0) for r in range(8)]
  b = [faults.present_workers(cfg.faults, 4, r, 0) for r in range(8)]
  np.testing.assert_array_equal(a, b)
  assert a[0][1] == a[0][2] == 0
  assert all(x.sum() >= 1 for x in a)
  trainer.train_and_evaluate(cfg, str(tmp_path))
  logged = [r["workers_present"] for r in rounds(tmp_path)]
  assert logged == [float(x.sum()) for x in a]
  bytes_ = [r["bytes_per_worker"] for r in rounds(tmp_path)]
  assert np.all(np.diff([0.0] + bytes_) >= 0)


@pytest.mark.parametrize(
    "schedule, message",
    [("2-1", "cannot parse '2-1'"), ("3:9", "workers outside"), ("-1:0", "round < 0")],
)
def test_bad_drop_schedule(schedule, message):
  with pytest.raises(ValueError, match=message):
    faults.parse_schedule(schedule, 4)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("diloco.beta", 1.0, r"config.diloco.beta must be in \[0.0, 1.0\)"),
        ("faults.drop_prob", 1.5, r"config.faults.drop_prob must be in"),
        ("checkpoint.every_rounds", 0, r"config.checkpoint.every_rounds must be >= 1"),
        ("model.d_model", 0, r"config.model.d_model must be >= 1"),
        ("data.val_fraction", 1.0, r"config.data.val_fraction must be in \(0.0, 1.0\)"),
        ("inner.b2", 1.0, r"config.inner.b2 must be in"),
    ],
)
def test_config_validation_names_the_field(tmp_path, field, value, message):
  cfg = tiny()
  section, name = field.split(".")
  with cfg.unlocked():
    cfg[section][name] = value
  with pytest.raises(ValueError, match=message):
    trainer.train_and_evaluate(cfg, str(tmp_path))


def test_fields_added_later_and_left_empty_are_no_change(tmp_path):
  import json

  from autoloco_jax.run import config_check

  cfg = tiny()
  stored = json.loads(cfg.to_json_best_effort())
  del stored["network"]["also"]  # a run stored before network.also existed
  with open(tmp_path / "config.json", "w") as f:
    json.dump(stored, f)
  assert config_check.changed_fields(cfg, str(tmp_path)) == []
  cfg.network.also = ("hetero",)
  assert config_check.changed_fields(cfg, str(tmp_path)) == [
      "network.also: None -> ['hetero']"
  ]


def test_a_checkpoint_of_an_older_layout_is_refused_by_name(tmp_path):
  import orbax.checkpoint as ocp

  # What the previous layout wrote: a host item without a format stamp.
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  state = {"x": np.zeros(3, np.float32)}
  ckpt._manager.save(
      5,
      args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), host=ocp.args.JsonSave({"positions": [0]})
      ),
  )
  ckpt.close()
  with pytest.raises(
      checkpoint.CheckpointError,
      match=r"written by another version of autoloco_jax \(run-state format 1",
  ):
    checkpoint.load_state(str(tmp_path), state)


def test_a_format_2_checkpoint_is_refused_naming_the_renamed_fields(tmp_path):
  import orbax.checkpoint as ocp

  # Format 2 had TrainState.outer; format 3 names the fields for what they hold.
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  state = {"x": np.zeros(3, np.float32)}
  ckpt._manager.save(
      5,
      args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), host=ocp.args.JsonSave({"format": 2})
      ),
  )
  ckpt.close()
  with pytest.raises(
      checkpoint.CheckpointError,
      match=r"format 2; this version reads format 3: format 3: .*TrainState.outer "
      r"became TrainState.algo",
  ):
    checkpoint.load_state(str(tmp_path), state)
