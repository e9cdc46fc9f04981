"""A sync budget: the run may spend ``B`` syncs, and a shape places them.

Round ``r = 0 .. B-1`` gets a weight ``w_r`` from the shape, and the ``T``
inner steps are shared out in proportion,

    H_r ≈ T w_r / sum_j w_j,    sum_r H_r = T,  H_r >= 1,

rounded by largest remainders, so the run ends after exactly ``B`` syncs. The
shapes are front-loaded (long rounds first, then short ones), with
``ratio = w_0 / w_{B-1}``:

* ``constant``: ``w_r = 1`` (a fixed ``H = T / B``, the budget's control);
* ``linear``: ``w_r = ratio + (1 - ratio) r / (B - 1)``;
* ``exponential``: ``w_r = ratio^(1 - r / (B - 1))``;
* ``two_phase``: ``w_r = ratio`` for the first ``round(split B)`` rounds, 1 after.

The result is an open-loop schedule (``intervals.schedule``): the quadratic
synchronization rule's opposite, which grows ``H`` late (Gu et al., 2024).
"""

from __future__ import annotations

import numpy as np

SHAPES = ("constant", "linear", "exponential", "two_phase")


def weights(shape: str, syncs: int, ratio: float, split: float) -> np.ndarray:
  """``w_r`` for ``r = 0 .. syncs-1`` (see the module docstring; ``split`` acts
  on ``two_phase`` only)."""
  if shape not in SHAPES:
    raise ValueError(f"unknown budget shape {shape!r}; known: {SHAPES}")
  if ratio <= 0:
    raise ValueError(f"ratio must be > 0, got {ratio}")
  if not 0.0 <= split <= 1.0:
    raise ValueError(f"split must lie in [0, 1], got {split}")
  u = np.arange(syncs) / max(syncs - 1, 1)
  if shape == "constant":
    return np.ones(syncs)
  if shape == "linear":
    return ratio + (1.0 - ratio) * u
  if shape == "exponential":
    return ratio ** (1.0 - u)
  return np.where(np.arange(syncs) < round(split * syncs), ratio, 1.0)


def schedule(
    total_steps: int, syncs: int, shape: str, ratio: float, split: float
) -> tuple[int, ...]:
  """The ``syncs`` rounds' ``H`` over ``total_steps`` steps: positive ints summing
  to ``total_steps``, in proportion to :func:`weights` (``ratio`` and ``split``
  act on the shapes that use them; their defaults are ``config.interval``'s)."""
  if not 1 <= syncs <= total_steps:
    raise ValueError(
        f"a budget of {syncs} syncs needs 1 <= syncs <= total_steps = {total_steps}"
    )
  w = weights(shape, syncs, ratio, split)
  spare = total_steps - syncs  # every round gets 1 step, the rest by weight
  exact = spare * w / w.sum()
  h = np.floor(exact).astype(np.int64)
  order = np.argsort(-(exact - h), kind="stable")
  h[order[: spare - int(h.sum())]] += 1
  return tuple(int(x) + 1 for x in h)
