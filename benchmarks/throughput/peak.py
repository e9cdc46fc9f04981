"""The machine and its peak: the CPU's nominal fp32 peak, the achievable matmul
rate measured in the same run, and the rate at the model's own matmul shapes."""

from __future__ import annotations

import os
import platform
import subprocess

import jax
import jax.numpy as jnp

from benchmarks.throughput.workload import Workload, algorithm_config
from benchmarks.throughput.timing import timed


def _cpuinfo() -> dict:
  info = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
  except OSError:
    pass
  return info


def machine() -> dict:
  """CPU model, cores, load, devices, and the nominal fp32 peak with its formula."""
  cpu = _cpuinfo()
  cores = (
      len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  )
  cpu_flags = set(cpu.get("flags", "").split())
  vendor = cpu.get("vendor_id", "")
  mhz = float(cpu.get("cpu MHz", "0") or 0)
  # FP32 FLOP per cycle per core = FMA pipes x lanes x 2. Intel server cores with
  # AVX-512 have two 512-bit FMA pipes (2 x 16 x 2 = 64); AMD Zen 4 runs AVX-512
  # on two 256-bit pipes (2 x 8 x 2 = 32), as does an AVX2 core.
  if "avx512f" in cpu_flags and vendor == "GenuineIntel":
    per_cycle, unit = 64, "AVX-512, 2 FMA pipes x 16 fp32 lanes x 2 FLOP"
  elif "avx512f" in cpu_flags:
    per_cycle, unit = 32, "AVX-512 on 2 x 256-bit FMA pipes (Zen 4): 2 x 8 lanes x 2 FLOP"
  elif "fma" in cpu_flags:
    per_cycle, unit = 32, "AVX2, 2 FMA pipes x 8 fp32 lanes x 2 FLOP"
  else:
    per_cycle, unit = 0, "unknown vector unit"
  try:
    uptime = subprocess.run(
        ["uptime"], capture_output=True, text=True, timeout=5
    ).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    uptime = ""
  return dict(
      cpu=cpu.get("model name", platform.processor()),
      vendor=vendor,
      cores=cores,
      mhz=mhz,
      flop_per_cycle_per_core=per_cycle,
      vector_unit=unit,
      nominal_peak_flops=cores * mhz * 1e6 * per_cycle,
      nominal_formula=(
          f"{cores} cores x {mhz / 1e3:.2f} GHz (/proc/cpuinfo clock) x "
          f"{per_cycle} fp32 FLOP/cycle ({unit})"
      ),
      load_avg=list(os.getloadavg()),
      uptime=uptime,
      backend=jax.default_backend(),
      device_count=jax.device_count(),
      device_kind=jax.devices()[0].device_kind,
      jax=jax.__version__,
      python=platform.python_version(),
      xla_flags=os.environ.get("XLA_FLAGS", ""),
  )


def matmul_rate(
    n: int,
    m: int | None = None,
    k: int | None = None,
    repeats: int = 3,
    batch: int = 0,
    dtype=jnp.float32,
) -> float:
  """Best FLOP/s of a jitted ``[n, k] @ [k, m]`` matmul in ``dtype`` (float32,
  square by default); with ``batch``, ``batch`` independent ones as one batched
  matmul (what ``vmap`` over workers makes of a layer)."""
  m, k = m or n, k or n
  lead = (batch,) if batch else ()
  a = jnp.ones(lead + (n, k), dtype)
  b = jnp.full(lead + (k, m), 1e-3, dtype)
  f = jax.jit(jnp.matmul)
  f(a, b).block_until_ready()
  best = min(timed(lambda: f(a, b).block_until_ready()) for _ in range(repeats))
  return 2.0 * max(batch, 1) * n * m * k / best


def shape_matmul(workload: Workload) -> dict:
  """The matmul rate at the model's MLP shape: ``[K·B·L, d] @ [d, F]`` (the
  reference), K of ``[B·L, d] @ [d, F]`` batched (the replica axis), one
  ``[B·L, d] @ [d, F]`` (a naive worker step); and the square peak. Interleaved,
  best of 5 each."""
  c = algorithm_config(workload, "diloco")
  n, d, f = c.data.batch_size * c.data.seq_len, c.model.d_model, c.model.mlp_dim
  K = workload.num_workers
  rates = dict(
      global_flops_per_sec=[],
      batched_flops_per_sec=[],
      worker_flops_per_sec=[],
      square_flops_per_sec=[],
  )
  for _ in range(3):
    rates["global_flops_per_sec"].append(matmul_rate(K * n, f, d, 5))
    rates["batched_flops_per_sec"].append(matmul_rate(n, f, d, 5, batch=K))
    rates["worker_flops_per_sec"].append(matmul_rate(n, f, d, 5))
    rates["square_flops_per_sec"].append(matmul_rate(workload.matmul_n[-1]))
  return dict(
      global_shape=[K * n, d, f],
      batched_shape=[K, n, d, f],
      worker_shape=[n, d, f],
      square_n=workload.matmul_n[-1],
      **{k: max(v) for k, v in rates.items()},
  )
