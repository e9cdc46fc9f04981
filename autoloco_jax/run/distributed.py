"""Many hosts: the same program on every process, through ``jax.distributed``.

JAX's multi-controller runtime runs one copy of the program per host (a TPU VM
of a pod slice, a GPU node); after :func:`initialize`, ``jax.devices()`` lists
the devices of every process, so the mesh's ``replica`` axis spans all hosts
and ``lax.pmean`` over it is a cross-host all-reduce. On CPU the collectives go
over gloo (TCP), which is how ``experiments/launch_local.py`` runs several
processes on one machine.
"""

from __future__ import annotations

import os

import jax


def initialize(
    coordinator_address: str = "",
    num_processes: int = 0,
    process_id: int = -1,
    auto: bool = False,
    heartbeat_timeout_seconds: int = 60,
) -> None:
  """Joins a multi-process run before anything touches a device.

  Explicit settings (flags, or the environment variables
  ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``) start
  the runtime with them; ``auto`` calls ``jax.distributed.initialize()`` with no
  arguments, which detects TPU pod slices and SLURM/Open MPI GPU clusters. With
  neither, this is a single-process run and nothing happens.

  Args:
    coordinator_address: ``host:port`` of process 0.
    num_processes: how many processes take part.
    process_id: this process's index in ``[0, num_processes)``.
    auto: let JAX detect the cluster.
    heartbeat_timeout_seconds: a peer silent this long is declared dead and
      every process stops with an error instead of waiting forever.
  """
  coordinator_address = coordinator_address or os.environ.get(
      "JAX_COORDINATOR_ADDRESS", ""
  )
  num_processes = num_processes or int(os.environ.get("JAX_NUM_PROCESSES", "0"))
  if process_id < 0:
    process_id = int(os.environ.get("JAX_PROCESS_ID", "-1"))
  explicit = bool(coordinator_address) or num_processes > 1
  if not (explicit or auto):
    return
  # CPU collectives across processes need an implementation; GPUs/TPUs ignore it.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if auto and not explicit:
    jax.distributed.initialize(heartbeat_timeout_seconds=heartbeat_timeout_seconds)
    return
  if not coordinator_address or num_processes < 1 or not 0 <= process_id < num_processes:
    raise ValueError(
        "a multi-process run needs coordinator_address (host:port), num_processes >= 1 "
        f"and 0 <= process_id < num_processes; got {coordinator_address!r}, "
        f"{num_processes}, {process_id}"
    )
  jax.distributed.initialize(
      coordinator_address=coordinator_address,
      num_processes=num_processes,
      process_id=process_id,
      initialization_timeout=120,
      heartbeat_timeout_seconds=heartbeat_timeout_seconds,
  )


def is_leader() -> bool:
  """True on the process that writes metrics, logs and progress (process 0)."""
  return jax.process_index() == 0


_HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def usable_cores() -> int:
  """CPU cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def host_device_count(
    num_workers: int, num_devices: int = 0, cores: int | None = None
) -> int:
  """How many CPU devices a run of ``num_workers`` should see: ``num_devices``
  when given, else the largest count ``<=`` the usable cores that divides K (each
  device runs an equal block of workers, with its own share of the cores)."""
  if num_devices > 0:
    return num_devices
  cores = usable_cores() if cores is None else cores
  return max(
      d for d in range(1, max(1, min(cores, num_workers)) + 1) if num_workers % d == 0
  )


def use_every_core(num_workers: int, num_devices: int = 0) -> int | None:
  """Starts JAX's CPU backend with one device per usable core (the largest count
  that divides K), so a single-process CPU run keeps every core busy; an
  explicit ``num_devices`` sets that many instead (:func:`set_host_devices`).
  Returns the count set, or None when nothing was changed."""
  return set_host_devices(host_device_count(num_workers, num_devices))


def set_host_devices(count: int) -> int | None:
  """Asks JAX for ``count`` CPU devices (``XLA_FLAGS``).

  Must run before JAX initialises a backend; does nothing (returns None) when a
  backend is already up, when the user set ``--xla_force_host_platform_device_count``
  in ``XLA_FLAGS`` (theirs wins), or in a multi-process run. On GPU and TPU
  machines the flag only shapes the unused CPU platform.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  if _HOST_DEVICES_FLAG in flags or _backend_started() or _multi_process_env():
    return None
  os.environ["XLA_FLAGS"] = f"{flags} {_HOST_DEVICES_FLAG}={count}".strip()
  return count


def with_host_devices(xla_flags: str, count: int | None) -> str:
  """``xla_flags`` (an ``XLA_FLAGS`` value) with its CPU device count set to
  ``count`` (None: removed), for a child process's environment."""
  kept = [f for f in xla_flags.split() if not f.startswith(_HOST_DEVICES_FLAG)]
  return " ".join(kept + ([] if count is None else [f"{_HOST_DEVICES_FLAG}={count}"]))


def _backend_started() -> bool:
  from jax._src import xla_bridge

  return bool(getattr(xla_bridge, "_backends", None))


def _multi_process_env() -> bool:
  return int(os.environ.get("JAX_NUM_PROCESSES", "0") or 0) > 1 or bool(
      os.environ.get("JAX_COORDINATOR_ADDRESS")
  )
