"""benchmarks/every_core.py: the main job with one device per core against one
device, each a real ``experiments.run`` process."""

import pytest

from benchmarks import every_core


def test_compare_takes_medians_per_mode_and_their_ratio():
  runs = [
      dict(mode="default", tokens_per_sec=30.0, wall_time=10.0),
      dict(mode="one_device", tokens_per_sec=20.0, wall_time=16.0),
      dict(mode="one_device", tokens_per_sec=10.0, wall_time=20.0),
      dict(mode="default", tokens_per_sec=10.0, wall_time=12.0),
  ]
  out = every_core.compare(runs, ["default", "one_device"])
  assert out["modes"]["default"] == dict(tokens_per_sec=20.0, wall_time=11.0)
  assert out["modes"]["one_device"] == dict(tokens_per_sec=15.0, wall_time=18.0)
  assert out["tokens_per_sec_ratio"] == pytest.approx(20.0 / 15.0)
  assert out["wall_time_ratio"] == pytest.approx(11.0 / 18.0)
  assert out["tokens_per_sec_vs_first"] == pytest.approx(
      dict(default=1.0, one_device=15.0 / 20.0)
  )


def test_compare_any_modes_against_the_first():
  runs = [
      dict(mode="default", tokens_per_sec=20.0, wall_time=10.0),
      dict(mode="process_per_core", tokens_per_sec=25.0, wall_time=9.0),
  ]
  out = every_core.compare(runs, ["default", "process_per_core"])
  assert out["tokens_per_sec_vs_first"]["process_per_core"] == pytest.approx(1.25)
  assert "tokens_per_sec_ratio" not in out  # that one is default over one device


# Each mode as a real run with a summary: the docstring command's test
# (tests/test_benchmark_commands.py) runs both through the entry point.


def test_a_failed_run_raises_with_its_stderr():
  with pytest.raises(RuntimeError, match="failed"):
    every_core.run_once("default", "configs/no_such_config.py", total_steps=1)
