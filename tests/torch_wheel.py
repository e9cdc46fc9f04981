"""torch for the JAX-against-PyTorch tests, where the environment has none.

torch is optional (not in ``requirements.txt``), so CI has none; the equivalence
tests of ``tests/test_benchmarks.py`` install PyPI's wheel themselves, into a
folder of their own put at the end of ``sys.path`` (the suite's own packages
win), and run. PyPI has no CPU-only torch for x86_64 Linux: its wheel brings
the CUDA libraries, which ``import torch`` loads even on a CPU-only machine.
Measured here (x86_64, Python 3.11, December 2026): ``torch==2.14.1`` is 2.9 GB
of wheels (555 MB of them torch's own), 5.4 GB installed; 12 s to download and
76 s to install on an idle 2-core machine, 159 s together under load; deleting
the folder again took 50 s. The tests themselves take about 50 s.

So the tests use torch where it is installed, or where this folder holds it,
and install it into the folder only when asked (``AUTOLOCO_TORCH_TESTS=install``):
on a fresh machine, CI's included, the install would be a third of the suite's
10-minute budget and 5.4 GB of its disk, so there the tests say so and skip.
The folder is kept, once per machine and version (about 2.5 minutes the first
time, nothing after): ``$AUTOLOCO_TORCH_DIR``, else
``~/.cache/autoloco_jax/torch-<version>-py<X.Y>`` (``$XDG_CACHE_HOME`` moves
``~/.cache``). Delete it to get the 5.4 GB back.
"""

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types

import filelock

#: The wheel the tests install: the newest that resolves for Python 3.11 here.
TORCH = "torch==2.14.1"

#: Why the tests skip on a machine without torch, and how to run them.
WHY_NOT_HERE = (
    "torch is not installed here, and PyPI's wheel (the CUDA build: 2.9 GB of "
    "wheels, 5.4 GB installed, about 2.5 minutes) would be a third of the "
    "suite's 10 minutes: AUTOLOCO_TORCH_TESTS=install installs it once per "
    "machine (tests/torch_wheel.py)"
)


def wanted() -> bool:
  """Whether torch is here (installed, or kept in :func:`folder`) or the run
  asks for it to be installed."""
  return (
      importlib.util.find_spec("torch") is not None
      or os.path.isdir(folder())
      or os.environ.get("AUTOLOCO_TORCH_TESTS") == "install"
  )


def folder() -> str:
  """Where :data:`TORCH` is installed and kept."""
  cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
  python = f"py{sys.version_info.major}.{sys.version_info.minor}"
  name = f"{TORCH.replace('==', '-')}-{python}"
  return os.environ.get("AUTOLOCO_TORCH_DIR") or os.path.join(cache, "autoloco_jax", name)


def import_torch() -> types.ModuleType:
  """The installed torch, else :data:`TORCH` from :func:`folder`, installed
  there first if it is not yet (into a fresh folder renamed into place, so a
  stopped install leaves nothing half done).

  Raises:
    RuntimeError: when pip cannot install it (no network, say): a test that
      needs torch then fails, it is not skipped.
  """
  if importlib.util.find_spec("torch") is not None:
    return importlib.import_module("torch")
  target = folder()
  os.makedirs(os.path.dirname(target), exist_ok=True)
  with filelock.FileLock(target + ".lock"):
    if not os.path.isdir(target):
      fresh = tempfile.mkdtemp(prefix=".installing-", dir=os.path.dirname(target))
      args = [sys.executable, "-m", "pip", "install", "-q", "--target", fresh, TORCH]
      proc = subprocess.run(args, capture_output=True, text=True, timeout=1800)
      if proc.returncode != 0:
        shutil.rmtree(fresh, ignore_errors=True)
        raise RuntimeError(f"{' '.join(args[2:])} failed:\n{proc.stderr[-3000:]}")
      os.replace(fresh, target)
  if target not in sys.path:
    sys.path.append(target)
  importlib.invalidate_caches()
  return importlib.import_module("torch")
