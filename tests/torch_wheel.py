"""torch for the JAX-against-PyTorch tests, where the environment has none.

torch is optional (not in ``requirements.txt``); the equivalence tests of
``tests/test_benchmarks.py`` install it themselves, into a folder of their own
put at the end of ``sys.path`` (the suite's own packages win), and run.

PyPI has no CPU-only torch for x86_64 Linux: its wheel brings the CUDA
libraries (``torch==2.14.1``: 2.9 GB of wheels, 5.4 GB installed, about 2.5
minutes). The project's machines (CI's included) keep a CPU build of
:data:`TORCH` in pip's ``--find-links`` folder (``$PIP_FIND_LINKS``,
``/opt/wheels``: 192 MB), which ``pip install torch==2.13.0`` takes: where that
file is, the tests install from it without being asked (once per machine, about
a minute; nothing after), so they run in the README's test command and CI.
Elsewhere they install only when asked (``AUTOLOCO_TORCH_TESTS=install``, which
downloads PyPI's CUDA build), and otherwise say so and skip.

The folder is kept, once per machine and version: ``$AUTOLOCO_TORCH_DIR``, else
``~/.cache/autoloco_jax/torch-<version>-py<X.Y>`` (``$XDG_CACHE_HOME`` moves
``~/.cache``). Delete it to get the space back.
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

#: The wheel the tests install: the version of the CPU build the project's
#: machines keep in pip's find-links folder (elsewhere PyPI's CUDA build).
TORCH = "torch==2.13.0"

#: Why the tests skip on a machine without torch, and how to run them.
WHY_NOT_HERE = (
    "torch is not installed here and no CPU build of it lies in pip's "
    "find-links folder; PyPI's wheel (the CUDA build: 2.9 GB of wheels, 5.4 GB "
    "installed, about 2.5 minutes) would be a third of the suite's 10 minutes: "
    "AUTOLOCO_TORCH_TESTS=install installs it once per machine (tests/torch_wheel.py)"
)


def wanted() -> bool:
  """Whether torch is here (installed, or kept in :func:`folder`), a CPU build
  of :data:`TORCH` lies in pip's find-links folder (:func:`local_wheel`), or
  the run asks for it to be installed."""
  return (
      importlib.util.find_spec("torch") is not None
      or os.path.isdir(folder())
      or local_wheel() is not None
      or os.environ.get("AUTOLOCO_TORCH_TESTS") == "install"
  )


def local_wheel() -> str | None:
  """A CPU build of :data:`TORCH` for this Python in a folder of
  ``$PIP_FIND_LINKS`` (what ``pip install`` takes without a download), or None."""
  version = TORCH.split("==")[1]
  python = f"cp{sys.version_info.major}{sys.version_info.minor}"
  for place in os.environ.get("PIP_FIND_LINKS", "").split():
    if os.path.isdir(place):
      for name in sorted(os.listdir(place)):
        if name.startswith(f"torch-{version}+cpu-{python}-") and name.endswith(".whl"):
          return os.path.join(place, name)
  return None


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
