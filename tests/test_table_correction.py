"""AutoLoCo's ``correction=table``: the outer pair of each round interpolated from
DiLoCo's pairs tuned at fixed intervals (``autoloco.tuned``)."""

import chex
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import autoloco
from autoloco_jax.runtime import replicas
from tests.helpers import config, run_rounds

K, H_REF = 2, 4


def autoloco_config(correction, tuned=()):
  c = config("autoloco", K=K, h=H_REF, lr=0.7, momentum=0.8)
  c.autoloco.h_ref = H_REF
  c.autoloco.correction = correction
  c.autoloco.tuned = tuned
  return c


def test_tuned_pairs_become_ratio_points_of_the_reference_pair():
  hp = registry.from_config(
      autoloco_config("table", ((8, 1.05, 0.6), (4, 0.7, 0.8), (2, 0.56, 0.9)))
  )
  assert isinstance(hp, autoloco.AutoLoCo)
  np.testing.assert_allclose(
      hp.table, ((0.5, 0.8, 0.9), (1.0, 1.0, 0.8), (2.0, 1.5, 0.6)), rtol=1e-12
  )


def test_the_rounds_apply_the_interpolated_pair():
  tuned = ((2, 0.56, 0.9), (4, 0.7, 0.8), (8, 1.05, 0.6))
  mesh = replicas.make_mesh(K, 1)
  # H = 6 is halfway from 4 to 8, H = 2 the first point, H = 12 beyond the last.
  _, _, ms = run_rounds(autoloco_config("table", tuned), mesh, [4, 6, 2, 12])
  lr, mom = [float(m["outer_lr"]) for m in ms], [float(m["outer_momentum"]) for m in ms]
  ratios = [float(m["ratio"]) for m in ms]
  rs, scales, betas = (0.5, 1.0, 2.0), (0.8, 1.0, 1.5), (0.9, 0.8, 0.6)
  np.testing.assert_allclose(lr, [0.7 * np.interp(r, rs, scales) for r in ratios], rtol=1e-6)
  np.testing.assert_allclose(mom, [np.interp(r, rs, betas) for r in ratios], rtol=1e-6)
  # The rounds' ratios follow H / H_ref (a constant inner lr after warm-up would
  # make them exact; the warm-up and decay move them a little).
  assert ratios[0] == 1.0 and ratios[1] > 1.0 and ratios[2] < 1.0 and ratios[3] > 2.0
  assert mom[3] == pytest.approx(0.6) and lr[3] == pytest.approx(0.7 * 1.5)


def test_a_table_of_the_reference_pair_alone_is_adaptation_without_correction():
  mesh = replicas.make_mesh(K, 1)
  hs = [4, 6, 2, 7]
  _, s_table, m_table = run_rounds(autoloco_config("table", ((H_REF, 0.7, 0.8),)), mesh, hs)
  _, s_none, m_none = run_rounds(autoloco_config("none"), mesh, hs)
  chex.assert_trees_all_equal(s_table.params_K, s_none.params_K)
  chex.assert_trees_all_equal(s_table.algo, s_none.algo)
  assert [m["outer_momentum"] for m in m_table] == [np.float32(0.8)] * len(hs)


@pytest.mark.parametrize(
    "tuned, match",
    [
        ((), "table"),  # correction=table needs the tuned pairs
        (((8, 1.0, 0.6),), "reference point"),  # no pair at H_ref
        (((4, 0.7, 0.5), (8, 1.0, 0.6)), "reference point"),  # not the run's own pair
        (((4, 0.7),), r"\(H, alpha, beta\)"),
    ],
)
def test_bad_tuned_pairs_are_refused(tuned, match):
  with pytest.raises(ValueError, match=match):
    registry.from_config(autoloco_config("table", tuned))


def test_tuned_pairs_without_the_table_correction_are_refused():
  with pytest.raises(ValueError, match="correction='table'"):
    registry.from_config(autoloco_config("momentum", ((4, 0.7, 0.8),)))
