"""Many hosts: two processes over loopback (gloo) behave like one process with two
devices, and a dead process stops the run with an error instead of a hang."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from autoloco_jax.run import distributed, trainer
from experiments import launch_local
from configs import diloco as diloco_config
from configs import noloco as noloco_config
from tests.helpers import ROOT, rounds, tiny, user_env

pytestmark = pytest.mark.slow

COMMON = [
    "--config.num_workers=4",
    "--config.data.batch_size=8",
    "--config.log.progress=False",
    "--config.log.tensorboard=False",
    "--config.network.step_time=0.01",
]
FLAGS = ["--config", "configs/diloco.py:tiny"] + COMMON
SHORT = ["--config.total_steps=40", "--config.eval.every_steps=20"]
LONG = [
    "--config.total_steps=120",
    "--config.interval.h=5",
    "--config.eval.every_steps=60",
    "--config.checkpoint.every_rounds=2",
]

# Not bitwise: a process with one device and a process with two get different
# XLA CPU thread pools, so matmuls reduce in other orders (measured: 1e-5
# relative after 4 rounds); the all-reduce itself is the same mean.
RTOL = 2e-4


def reference(workdir, module=diloco_config, **overrides):
  """The same config in this process, on 2 of the simulated devices."""
  cfg = tiny(
      module, num_workers=4, num_devices=2, **{"network.step_time": 0.01}, **overrides
  )
  trainer.train_and_evaluate(cfg, str(workdir))
  return rounds(workdir)


def assert_same_rounds(a, b):
  assert len(a) == len(b)
  for ra, rb in zip(a, b):
    assert ra["step"] == rb["step"] and ra["h"] == rb["h"]
    for key in ("loss_mean", "loss_end", "delta_norm", "eval_loss", "spread"):
      if key in ra or key in rb:
        np.testing.assert_allclose(ra[key], rb[key], rtol=RTOL, err_msg=key)
    assert ra["bytes_per_worker"] == rb["bytes_per_worker"]


@pytest.mark.parametrize(
    "name, module", [("diloco", diloco_config), ("noloco", noloco_config)]
)
def test_two_processes_equal_one_process_with_two_devices(tmp_path, name, module):
  flags = ["--config", f"configs/{name}.py:tiny"] + COMMON + SHORT
  code = launch_local.launch(
      flags + ["--workdir", str(tmp_path / "mp")], num_processes=2, timeout=300
  )
  assert code == 0, open(tmp_path / "mp" / "process_0.log").read()
  ref = reference(tmp_path / "ref", module, total_steps=40, **{"eval.every_steps": 20})
  assert_same_rounds(rounds(tmp_path / "mp"), ref)
  assert "final eval " in open(tmp_path / "mp" / "process_0.log").read()
  # Only process 0 writes metrics and prints the summary.
  assert "final eval " not in open(tmp_path / "mp" / "process_1.log").read()


def test_dead_process_stops_the_run_and_it_resumes(tmp_path):
  workdir = tmp_path / "mp"
  workdir.mkdir()
  env = user_env(
      JAX_PLATFORMS="cpu",
      XLA_FLAGS=distributed.with_host_devices(os.environ["XLA_FLAGS"], 1),
  )
  address = f"127.0.0.1:{launch_local.free_port()}"
  procs = [
      subprocess.Popen(
          [
              sys.executable,
              "-m",
              "experiments.run",
              *FLAGS,
              *LONG,
              "--workdir",
              str(workdir),
              f"--coordinator_address={address}",
              "--num_processes=2",
              f"--process_id={i}",
              "--heartbeat_timeout=10",
          ],
          cwd=ROOT,
          env=env,
          stdout=open(tmp_path / f"p{i}.log", "w"),
          stderr=subprocess.STDOUT,
      )
      for i in range(2)
  ]
  try:
    deadline = time.time() + 180
    while len(rounds(workdir)) < 4 if (workdir / "metrics.jsonl").exists() else True:
      assert time.time() < deadline, open(tmp_path / "p0.log").read()
      assert procs[0].poll() is None, open(tmp_path / "p0.log").read()
      time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    killed = time.time()
    code = procs[0].wait(timeout=90)  # bounded: the heartbeat timeout is 10 s
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert code != 0
  assert time.time() - killed < 60
  assert "another task died" in open(tmp_path / "p0.log").read()
  stopped_at = len(rounds(workdir))
  assert stopped_at < 24

  code = launch_local.launch(
      FLAGS + LONG + ["--workdir", str(workdir)], num_processes=2, timeout=300
  )
  log = open(workdir / "process_0.log").read()
  assert code == 0, log
  assert "Resumed from the checkpoint" in log
  records = rounds(workdir)
  assert [r["step"] for r in records] == list(range(5, 121, 5))


def test_core_shares_split_the_usable_cores_evenly():
  cores = sorted(os.sched_getaffinity(0))
  shares = launch_local.core_shares(len(cores))
  assert [sorted(s) for s in shares] == [[c] for c in cores]
  assert launch_local.core_shares(1) == [set(cores)]
  with pytest.raises(ValueError, match="usable cores"):
    launch_local.core_shares(len(cores) + 1)
