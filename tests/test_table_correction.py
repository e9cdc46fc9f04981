"""AutoLoCo's ``correction=table``: the outer pair of each round interpolated from
DiLoCo's pairs tuned at fixed intervals (``autoloco.tuned``)."""

import chex
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import autoloco
from autoloco_jax.runtime import inner, replicas
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


def _schedule_ratios(cfg, hs) -> list[float]:
  """``r_t = S_t / S_ref,t`` from the inner schedule alone, in float64: the
  round's sum of ``η(s)`` over the reference interval's from the same step."""
  eta = inner.schedule(cfg.inner, cfg.total_steps)
  lr = lambda s0, n: sum(float(eta(s)) for s in range(s0, s0 + n))
  starts = np.cumsum([0] + list(hs))
  out = [lr(s0, h) / lr(s0, H_REF) for s0, h in zip(starts, hs)]
  return [1.0 if abs(r - 1.0) <= 1e-5 else r for r in out]  # outer's snap to 1


def test_the_rounds_apply_the_interpolated_pair():
  tuned = ((2, 0.56, 0.9), (4, 0.7, 0.8), (8, 1.05, 0.6))
  mesh = replicas.make_mesh(K, 1)
  # H = 6 is halfway from 4 to 8, H = 2 the first point, H = 12 beyond the last.
  hs, cfg = [4, 6, 2, 12], autoloco_config("table", tuned)
  _, _, ms = run_rounds(cfg, mesh, hs)
  lr, mom = [float(m["outer_lr"]) for m in ms], [float(m["outer_momentum"]) for m in ms]
  # The ratios from the schedule, not from the run's own log: the run must log them.
  ratios = _schedule_ratios(cfg, hs)
  np.testing.assert_allclose([float(m["ratio"]) for m in ms], ratios, rtol=1e-5)
  rs, scales, betas = (0.5, 1.0, 2.0), (0.8, 1.0, 1.5), (0.9, 0.8, 0.6)
  np.testing.assert_allclose(lr, [0.7 * np.interp(r, rs, scales) for r in ratios], rtol=1e-5)
  np.testing.assert_allclose(mom, [np.interp(r, rs, betas) for r in ratios], rtol=1e-5)
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
