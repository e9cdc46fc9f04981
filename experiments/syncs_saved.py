"""The paper's metric: the syncs a tuned baseline needs to reach a method's loss.

For each seed ``s`` the tuned DiLoCo runs (one per fixed ``H``, each with its
tuned outer pair) give points ``(S_{s,i}, L_{s,i})``: syncs and final loss. The
frontier is a **pooled log-linear fit**, one slope for every seed and one
intercept per seed (ordinary least squares with seed fixed effects):

    L_{s,i} = a_s + b log S_{s,i},
    b = sum_{s,i} (x_{s,i} - xbar_s)(L_{s,i} - Lbar_s) / sum_{s,i} (x_{s,i} - xbar_s)^2,
    a_s = Lbar_s - b xbar_s,               x = log S.

It is monotone by construction when ``b < 0`` (more syncs, lower loss; a fit
with ``b >= 0`` is a flat frontier and no saving is defined). The pooled slope
borrows strength across seeds, where a per-seed curve through six noisy points
is often non-monotone; its residual spread is reported so the fit can be judged.

For a candidate with ``(S_s, L_s)`` on seed ``s``:

* syncs DiLoCo needs for that loss: ``S*_s = exp((L_s - a_s) / b)``;
* **syncs saved at equal loss**: ``1 - S_s / S*_s``;
* **loss against the frontier at equal syncs**: ``L_s - (a_s + b log S_s)``.

The interval is a paired bootstrap over seeds: resample the seeds with
replacement, refit the frontier on the resample (so the fit's uncertainty is in
the interval), take the mean over the resample; the 2.5% and 97.5% quantiles of
those means are the 95% interval. With few seeds the bootstrap has few distinct
resamples (10 for 3 seeds) and its percentile interval is too narrow, so the
paired Student-t interval of the per-seed values (``seed_stats.paired_interval``;
it holds the frontier fixed) is reported beside it, and :func:`widest` is the
interval a verdict should read: the union of the two.

"Equal quality" is tied to the frontier's slope: the tolerance is the loss
DiLoCo loses for ``10%`` fewer syncs in that cell, ``|b| ln(1/0.9)``, so one
tolerance means the same in a flat cell and a steep one.

A second frontier model checks that a verdict does not hang on the log-linear
shape: the **pooled monotone fit** (``model="monotone"``) keeps the seed
intercepts and replaces the line by any non-increasing curve ``g``,
piecewise linear in ``log S`` through the frontier's sync counts:

    L_{s,i} = a_s + g(x_i),  g_1 >= g_2 >= ... (x ascending),

fitted by least squares: with every seed on the same sync counts, ``g`` is the
isotonic (non-increasing) regression of the column means of the seed-centred
losses and ``a_s = Lbar_s`` (isotonic regression keeps the mean). It follows a
frontier that is flat over part of its range where the line cannot. ``S*`` is the
fewest syncs at which ``a_s + g`` reaches the candidate's loss (where ``g`` is flat
at that loss, its start: the baseline's best case); outside ``g``'s range no
``S*`` is defined (no extrapolation), so its saving is the mean over the seeds
whose loss the frontier reaches, their count beside it (a seed below the
frontier's most-syncs point drops out, which lowers the saving: the check errs
against the method).

Which shape the data support is tested, not assumed: :func:`lack_of_fit` is
the classical F-test of the line against a free level at every sync count
(seed intercepts in both), ``F = ((RSS_line - RSS_free) / (I - 2)) /
(RSS_free / ((S - 1)(I - 1)))``.

One reading for every study (:func:`reading`): the line's saving, unless the
F-test rejects the line (``p < 0.05``); then the monotone fit's, unless the
candidate's loss lies on one of its **flat stretches** (sync counts whose means
ran the wrong way and were pooled into one level, :func:`flat_stretches`): there
a few thousandths of loss move ``S*`` across the whole stretch, so the saving is
not read at all (neither a saving nor a cost) and the loss at equal syncs
decides. "On" a stretch means the candidate's seed-centred mean loss
``mean_s (L_s - a_s)`` lies within the tolerance of its level.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from experiments import seed_stats

#: Fewer syncs whose loss cost defines "equal quality" (see ``tolerance``); also
#: the tolerance of a syncs-saved verdict (:func:`reading`).
TOLERANCE_FRACTION = 0.10
#: The lack-of-fit test's level below which the line is rejected (:func:`reading`).
LINE_REJECTED_BELOW = 0.05
BOOTSTRAP_SAMPLES = 10_000


def fit_frontier(
    syncs_SxI: np.ndarray, loss_SxI: np.ndarray
) -> tuple[np.ndarray, float, float]:
  """``(a_S, b, residual_sd)``: the pooled log-linear frontier of the module
  docstring over ``S`` seeds and ``I`` fixed intervals."""
  x = np.log(np.asarray(syncs_SxI, np.float64))
  y = np.asarray(loss_SxI, np.float64)
  if x.shape != y.shape or x.ndim != 2 or x.shape[1] < 2:
    raise ValueError(f"need [seeds, >= 2 intervals] arrays, got {x.shape} and {y.shape}")
  xc = x - x.mean(axis=1, keepdims=True)
  yc = y - y.mean(axis=1, keepdims=True)
  denominator = float((xc * xc).sum())
  if denominator == 0:
    raise ValueError("the frontier's runs all have the same sync count")
  b = float((xc * yc).sum() / denominator)
  a = y.mean(axis=1) - b * x.mean(axis=1)
  residuals = y - (a[:, None] + b * x)
  dof = max(y.size - x.shape[0] - 1, 1)
  return a, b, float(math.sqrt((residuals**2).sum() / dof))


def fit_monotone_frontier(
    syncs_SxI: np.ndarray, loss_SxI: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
  """``(a_S, x_I, g_I, residual_sd)``: the pooled monotone frontier of the module
  docstring, ``L = a_s + g(log S)``, with ``x_I`` the log sync counts ascending
  and ``g_I`` non-increasing. Every seed must have the same sync counts."""
  from scipy import optimize

  x = np.log(np.asarray(syncs_SxI, np.float64))
  y = np.asarray(loss_SxI, np.float64)
  if x.shape != y.shape or x.ndim != 2 or x.shape[1] < 2:
    raise ValueError(f"need [seeds, >= 2 intervals] arrays, got {x.shape} and {y.shape}")
  order = np.argsort(x[0])
  x, y = x[:, order], y[:, order]
  if not np.allclose(x, x[0]):
    raise ValueError("the monotone frontier needs the same sync counts on every seed")
  centred = y - y.mean(axis=1, keepdims=True)
  g = optimize.isotonic_regression(centred.mean(axis=0), increasing=False).x
  a = y.mean(axis=1)
  residuals = y - (a[:, None] + g)
  dof = max(y.size - x.shape[0] - len(np.unique(g)) + 1, 1)
  return a, x[0], g, float(math.sqrt((residuals**2).sum() / dof))


def flat_stretches(x_I: np.ndarray, g_I: np.ndarray) -> list[tuple[float, float, float]]:
  """``(level, syncs_from, syncs_to)`` of each stretch of the monotone frontier
  ``(x_I, g_I)`` (log syncs ascending) where two or more sync counts were pooled
  into one level: their means ran the wrong way (more syncs, higher loss)."""
  out, start = [], 0
  for j in range(1, len(g_I) + 1):
    if j == len(g_I) or not math.isclose(g_I[j], g_I[start], rel_tol=0.0, abs_tol=1e-12):
      if j - start > 1:
        out.append((float(g_I[start]), float(np.exp(x_I[start])), float(np.exp(x_I[j - 1]))))
      start = j
  return out


def on_flat_stretch(
    frontier_syncs_SxI: np.ndarray,
    frontier_loss_SxI: np.ndarray,
    loss_S: np.ndarray,
    tolerance_bpb: float,
) -> list[float] | None:
  """``[syncs_from, syncs_to]`` of the monotone frontier's flat stretch whose
  level lies within ``tolerance_bpb`` of the candidate's seed-centred mean loss
  (module docstring), or None where it lies on none."""
  a_S, x_I, g_I, _ = fit_monotone_frontier(frontier_syncs_SxI, frontier_loss_SxI)
  v = float(np.mean(np.asarray(loss_S, np.float64) - a_S))
  for level, low, high in flat_stretches(x_I, g_I):
    if abs(v - level) <= tolerance_bpb:
      return [low, high]
  return None


def reading(line: dict, monotone: dict, fit: dict) -> dict:
  """The syncs-saved reading of one candidate, the same rule in every study
  (module docstring): ``dict(model, saved, delta, verdict, why)``.

  ``line`` and ``monotone`` are :func:`bootstrap` entries of the two frontier
  models (``monotone["flat_stretch"]`` from :func:`on_flat_stretch`), ``fit``
  the line's :func:`lack_of_fit`. ``saved`` and ``delta`` are the intervals read
  (:func:`widest`); ``saved`` is None on a flat stretch. ``verdict`` reads
  ``saved`` by ``seed_stats.verdict`` (higher is better; "equal" inside
  ``±TOLERANCE_FRACTION``), and is "inconclusive" where no saving is read.
  """
  rejected = math.isfinite(fit["p"]) and fit["p"] < LINE_REJECTED_BELOW
  entry, model = (monotone, "monotone") if rejected else (line, "loglinear")
  why = (
      f"the line is rejected (F test p = {fit['p']:.4f}): the monotone frontier"
      if rejected
      else "the line (its F test does not reject it)"
  )
  flat = entry.get("flat_stretch") if rejected else None
  saved = None if flat else widest(entry)
  if flat:
    why += (
        f", flat from {flat[0]:.0f} to {flat[1]:.0f} syncs at this loss: no saving"
        " or cost is read; the loss at equal syncs decides"
    )
  readable = saved is not None and math.isfinite(saved["low"])
  return dict(
      model=model,
      saved=saved,
      delta=widest(entry, "delta"),
      verdict=(
          seed_stats.verdict(saved, TOLERANCE_FRACTION, lower_is_better=False)
          if readable
          else "inconclusive"
      ),
      why=why,
  )


def lack_of_fit(syncs_SxI: np.ndarray, loss_SxI: np.ndarray) -> dict:
  """``dict(F, df1, df2, p)``: the F-test of the pooled log-linear frontier
  against free column levels (module docstring); every seed must have the same
  sync counts. A small ``p`` says the line misses the frontier's shape."""
  from scipy import stats

  fs = np.asarray(syncs_SxI, np.float64)
  y = np.asarray(loss_SxI, np.float64)
  if not np.allclose(fs, fs[0]):
    raise ValueError("the lack-of-fit test needs the same sync counts on every seed")
  n_seeds, n_points = y.shape
  a, b, _ = fit_frontier(fs, y)
  rss_line = float(((y - (a[:, None] + b * np.log(fs))) ** 2).sum())
  centred = y - y.mean(axis=1, keepdims=True)
  rss_free = float(((centred - centred.mean(axis=0)) ** 2).sum())
  df1, df2 = n_points - 2, (n_seeds - 1) * (n_points - 1)
  if df1 < 1 or df2 < 1 or rss_free <= 1e-15 * float((centred**2).sum()):
    return dict(F=float("nan"), df1=df1, df2=df2, p=float("nan"))
  f = ((rss_line - rss_free) / df1) / (rss_free / df2)
  return dict(F=float(f), df1=df1, df2=df2, p=float(stats.f.sf(f, df1, df2)))


def per_seed_monotone(
    a_S: np.ndarray, x_I: np.ndarray, g_I: np.ndarray, syncs_S: np.ndarray, loss_S: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """:func:`per_seed` for the monotone frontier ``(a_S, x_I, g_I)``: NaN saving
  and ``S*`` for a seed whose loss lies outside the frontier's range."""
  syncs_S = np.asarray(syncs_S, np.float64)
  loss_S = np.asarray(loss_S, np.float64)
  delta = loss_S - (a_S + np.interp(np.log(syncs_S), x_I, g_I))
  v = loss_S - a_S
  eps = 1e-12  # a loss on a level of g up to rounding reaches it
  reach = (v <= g_I[0] + eps) & (v >= g_I[-1] - eps)
  j = np.argmax(g_I[None, :] <= v[:, None] + eps, axis=1)  # first point at or below v
  j0 = np.maximum(j - 1, 0)
  drop = g_I[j0] - g_I[j]
  frac = np.clip(np.where(drop > 0, (g_I[j0] - v) / np.where(drop > 0, drop, 1.0), 0.0), 0, 1)
  needed = np.where(reach, np.exp(x_I[j0] + frac * (x_I[j] - x_I[j0])), np.nan)
  return 1.0 - syncs_S / needed, delta, needed


def _loglinear(fs, fl, syncs_S, loss_S):
  """``(saved_S, delta_S, needed_S, slope, residual_sd)`` against the log-linear fit."""
  a, b, resid = fit_frontier(fs, fl)
  return (*per_seed(a, b, syncs_S, loss_S), b, resid)


def _monotone(fs, fl, syncs_S, loss_S):
  """The same against the monotone fit; its slope is ``g``'s chord."""
  a, x, g, resid = fit_monotone_frontier(fs, fl)
  slope = float((g[-1] - g[0]) / (x[-1] - x[0]))
  return (*per_seed_monotone(a, x, g, syncs_S, loss_S), slope, resid)


#: The frontier models :func:`bootstrap` takes, by name.
MODELS = {"loglinear": _loglinear, "monotone": _monotone}


def tolerance(slope: float, fraction: float = TOLERANCE_FRACTION) -> float:
  """The loss the frontier loses for ``fraction`` fewer syncs: ``|b| ln(1/(1-f))``."""
  return abs(slope) * math.log(1.0 / (1.0 - fraction))


def per_seed(
    a_S: np.ndarray, b: float, syncs_S: np.ndarray, loss_S: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(saved_S, delta_S, needed_S)``: each seed's syncs saved at equal loss,
  loss against the frontier at equal syncs, and the syncs ``S*`` the frontier
  needs for the seed's loss (NaN savings and ``S*`` where ``b >= 0``)."""
  syncs_S = np.asarray(syncs_S, np.float64)
  loss_S = np.asarray(loss_S, np.float64)
  delta = loss_S - (a_S + b * np.log(syncs_S))
  if b >= 0:
    nan = np.full_like(delta, np.nan)
    return nan, delta, nan
  needed = np.exp((loss_S - a_S) / b)
  return 1.0 - syncs_S / needed, delta, needed


def bootstrap(
    frontier_syncs_SxI: np.ndarray,
    frontier_loss_SxI: np.ndarray,
    syncs_S: np.ndarray,
    loss_S: np.ndarray,
    samples: int = BOOTSTRAP_SAMPLES,
    level: float = 0.95,
    seed: int = 0,
    model: str = "loglinear",
) -> dict:
  """The candidate against the frontier, paired by seed, with bootstrap intervals.

  Returns ``dict(model, n, slope, residual_sd, tolerance, saved, delta,
  saved_t, delta_t, per_seed_saved, per_seed_delta, needed_in_range)``;
  ``saved`` and ``delta`` are ``dict(mean, low, high, half_width)`` (bootstrap
  quantiles, ``level``), ``saved_t`` and ``delta_t`` the paired t-intervals, and
  ``needed_in_range`` counts the seeds whose ``S*`` lies inside the range of
  the frontier's own sync counts (outside it the log-linear fit extrapolates;
  the monotone one defines no ``S*``, and its saving is over the others).
  ``model`` is a key of :data:`MODELS`.
  """
  if model not in MODELS:
    raise ValueError(f"unknown frontier model {model!r}; expected one of {sorted(MODELS)}")
  fit = MODELS[model]
  fs = np.asarray(frontier_syncs_SxI, np.float64)
  fl = np.asarray(frontier_loss_SxI, np.float64)
  syncs_S, loss_S = np.asarray(syncs_S, np.float64), np.asarray(loss_S, np.float64)
  n = len(syncs_S)
  saved, delta, needed, b, resid = fit(fs, fl, syncs_S, loss_S)
  rng = np.random.default_rng(seed)
  means = np.empty((samples, 2))
  # With few seeds most resamples repeat (27 ordered picks of 3 seeds): each
  # distinct pick is fitted once, the same float operations in the same order.
  fitted: dict[bytes, tuple[float, float]] = {}
  for j in range(samples):
    pick = rng.integers(0, n, n)
    key = pick.tobytes()
    if key not in fitted:
      saved_j, delta_j, *_ = fit(fs[pick], fl[pick], syncs_S[pick], loss_S[pick])
      fitted[key] = _mean(saved_j), delta_j.mean()
    means[j] = fitted[key]
  tail = (1.0 - level) / 2.0
  in_range = (needed >= fs.min(axis=1)) & (needed <= fs.max(axis=1))
  return dict(
      model=model,
      n=n,
      slope=b,
      residual_sd=resid,
      tolerance=tolerance(b),
      saved=_interval(_mean(saved), means[:, 0], tail),
      delta=_interval(delta.mean(), means[:, 1], tail),
      saved_t=_t_interval(saved, level),
      delta_t=_t_interval(delta, level),
      per_seed_saved=saved.tolist(),
      per_seed_delta=delta.tolist(),
      needed_in_range=int(in_range.sum()),
  )


def _mean(values: np.ndarray) -> float:
  """The mean of the finite values (NaN if none): a seed without ``S*`` drops out."""
  finite = values[np.isfinite(values)]
  return float(finite.mean()) if len(finite) else float("nan")


def _interval(mean: float, draws: np.ndarray, tail: float) -> dict:
  draws = draws[np.isfinite(draws)]
  if not len(draws) or not math.isfinite(mean):
    return dict(mean=mean, low=float("nan"), high=float("nan"), half_width=float("nan"))
  low, high = np.quantile(draws, [tail, 1.0 - tail])
  return dict(
      mean=float(mean), low=float(low), high=float(high),
      half_width=float((high - low) / 2.0),
  )


def _t_interval(per_seed_S: np.ndarray, level: float) -> dict:
  """The paired t-interval over the seeds with a finite value (NaN under 2)."""
  finite = per_seed_S[np.isfinite(per_seed_S)]
  if len(finite) < 2:
    nan = float("nan")
    return dict(mean=nan, low=nan, high=nan, half_width=nan)
  ci = seed_stats.paired_interval(finite, level)
  return {k: ci[k] for k in ("mean", "low", "high", "half_width")}


def widest(entry: dict, quantity: str = "saved") -> dict:
  """The union of ``entry``'s bootstrap and t-intervals for ``quantity``
  (``"saved"`` or ``"delta"``): the interval a verdict reads. An entry read
  back from JSON may hold ``"nan"``; an interval that is NaN (a t-interval over
  fewer than 2 seeds) or missing (written before t-intervals existed) adds
  nothing to the union."""
  boot = entry[quantity]
  t = entry.get(f"{quantity}_t") or boot
  lows = [float(i["low"]) for i in (boot, t) if math.isfinite(float(i["low"]))]
  highs = [float(i["high"]) for i in (boot, t) if math.isfinite(float(i["high"]))]
  low, high = (min(lows), max(highs)) if lows and highs else (math.nan, math.nan)
  return dict(mean=float(boot["mean"]), low=low, high=high, half_width=(high - low) / 2)


def frontier_arrays(
    runs: dict[str, list[dict]], frontier: Sequence[str], key: str = "final_eval_bpb"
) -> tuple[np.ndarray, np.ndarray]:
  """``(syncs_SxI, loss_SxI)``: the ``frontier`` labels' runs, seeds by rows."""
  fs = np.array([[r["summary"]["syncs"] for r in runs[l]] for l in frontier]).T
  fl = np.array([[r["summary"][key] for r in runs[l]] for l in frontier]).T
  return fs, fl


def from_runs(
    runs: dict[str, list[dict]],
    frontier: Sequence[str],
    candidate: str,
    key: str = "final_eval_bpb",
    model: str = "loglinear",
) -> dict:
  """:func:`bootstrap` of ``candidate`` against the ``frontier`` labels, their
  runs paired by seed (every label on the same seeds, in the same order), with
  the frontier ``model``."""
  seeds = [r["seed"] for r in runs[candidate]]
  for label in frontier:
    if [r["seed"] for r in runs[label]] != seeds:
      raise ValueError(f"{label} and {candidate} are not on the same seeds")
  fs, fl = frontier_arrays(runs, frontier, key)
  loss_S = [r["summary"][key] for r in runs[candidate]]
  out = bootstrap(fs, fl, [r["summary"]["syncs"] for r in runs[candidate]], loss_S, model=model)
  if model == "monotone":
    out["flat_stretch"] = on_flat_stretch(fs, fl, loss_S, out["tolerance"])
  return dict(out, candidate=candidate, frontier=list(frontier), seeds=seeds)
