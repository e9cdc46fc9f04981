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
