"""The child process: the shard_map rows on simulated CPU devices.

Simulated CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
before JAX starts, so on CPU these rows are measured by a fresh process of
``python -m benchmarks.throughput --child_devices=N``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Callable

DEVICE_COUNT = "--xla_force_host_platform_device_count"

#: The repository root (the child runs ``-m benchmarks.throughput`` from there).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(devices: int) -> dict:
  """This process's environment with ``devices`` simulated CPU devices."""
  env = dict(os.environ)
  kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT)]
  env["XLA_FLAGS"] = " ".join(kept + [f"{DEVICE_COUNT}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  return env


def start_child(devices: int, flags: list[str]) -> Callable[[], dict]:
  """Starts the shard_map rows in a fresh process with ``devices`` simulated CPU
  devices and the command-line ``flags`` of the plan; returns a function that
  waits for it and returns its result (or ``{"error": ...}``)."""
  tmp = tempfile.mkdtemp(prefix="throughput_child_")
  out, log = os.path.join(tmp, "child.json"), os.path.join(tmp, "child.log")
  args = [
      sys.executable,
      "-m",
      "benchmarks.throughput",
      f"--child_devices={devices}",
      f"--child_out={out}",
      *flags,
  ]
  log_file = open(log, "w")
  proc = subprocess.Popen(
      args, cwd=_ROOT, env=child_env(devices), stdout=log_file, stderr=subprocess.STDOUT
  )

  def finish() -> dict:
    code = proc.wait()
    log_file.close()
    try:
      if code != 0 or not os.path.exists(out):
        with open(log) as f:
          return dict(error=f"child exited with {code}: {f.read()[-3000:]}")
      with open(out) as f:
        return json.load(f)
    finally:
      for path in (out, log):
        if os.path.exists(path):
          os.remove(path)
      os.rmdir(tmp)

  return finish
