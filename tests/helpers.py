"""Helpers shared by the test modules (import as ``from tests import helpers``
or ``from tests.helpers import ...``).

* A toy bigram model and the driver of its rounds (``V, L, B``, ``toy_loss``,
  ``toy_params``, ``tokens``, ``config``, ``run_rounds``, ``get``, ``worker0``).
* The trainer end to end on a tiny config (``ROOT``, ``tiny``, ``rounds``).
* Host-drawn model parameters (``host_params``).
* ``assert_trees_close``: ``chex.assert_trees_all_close`` at the tolerance the
  suite's tree comparisons share (rtol 1e-5, atol 1e-6).
* ``trains``: marks a fixture that trains (``tests/conftest.py`` fails a test
  that requests one without ``@pytest.mark.slow``).
"""

import json
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax.algorithms import registry
from autoloco_jax.run import metrics
from autoloco_jax.runtime import replicas, rounds as rounds_lib, state as state_lib
from configs import common
from configs import diloco as diloco_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trains(fixture_function):
  """Marks ``fixture_function`` as one that trains models or runs a training
  command (put it under ``@pytest.fixture``). A test that requests it, directly
  or through another fixture, must be marked slow: ``tests/conftest.py`` fails
  it otherwise, so ``-m "not slow"`` never trains behind a fast test's back."""
  fixture_function.trains = True
  return fixture_function


# ----------------------------------------------------------------------------
# Tree comparisons.


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
  """Same structure, and every leaf pair within ``atol + rtol * |b|``."""
  chex.assert_trees_all_close(a, b, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------
# The toy model: a bigram model, its data and its rounds.

V, L, B = 16, 8, 4


def toy_loss(params, tokens_BxL1):
  """Bigram model: logits = E[x] @ W."""
  x = params["embed"][tokens_BxL1[:, :-1]]
  logits = x @ params["out"]
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, tokens_BxL1[:, 1:]
  ).mean()


def toy_params(seed=0):
  k1, k2 = jax.random.split(jax.random.key(seed))
  return {
      "embed": jax.random.normal(k1, (V, 8)) * 0.5,
      "out": jax.random.normal(k2, (8, V)) * 0.5,
  }


def tokens(K, H, seed=1):
  rng = np.random.default_rng(seed)
  return rng.integers(0, V, size=(K, H, B, L + 1)).astype(np.int32)


#: Where each algorithm reads its outer learning rate and momentum.
OUTER_FIELDS = {
    "diloco": ("diloco.alpha", "diloco.beta"),
    "autoloco": ("diloco.alpha", "diloco.beta"),
    "noloco": ("noloco.alpha", "noloco.beta"),
    "gasloc": ("gasloc.eta", "gasloc.gamma"),
}


def config(algorithm="diloco", K=4, h=3, lr=1.0, momentum=0.9, total=12):
  """A toy run's config; ``lr`` and ``momentum`` are the algorithm's outer
  step size and momentum (DiLoCo's α, β; GASLoC's η, γ)."""
  c = common.base("tiny")
  c.algorithm = algorithm
  c.num_workers = K
  c.total_steps = total
  c.interval.h = h
  if algorithm in OUTER_FIELDS:
    lr_field, momentum_field = OUTER_FIELDS[algorithm]
    common.set_field(c, lr_field, lr)
    common.set_field(c, momentum_field, momentum)
  c.inner.lr = 0.05
  c.inner.warmup_steps = 2
  return c


def run_rounds(cfg, mesh, hs, params=None, seed=1, each=None):
  """Runs one round per entry of ``hs`` through the round driver; returns
  (algo, state, list of metrics). ``each(state)``, if given, sees the state
  after every round."""
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(params or toy_params()), mesh)
  data = tokens(cfg.num_workers, sum(hs), seed)
  out, start = [], 0

  def read(n):
    nonlocal start
    start += n
    return data[:, start - n : start]

  for h in hs:
    state, m = rounds_lib.run_round(algo, state, read, h, max(hs), mesh)
    out.append(jax.device_get(m))
    if each is not None:
      each(state)
  return algo, state, out


def everyone(num_workers, mesh):
  """``present_K`` of a round without faults: every worker counts."""
  return replicas.put_workers(np.ones(num_workers, np.float32), mesh)


def get(tree):
  return jax.tree.map(np.asarray, jax.device_get(tree))


def worker0(tree_K):
  return jax.tree.map(lambda x: np.asarray(x[0]), tree_K)


# ----------------------------------------------------------------------------
# The trainer on a tiny config.


def tiny(config_module=diloco_config, **overrides):
  c = config_module.get_config("tiny")
  c.num_devices = 1
  c.num_workers = 2
  c.data.batch_size = 8
  c.log.progress = False
  c.log.tensorboard = False
  for key, value in overrides.items():
    common.set_field(c, key, value)
  return c


def rounds(workdir):
  return [
      r
      for r in metrics.read(os.path.join(workdir, "metrics.jsonl"))
      if not r.get("summary")
  ]


# ----------------------------------------------------------------------------
# Model parameters.


def host_params(init, seed=0):
  """Random params of the model's layout, drawn with numpy: no RNG compilation."""
  rng = np.random.default_rng(seed)
  shapes = jax.eval_shape(init, jax.random.key(0))
  return jax.tree_util.tree_map_with_path(
      lambda path, s: jnp.ones(s.shape)
      if path[-1].key == "scale"
      else jnp.asarray(0.05 * rng.standard_normal(s.shape), jnp.float32),
      shapes,
  )


def records_without_timing(workdir):
  """Each round's (keys in logged order, values) of ``workdir/metrics.jsonl``,
  without host timings."""
  from autoloco_jax.run import trainer

  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  return [
      [(k, v) for k, v in r.items() if k not in trainer.TIMING_FIELDS]
      for r in records
      if not r.get("summary")
  ]


def user_env(**extra) -> dict:
  """This process's environment as a user's shell has it, for a child process:
  no simulated device count in ``XLA_FLAGS`` (one CPU device, or what the
  program asks for itself), the suite's cheaper compiles kept
  (``tests/conftest.py``); ``extra`` added."""
  from autoloco_jax.run import distributed

  env = dict(os.environ)
  env["XLA_FLAGS"] = distributed.with_host_devices(env.get("XLA_FLAGS", ""), None)
  env.update(extra)
  return env


#: The packages of this repository: their flags (and the fields a config flag
#: of theirs defines, ``--config.x``) are the ones :func:`run_main` sets aside;
#: a library's (grain's, say) stay, as the library reads them.


_OURS = ("autoloco_jax", "benchmarks", "configs", "experiments", "projects", "tests")


def _own_flags(values) -> list[str]:
  """The names of the flags this repository's modules defined in ``values``
  (a config flag's field overrides, ``plan.methods``, with it), and of any absl
  records under no module (``<unknown>``: one a test loaded from a file path,
  ``launch_local``'s ``num_processes`` in a worker of the README command); the
  libraries' own flags (absl's, grain's) stay."""
  by_module = values.flags_by_module_dict()
  recorded = {f.name for defined in by_module.values() for f in defined}
  ours = {
      f.name for module, defined in by_module.items()
      if module.split(".")[0] in _OURS for f in defined
  }
  return [
      n for n in list(values)
      if n.split(".")[0] in ours or n.split(".")[0] not in recorded
  ]


def run_main(module: str, *argv: str) -> str:
  """``python -m module *argv`` in this process, for a command that needs no
  process of its own (no device count, no ``XLA_FLAGS`` of its own): imports
  ``module`` afresh with absl's flags of other modules set aside (two modules
  may define flags of the same name), parses ``argv`` and calls its
  ``main`` in the repository's root; afterwards its flags are removed and the
  others put back. Returns what it printed to stdout; an exception it raises
  propagates."""
  import contextlib
  import importlib
  import io
  import sys

  from absl import flags

  values = flags.FLAGS
  aside = {name: values[name] for name in _own_flags(values)}
  for name in aside:
    delattr(values, name)
  was_parsed = values.is_parsed()
  kept = sys.modules.pop(module, None)
  out = io.StringIO()
  sys_argv, cwd = sys.argv, os.getcwd()
  # config_flags reads a config's ``--config.field=`` overrides from sys.argv.
  sys.argv = [module, *argv]
  os.chdir(ROOT)  # as the subprocess tests run their commands
  try:
    program = importlib.import_module(module)
    rest = values(sys.argv)
    with contextlib.redirect_stdout(out):
      program.main(rest)
  finally:
    sys.argv = sys_argv
    os.chdir(cwd)
    for name in _own_flags(values):
      delattr(values, name)
    for name, flag in aside.items():
      values[name] = flag
    if not was_parsed:
      values.unparse_flags()
    if kept is None:
      sys.modules.pop(module, None)
    else:
      sys.modules[module] = kept
  return out.getvalue()


def script_calls(tmp_path, script: str, *args, fake: str = 'echo "$@" >> {log}', **env):
  """Runs a runner script (``experiments/*.sh``) with a stand-in ``python`` on
  the PATH that records each call's arguments instead of training (``fake``: its
  shell body, ``{log}`` the record). Returns the recorded lines in order, or the
  finished process when the script fails."""
  import subprocess

  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  log = tmp_path / "calls.txt"
  stand_in = bin_dir / "python"
  stand_in.write_text("#!/bin/sh\n" + fake.format(log=log) + "\n")
  stand_in.chmod(0o755)
  path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
  proc = subprocess.run(
      [os.path.join(ROOT, script), *args], cwd=ROOT, capture_output=True, text=True,
      timeout=120, env=dict(os.environ, PATH=path, PHASES_STAGGER="0", **env),
  )
  if proc.returncode:
    return proc
  return [l for l in log.read_text().split("\n") if l] if log.exists() else []
