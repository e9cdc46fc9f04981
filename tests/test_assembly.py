"""``assembly.setup`` keeps the last few builds: a run that reuses another run's
build (its jitted model and algorithm) trains bit for bit as with its own, and
a build is reused across seeds only where the algorithm's ``build`` does not
read the seed (``seeded_build``: the gossip topologies draw their tables from
it)."""

import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.run import assembly, trainer
from experiments import engine
from configs import default, gasloc
from tests.helpers import records_without_timing


def _tiny(module, seed):
  config = module.get_config("tiny")
  config.seed = seed
  config.total_steps = 20
  config.log.progress = False
  config.network.step_time = 0.01  # the simulated clock without a measured step
  return config


@pytest.mark.slow
@pytest.mark.parametrize("module", [default, gasloc], ids=["autoloco", "gasloc"])
def test_a_reused_build_trains_as_its_own(module, tmp_path):
  trainer.train_and_evaluate(_tiny(module, 0), str(tmp_path / "first"))
  kept = dict(assembly._BUILT)
  shared = trainer.train_and_evaluate(_tiny(module, 1), str(tmp_path / "shared"))
  seeded = registry.hyperparams_class(_tiny(module, 1).algorithm).seeded_build
  # The second seed reused the first seed's build exactly when the seed is not
  # part of the build.
  assert (dict(assembly._BUILT) == kept) is (not seeded)
  assembly.forget_builds()
  own = trainer.train_and_evaluate(_tiny(module, 1), str(tmp_path / "own"))
  assert records_without_timing(tmp_path / "shared") == records_without_timing(
      tmp_path / "own"
  )
  for key in ("final_eval_loss", "syncs", "bytes_per_worker", "inner_compilations"):
    assert shared[key] == own[key], key


def test_a_changed_field_or_mesh_is_another_build():
  """The fast twin: what the key holds (the reuse itself trains above)."""
  config = _tiny(default, 0)
  mesh = object()
  key = assembly.build_key(config, mesh)
  assert assembly.build_key(_tiny(default, 5), mesh) == key
  config.inner.lr = config.inner.lr * 2
  assert assembly.build_key(config, mesh) != key
  assert assembly.build_key(_tiny(default, 0), object()) != key
  assert assembly.build_key(_tiny(gasloc, 0), mesh) != assembly.build_key(
      _tiny(gasloc, 1), mesh
  )


def test_a_report_trained_seed_by_seed_builds_each_label_once():
  """A sweep's order (``sweep.training_order``: every label of a seed, then the
  next seed) over as many labels as the cache keeps: the second seed builds
  nothing (a build is cheap; its programs are traced on first use)."""
  assembly.forget_builds()
  before = assembly.builds_made
  mesh = assembly.replicas.make_mesh(4, 1)
  labels = range(assembly.KEEP_BUILDS)
  for seed in (0, 1):
    for i in labels:
      config = _tiny(default, seed)
      config.inner.lr = 1e-3 * (1 + i)
      assembly.build(config, mesh, vocab_size=64)
  assert assembly.builds_made - before == len(labels)
  # ... and the cache holds every label of the committed report phases.
  from configs.studies import evidence, gossip_g2

  for study in (
      engine.build(evidence, "report,many,python"),
      engine.build(evidence, "report,base,shakespeare"),
      engine.build(gossip_g2, "report,shakespeare"),
  ):
    assert len(study.labels) <= assembly.KEEP_BUILDS, study.name
