"""What produced a run: package versions, the JAX backend and devices, the code's
git commit. Stored in each run's ``config.json`` under ``provenance``."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess

#: Distributions whose versions a run records (those installed).
PACKAGES = (
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "orbax-checkpoint",
    "tensorflow-datasets",
    "grain",
    "ml_collections",
    "numpy",
    "sentencepiece",
    "tokenizers",
    "autoloco_jax",
)


def git_commit(path: str | None = None) -> dict:
  """``{"commit": sha, "dirty": bool}`` of the git checkout holding ``path``
  (this package by default); ``{}`` when it is not in one or git is absent."""
  path = path or os.path.dirname(os.path.abspath(__file__))
  try:
    run = lambda *args: subprocess.run(
        ["git", *args], cwd=path, capture_output=True, text=True, timeout=10, check=True
    ).stdout.strip()
    commit = run("rev-parse", "HEAD")
    dirty = bool(run("status", "--porcelain", "--untracked-files=no"))
  except (OSError, subprocess.SubprocessError):
    return {}
  return {"commit": commit, "dirty": dirty}


def collect() -> dict:
  """Versions, platform, JAX backend and devices, and the git commit."""
  import jax

  versions = {}
  for name in PACKAGES:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      pass
  devices = jax.devices()
  return dict(
      packages=versions,
      python=platform.python_version(),
      platform=platform.platform(),
      backend=jax.default_backend(),
      device_kind=devices[0].device_kind,
      num_devices=len(devices),
      process_count=jax.process_count(),
      git=git_commit(),
  )
