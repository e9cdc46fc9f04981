"""Runs a multi-process job on this machine: N processes over loopback (gloo).

  python -m experiments.launch_local --num_processes 2 --devices_per_process 1 -- \
      --config configs/diloco.py:tiny --workdir runs/mp

Everything after ``--`` goes to ``experiments.run`` in every process, which gets
``--coordinator_address 127.0.0.1:PORT --num_processes N --process_id i`` added
(PORT: a free port picked here, so parallel launches do not collide). Process
i's output goes to ``WORKDIR/process_i.log``; process 0's is also echoed. If any
process fails, the others are stopped and the launcher exits with its code.
"""

import os
import socket
import subprocess
import sys
import time

from absl import app, flags

from autoloco_jax.run import distributed

_NUM = flags.DEFINE_integer("num_processes", 2, "Processes to start.")
_DEVICES = flags.DEFINE_integer("devices_per_process", 1, "Simulated CPU devices each.")
_TIMEOUT = flags.DEFINE_integer("timeout", 3600, "Seconds before everything is stopped.")
_HEARTBEAT = flags.DEFINE_integer("heartbeat_timeout", 60, "Passed to every process.")
_PIN = flags.DEFINE_bool(
    "pin_cores",
    False,
    "Pin process i to the i-th share of the usable cores (os.sched_setaffinity), "
    "so each sizes its XLA thread pool to its own cores.",
)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def core_shares(num_processes: int) -> list[set[int]]:
  """The usable cores in ``num_processes`` equal contiguous shares.

  Raises:
    ValueError: when there are fewer cores than processes.
  """
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < num_processes:
    raise ValueError(f"{num_processes} processes to pin, {len(cores)} usable cores")
  per = len(cores) // num_processes
  return [set(cores[i * per : (i + 1) * per]) for i in range(num_processes)]


def _workdir(args: list[str]) -> str:
  for i, arg in enumerate(args):
    if arg.startswith("--workdir="):
      return arg.split("=", 1)[1]
    if arg == "--workdir" and i + 1 < len(args):
      return args[i + 1]
  raise app.UsageError("pass --workdir to experiments.run after --")


def launch(
    run_args: list[str],
    num_processes: int,
    devices_per_process: int = 1,
    timeout: float = 3600,
    heartbeat_timeout: int = 60,
    pin_cores: bool = False,
) -> int:
  """Starts the processes and waits; returns the first non-zero exit code, or 0.

  The processes keep the caller's ``XLA_FLAGS`` but the device count, which is
  ``devices_per_process``. With ``pin_cores`` process i runs on the i-th of
  ``num_processes`` equal shares of the usable cores (:func:`core_shares`)."""
  workdir = _workdir(run_args)
  os.makedirs(workdir, exist_ok=True)
  env = dict(
      os.environ,
      JAX_PLATFORMS="cpu",
      XLA_FLAGS=distributed.with_host_devices(
          os.environ.get("XLA_FLAGS", ""), devices_per_process
      ),
  )
  shares = core_shares(num_processes) if pin_cores else [None] * num_processes
  address = f"127.0.0.1:{free_port()}"
  procs, logs = [], []
  for i in range(num_processes):
    log = open(os.path.join(workdir, f"process_{i}.log"), "w")
    cmd = [
        sys.executable,
        "-m",
        "experiments.run",
        *run_args,
        f"--coordinator_address={address}",
        f"--num_processes={num_processes}",
        f"--process_id={i}",
        f"--heartbeat_timeout={heartbeat_timeout}",
    ]
    pin = (lambda cores=shares[i]: os.sched_setaffinity(0, cores)) if shares[i] else None
    procs.append(
        subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin
        )
    )
    logs.append(log)
  deadline = time.time() + timeout
  code = 0
  try:
    while any(p.poll() is None for p in procs):
      failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
      if failed:
        code = failed[0]
        break
      if time.time() > deadline:
        code = 124
        break
      time.sleep(0.2)
    else:
      code = next((p.returncode for p in procs if p.returncode), 0)
  finally:
    for p in procs:
      if p.poll() is None:
        p.terminate()
    for p in procs:
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        p.kill()
    for log in logs:
      log.close()
  with open(os.path.join(workdir, "process_0.log")) as f:
    sys.stdout.write(f.read())
  if code:
    print(
        f"launch_local: a process failed with exit code {code}; logs in "
        f"{workdir}/process_*.log",
        file=sys.stderr,
    )
  return code


def main(argv):
  sys.exit(
      launch(
          argv[1:],
          _NUM.value,
          _DEVICES.value,
          _TIMEOUT.value,
          _HEARTBEAT.value,
          _PIN.value,
      )
  )


if __name__ == "__main__":
  app.run(main)
