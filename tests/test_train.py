"""The trainer end to end on the embedded Shakespeare data, and its errors."""

import json
import math
import os
import subprocess
import sys
import types

import jax
import numpy as np
import pytest

from autoloco_jax.run import checkpoint, trainer
from autoloco_jax.sim import clock
from configs import autoloco as autoloco_config
from configs import ddp as ddp_config
from tests.helpers import ROOT, records_without_timing, rounds, tiny


@pytest.mark.slow
def test_tiny_diloco_learns_and_logs(tmp_path):
  cfg = tiny(total_steps=150, **{"eval.every_steps": 50})
  summary = trainer.train_and_evaluate(cfg, str(tmp_path))
  records = rounds(tmp_path)

  # Learns: well below the byte-unigram entropy of the validation text.
  assert summary["final_eval_loss"] < summary["unigram_entropy"] - 0.5
  np.testing.assert_allclose(
      summary["final_eval_bpb"], summary["final_eval_loss"] / np.log(2)
  )
  # One record per round, the budget hit exactly, one all-reduce per round.
  assert [r["h"] for r in records] == [10] * 15
  assert records[-1]["step"] == 150
  assert summary["tokens"] == 150 * 2 * 8 * 64
  assert summary["syncs"] == len(records) == 15
  ring = clock.ring_allreduce(summary["num_params"], 2, 4)
  np.testing.assert_allclose(summary["bytes_per_worker"], 15 * ring.bytes)
  assert [r["step"] for r in records if "eval_loss" in r] == [50, 100, 150]
  for key in (
      "loss_mean",
      "lr_sum",
      "delta_norm",
      "agreement",
      "outer_lr",
      "outer_momentum",
      "ratio",
      "bytes_per_worker",
      "tokens",
  ):
    assert key in records[0], key
  # config.json records what produced the run.
  with open(tmp_path / "config.json") as f:
    stored = json.load(f)
  prov = stored["provenance"]
  assert prov["packages"]["jax"] == jax.__version__ and "optax" in prov["packages"]
  assert prov["backend"] == "cpu" and prov["num_devices"] == len(jax.devices())
  assert len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool)
  assert stored["algorithm"] == "diloco"
  assert summary["inner_compilations"] == summary["sync_compilations"] == 1


@pytest.mark.slow
def test_autoloco_fixed_at_h_ref_equals_diloco(tmp_path):
  base = dict(total_steps=30, **{"eval.every_steps": 30})
  d = trainer.train_and_evaluate(tiny(**base), str(tmp_path / "d"))
  a_cfg = tiny(autoloco_config, **base)
  a_cfg.interval.controller = "fixed"
  a_cfg.interval.h = a_cfg.autoloco.h_ref  # DiLoCo's H (the config's H_0 is 1.5 H_ref)
  # DiLoCo's pair (the AutoLoCo config's reference pair is the one tuned at H_ref).
  d_cfg = tiny(**base)
  a_cfg.diloco.alpha, a_cfg.diloco.beta = d_cfg.diloco.alpha, d_cfg.diloco.beta
  a = trainer.train_and_evaluate(a_cfg, str(tmp_path / "a"))
  for rd, ra in zip(rounds(tmp_path / "d"), rounds(tmp_path / "a")):
    assert ra["ratio"] == 1.0
    for key in ("loss_mean", "loss_end", "delta_norm", "outer_lr", "outer_momentum"):
      assert rd[key] == ra[key], key
  assert d["final_eval_loss"] == a["final_eval_loss"]
  assert d["syncs"] == a["syncs"]


@pytest.mark.slow
def test_adaptive_interval_hits_budget_and_compiles_once(tmp_path):
  cfg = tiny(
      autoloco_config, total_steps=97, **{"eval.every_steps": 97, "inner.warmup_steps": 4}
  )
  cfg.interval.controller = "lr_quadratic"  # H grows 4 -> 30 as the lr decays
  cfg.interval.h, cfg.interval.h_min, cfg.interval.h_max = 4, 2, 30
  cfg.autoloco.h_ref = 4
  summary = trainer.train_and_evaluate(cfg, str(tmp_path))
  intervals = [r["h"] for r in rounds(tmp_path)]
  assert sum(intervals) == 97
  assert len(set(intervals)) >= 3, intervals
  assert summary["inner_compilations"] == summary["sync_compilations"] == 1
  # The corrected outer step saw rounds of other lengths than H_ref.
  ratios = [r["ratio"] for r in rounds(tmp_path)]
  assert max(ratios) > 1.5


@pytest.mark.slow
def test_sharded_run_on_two_devices_equals_one_device(tmp_path):
  """The workers split over two devices train the run one device trains: the
  same rounds, to float32 rounding. The all-reduce sums in another order; the
  round's metrics agree to 4e-5, the final evaluation to 1e-3 (AdamW's first
  steps turn last-bit differences of near-zero gradients into whole steps on a
  few weights: 5e-4 of the largest weight here). A run that averaged each
  device's workers alone would differ at the second round's loss by far more."""
  runs = {}
  for devices in (1, 2):
    cfg = tiny(total_steps=20, num_devices=devices, **{"eval.every_steps": 20})
    workdir = str(tmp_path / str(devices))
    runs[devices] = (trainer.train_and_evaluate(cfg, workdir), rounds(workdir))
  (one, one_rounds), (two, two_rounds) = runs[1], runs[2]
  assert (one["devices"], two["devices"]) == (1, 2)
  assert [r["h"] for r in two_rounds] == [r["h"] for r in one_rounds]
  for key in ("loss_mean", "delta_norm", "param_norm"):
    np.testing.assert_allclose(
        [r[key] for r in two_rounds], [r[key] for r in one_rounds], rtol=1e-4, err_msg=key
    )
  np.testing.assert_allclose(two["final_eval_loss"], one["final_eval_loss"], rtol=2e-3)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_devices": 3}, "not divisible by the device count"),
        ({"interval.h": 0}, r"config.interval.h must be >= 1, got 0"),
        ({"total_steps": -5}, r"config.total_steps must be >= 1"),
        ({"inner.lr": 0.0}, r"config.inner.lr must be > 0.0, got 0.0"),
        ({"data.source": "files", "data.path": "/nonexistent/*.txt"}, "matches no files"),
        (
            {"data.source": "tfds", "data.name": "no_such_dataset_xyz"},
            "unknown tfds dataset name",
        ),
        ({"algorithm": "fedavg"}, "unknown algorithm 'fedavg'"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, overrides, message):
  with pytest.raises(ValueError, match=message):
    trainer.train_and_evaluate(tiny(**overrides), str(tmp_path))


@pytest.mark.slow
def test_cli_rejects_unknown_config_key(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "experiments.run",
          "--config",
          "configs/diloco.py:tiny",
          "--workdir",
          str(tmp_path),
          "--config.inner.no_such_field=1",
      ],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=120,
  )
  assert result.returncode != 0
  assert "no_such_field" in result.stderr
  # Quiet and friendly: one line, status 2, no traceback.
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      "error: the config has no field 'no_such_field' (--config.inner.no_such_field)"
  ]


def _cli(tmp_path, *flags):
  return subprocess.run(
      [sys.executable, "-m", "experiments.run", "--workdir", str(tmp_path), *flags],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
  )


@pytest.mark.slow
def test_cli_bad_values_are_one_line_errors_unless_verbose(tmp_path):
  bad = ("--config", "configs/diloco.py:tiny", "--config.interval.h=0")
  result = _cli(tmp_path, *bad)
  assert result.returncode == 2
  assert result.stderr.strip() == "error: config.interval.h must be >= 1, got 0"
  verbose = _cli(tmp_path, *bad, "-v", "1")
  assert verbose.returncode == 2 and "Traceback" in verbose.stderr
  assert verbose.stderr.strip().endswith("error: config.interval.h must be >= 1, got 0")
  missing = _cli(tmp_path, "--config", "configs/no_such_config.py")
  assert missing.returncode == 2 and missing.stderr.startswith("error: ")
  assert "no_such_config.py" in missing.stderr and "Traceback" not in missing.stderr


def test_host_device_count_is_the_largest_divisor_of_k_within_the_cores():
  from autoloco_jax.run import distributed

  assert distributed.host_device_count(4, cores=2) == 2
  assert distributed.host_device_count(6, cores=4) == 3
  assert distributed.host_device_count(5, cores=2) == 1
  assert distributed.host_device_count(8, num_devices=1, cores=16) == 1  # explicit wins
  assert distributed.host_device_count(2, cores=64) == 2


@pytest.mark.slow
def test_cli_prints_its_result_alone_and_takes_num_devices(tmp_path):
  """A CLI run prints its result and no library's info lines, and
  ``--config.num_devices`` sets its device count. Left alone it uses every
  core, and a user's ``XLA_FLAGS`` count is kept: the documented
  ``benchmarks.every_core`` command's two modes check those
  (``tests/test_benchmark_commands.py``)."""
  result = _cli(
      tmp_path, "--config", "configs/diloco.py:tiny", "--config.total_steps=10",
      "--config.num_workers=2", "--config.log.progress=False", "--config.num_devices=1",
  )
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  assert lines[-1].startswith("[diloco] final eval ") and "bits/byte" in lines[-1]
  assert all(l.startswith("Building the Shakespeare dataset") for l in lines[:-1]), lines
  assert result.stderr.strip() == "", result.stderr
  assert [json.loads(l) for l in open(tmp_path / "metrics.jsonl")][-1]["devices"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "loss_ratio"])
def test_rounds_read_one_round_late_equal_rounds_read_at_once(tmp_path, adaptive):
  """Reading each round's metrics one round late changes nothing but host
  timings: the same records in the same order, the same parameters, as a run
  that reads (and saves) every round before dispatching the next. Evaluations
  every 10 steps fall on rounds read late and on rounds read at once."""
  overrides = {
      "total_steps": 60,
      "eval.every_steps": 10,
      "network.step_time": 0.01,
  }
  module = autoloco_config if adaptive else None
  cfg = lambda every: tiny(
      *([module] if module else []), **overrides, **{"checkpoint.every_rounds": every}
  )
  trainer.train_and_evaluate(cfg(1), str(tmp_path / "at_once"))
  trainer.train_and_evaluate(cfg(3), str(tmp_path / "late"))
  at_once = records_without_timing(tmp_path / "at_once")
  assert records_without_timing(tmp_path / "late") == at_once
  assert len(at_once) >= 4 and all("host_wait_s" in r for r in rounds(tmp_path / "late"))
  if adaptive:
    assert len({dict(r)["h"] for r in at_once}) >= 2
  _, a, _ = trainer.load_run(cfg(1), str(tmp_path / "at_once"))
  _, b, _ = trainer.load_run(cfg(3), str(tmp_path / "late"))
  np.testing.assert_equal(jax.device_get(a.params_K), jax.device_get(b.params_K))


@pytest.mark.slow
def test_nan_between_checkpoints_stops_one_round_later_unsaved(tmp_path):
  """Overlapped: a NaN round without a save is read while the next round runs;
  the run stops with the same error, naming the NaN round, and the last
  checkpoint is the one before it."""
  cfg = tiny(
      total_steps=60,
      **{"interval.h": 5, "checkpoint.every_rounds": 2, "network.step_time": 0.01},
  )
  cfg.faults.nan_at_round = 2  # poisons round 3 (steps 10-15); saves at rounds 2, 4
  with pytest.raises(
      FloatingPointError, match=r"loss_mean is nan in round 3 \(inner step 15\)"
  ):
    trainer.train_and_evaluate(cfg, str(tmp_path))
  assert max(checkpoint.Checkpointer(str(tmp_path)).steps()) == 10
  assert [r["round"] for r in rounds(tmp_path)] == [1, 2]


@pytest.mark.slow
def test_an_injected_nan_stops_ddp_too(tmp_path):
  """DDP keeps one model per device (``state.algo``, no ``params_K``): the
  injected NaN poisons it, and the run stops naming the round."""
  cfg = tiny(ddp_config, total_steps=20, **{"network.step_time": 0.01})
  cfg.faults.nan_at_round = 1
  with pytest.raises(FloatingPointError, match="is nan in round 2"):
    trainer.train_and_evaluate(cfg, str(tmp_path))


def test_steady_rate_spans_the_rounds_read_not_the_final_save_or_eval():
  # First round read at t = 10 s (step 5), last at t = 12 s (step 25): 20 steps
  # of 8 tokens in 2 s, whatever the final save and evaluation take after it.
  assert trainer.steady_rate((10.0, 5, 12.0, 25), (0.0, 0), 8) == 80.0
  # One round: its whole time from the start, compilation included.
  assert trainer.steady_rate((10.0, 5, 10.0, 5), (0.0, 0), 8) == 4.0
  assert math.isnan(trainer.steady_rate((3.0, 0, 3.0, 0), (0.0, 0), 8))


class _FakeSteps:
  """The calls ``trainer.train_rounds`` makes, in order, on rounds of 5 steps;
  a stop signal arrives while the round ending at ``stop_at`` is dispatched."""

  def __init__(self, total_steps, every_rounds, stop_at=None):
    self.config = tiny(
        total_steps=total_steps, **{"checkpoint.every_rounds": every_rounds}
    )
    self.host = types.SimpleNamespace(step=0)
    self.calls, self.stop, self.stop_at = [], [], stop_at

  def dispatch(self):
    self.host.step += 5
    self.calls.append(f"dispatch {self.host.step}")
    if self.host.step == self.stop_at:
      self.stop.append(15)
    return self.host.step

  def read_next_steps(self, round_):
    self.calls.append(f"next_h {round_}")
    return round_

  def read(self, round_):
    self.calls.append(f"read {round_}")
    return round_

  def log(self, record):
    self.calls.append(f"log {record}")

  def save(self):
    self.calls.append(f"save {self.host.step}")


def test_the_loop_reads_each_round_late_but_a_saved_round_before_its_save():
  steps = _FakeSteps(total_steps=25, every_rounds=3)
  trainer.train_rounds(steps, steps.stop)
  assert steps.calls == [
      "dispatch 5", "next_h 5",
      "dispatch 10", "read 5", "log 5", "next_h 10",
      "dispatch 15", "read 10", "log 10", "read 15", "log 15", "save 15",
      "dispatch 20", "next_h 20",
      "dispatch 25", "read 20", "log 20", "read 25", "log 25", "save 25",
  ]  # fmt: skip


def test_a_stop_signal_saves_the_round_then_raises_preempted():
  steps = _FakeSteps(total_steps=100, every_rounds=10, stop_at=10)
  with pytest.raises(trainer.Preempted):
    trainer.train_rounds(steps, steps.stop)
  assert steps.calls == [
      "dispatch 5", "next_h 5",
      "dispatch 10", "read 5", "log 5", "read 10", "log 10", "save 10",
  ]  # fmt: skip
