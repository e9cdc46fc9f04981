"""Model FLOPs utilization (``autoloco_jax/run/mfu.py``): a device kind's stated
peak, the longest name winning; a config's peak over it; none on a CPU; and
every round's record and the summary carry it."""

import pytest

from autoloco_jax.run import mfu, trainer
from configs import diloco


def test_a_device_kinds_peak_is_its_longest_listed_name():
  assert mfu.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
  assert mfu.peak_flops("NVIDIA H100 PCIe") == 756e12
  assert mfu.peak_flops("TPU v5 lite") == 197e12
  assert mfu.peak_flops("cpu") is None
  assert mfu.peak_flops("cpu", stated=1e11) == 1e11


def test_mfu_is_the_model_flops_per_device_over_the_peak():
  assert mfu.mfu(4e14, 2, 1e15) == pytest.approx(0.2)
  assert mfu.mfu(4e14, 2, None) is None


@pytest.mark.slow
def test_every_round_and_the_summary_log_it(tmp_path):
  """On a CPU: null without a stated peak; with ``peak_flops`` each round's
  model FLOP/s over it, and the summary's tokens/s times F over it."""
  from autoloco_jax.run import metrics

  c = diloco.get_config("tiny")
  c.total_steps, c.interval.h, c.num_devices = 8, 4, 1
  c.eval.every_steps, c.eval.num_batches, c.eval.final_num_batches = 8, 1, 1
  c.log.progress = c.log.tensorboard = False
  c.peak_flops = 1e12
  summary = trainer.train_and_evaluate(c, str(tmp_path))
  rounds = [r for r in metrics.read(str(tmp_path / "metrics.jsonl")) if "round" in r and "summary" not in r]
  assert len(rounds) == 2
  for r in rounds:
    assert r["mfu"] == pytest.approx(r["model_flops_per_sec"] / 1e12)
  assert summary["mfu"] == pytest.approx(summary["model_flops_per_sec"] / 1e12)
  c.peak_flops = None
  assert trainer.train_and_evaluate(c, str(tmp_path / "cpu"))["mfu"] is None
