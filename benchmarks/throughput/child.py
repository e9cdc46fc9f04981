"""The child process: the shard_map rows on simulated CPU devices.

Simulated CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
before JAX starts, so on CPU these rows are measured by a fresh process of
``python -m benchmarks.throughput --child_devices=N``. It measures its rows
against a reference of its own, announces the result, then serves timed units
of the same rows (``benchmarks/unit_server.py``) so that this process can
bracket them by its own one-device reference too.
"""

from __future__ import annotations

import os
import sys

from benchmarks.unit_server import Served

DEVICE_COUNT = "--xla_force_host_platform_device_count"

#: The repository root (the children run ``python -m benchmarks...`` from there).
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(devices: int) -> dict:
  """This process's environment with ``devices`` simulated CPU devices."""
  env = dict(os.environ)
  kept = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT)]
  env["XLA_FLAGS"] = " ".join(kept + [f"{DEVICE_COUNT}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  return env


def start_child(devices: int, flags: list[str]) -> Served:
  """Starts the shard_map rows in a fresh process with ``devices`` simulated CPU
  devices and the command-line ``flags`` of the plan. Its ``ready()`` waits for
  its result (or ``{"error": ...}``); then it serves units until ``close()``."""
  args = [sys.executable, "-m", "benchmarks.throughput", f"--child_devices={devices}"]
  return Served(args + list(flags), child_env(devices), ROOT)
