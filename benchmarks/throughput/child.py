"""The child process: the shard_map rows on simulated CPU devices.

Simulated CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
before JAX starts, so on CPU these rows are measured by a fresh process of
``python -m benchmarks.throughput --child_devices=N``. It measures its rows
against ``reference@N`` (the reference on the same N devices) and the
one-device reference of that process, then announces the result
(``benchmarks/unit_server.py``) and waits for the parent to quit.
"""

from __future__ import annotations

import os
import sys

from autoloco_jax.run import distributed
from benchmarks.unit_server import Served

DEVICE_COUNT = "--xla_force_host_platform_device_count"

#: The repository root (the children run ``python -m benchmarks...`` from there).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(devices: int) -> dict:
  """This process's environment with ``devices`` simulated CPU devices."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = distributed.with_host_devices(env.get("XLA_FLAGS", ""), devices)
  env["JAX_PLATFORMS"] = "cpu"
  return env


def start_child(devices: int, flags: list[str]) -> Served:
  """Starts the shard_map rows in a fresh process with ``devices`` simulated CPU
  devices and the command-line ``flags`` of the workload. Its ``ready()`` waits for
  its result (or ``{"error": ...}``); ``close()`` ends it."""
  args = [sys.executable, "-m", "benchmarks.throughput", f"--child_devices={devices}"]
  return Served(args + list(flags), child_env(devices), ROOT)
