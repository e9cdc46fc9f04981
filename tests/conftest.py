"""Test setup: four simulated CPU devices so sharded and vmapped runs can be compared."""

import atexit
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
# Cheaper XLA compiles: the suite checks what programs compute, never how fast
# (the throughput benchmark's ``--quick`` does the same). Most of the suite's
# time is compiling small programs: this cuts a compile-heavy file's CPU time by
# about a third (tests/test_algorithms.py: 62 -> 43 CPU-s). The subprocess tests
# inherit it (``tests.helpers.user_env`` keeps it where a test wants a user's
# one-device shell).
FAST_COMPILE = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
)
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
  os.environ["XLA_FLAGS"] = " ".join([os.environ["XLA_FLAGS"], *FAST_COMPILE])
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _session_folder(variable: str, prefix: str) -> None:
  """A fresh folder for the test session in ``variable``, unless it is set
  (the pytest-xdist workers and the subprocess tests inherit the one the first
  process made); removed when the process that made it exits."""
  if variable not in os.environ:
    os.environ[variable] = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, os.environ[variable], ignore_errors=True)


# The embedded dataset is built once per test session into a fresh folder
# (about a second), never into the user's cache.
_session_folder("AUTOLOCO_DATA_DIR", "autoloco_tfds_")
# A persistent compilation cache for the session: many tests (the quick studies
# above all) build the same small programs again in fresh closures; a fresh
# folder per session, so nothing carries over between runs of the suite.
_session_folder("JAX_COMPILATION_CACHE_DIR", "autoloco_jit_")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

# The files whose module fixtures run whole studies or benchmarks (minutes each) go
# first, so that with ``pytest -n 2 --dist loadfile`` (the README's command) the
# workers start on them and the short files fill in around them; in collection
# order they would start last and leave one worker running alone at the end.
# The quick studies run on synthetic runs (test_study_modules.py); the few labels
# whose trained numbers a check reads train in test_studies_quick.py.
SLOW_FIRST = (
    "test_studies_quick.py",
    "test_study_modules.py",
    "test_benchmarks.py",
    "test_multihost.py",
    # projects/plora/tests: the PLoRA sweep's documented commands at :tiny
    "test_plora_commands.py",
)


@pytest.fixture(autouse=True)
def _fresh_builds():
  """Each test builds its own programs (``assembly.setup`` keeps the last few
  builds): a build kept from another test would skip a builder it patches. Runs
  inside one test, and a module's fixture, still share them."""
  from autoloco_jax.run import assembly

  assembly.forget_builds()


def pytest_collection_modifyitems(config, items):
  rank = {name: i for i, name in enumerate(SLOW_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


def training_fixtures(item) -> list[str]:
  """The fixtures ``item`` requests, directly or through other fixtures, that
  train (``tests.helpers.trains``)."""
  info = getattr(item, "_fixtureinfo", None)
  if info is None:
    return []
  return sorted(
      name
      for name, defs in info.name2fixturedefs.items()
      if any(getattr(d.func, "trains", False) for d in defs)
  )


def pytest_runtest_setup(item):
  """A test that requests a training fixture without the slow mark fails before
  the fixture runs: ``-m "not slow"`` must never train a module's fixture."""
  trains = training_fixtures(item)
  if trains and item.get_closest_marker("slow") is None:
    pytest.fail(
        f"{item.nodeid} requests the training fixture(s) {trains} but is not "
        "marked @pytest.mark.slow",
        pytrace=False,
    )
