r"""A claim (``configs.claims``) read from its report: an estimate, its 95%
interval, the seeds, and a verdict by the one rule of every table,
``seed_stats.verdict`` (equal inside ``±tolerance``, else better or worse when
the interval excludes 0, else inconclusive). The quantities:

* ``delta``: candidate minus reference in final bits/byte, the report's paired
  t interval (``comparisons``, or ``worker_comparisons`` for the model worker 0
  holds); against ``"frontier"`` the per-seed tuned frontier at equal syncs.
* ``syncs_saved``: ``1 − S/S*`` against the tuned frontier, by the one frontier
  reading (``syncs_saved.reading``: the line unless its F test rejects it, then
  the monotone fit); on a flat stretch no saving or cost is read.
* ``time_to_target``: the speed-up ``T_ref / T`` to the reference's final loss
  on one network (``experiments.time_to_target``), read on ``log``: above 1 is
  better. A run that misses the target on most seeds has no time: speed-up 0.
* ``bytes_ratio`` / ``peak_ratio``: the reference's bytes per worker (peak
  bandwidth) over the candidate's, an exact accounting, read as
  ``log(ratio / threshold)`` with no spread; ``every_step``: the reference's
  all-reduce on every step (DDP), ``bytes · T / syncs``.

A claim holds where its reading is one of ``holds_if``, fails where it is
another resolved reading, and is open (inconclusive) otherwise; a compound
counts its parts by its ``Rule``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re

from configs.claims import CLAIMS, Claim, Compound, Rule
from experiments import runlog, seed_stats

NAN = float("nan")


@dataclasses.dataclass(frozen=True)
class Reading:
  """A claim's reading: the estimate and interval, the seeds, the interval's
  verdict (better, equal, worse, inconclusive), the claim's outcome
  (reproduced, not reproduced, inconclusive; both empty for a measurement),
  the estimate as shown, and a compound's parts."""

  mean: float
  low: float
  high: float
  n: int
  verdict: str
  outcome: str
  text: str
  seeds: tuple = ()
  parts: tuple = ()


@functools.lru_cache(maxsize=None)
def load(path: str, root: str = ".") -> dict:
  """A claim's report (``runlog.read_summary``: its readings beside it too)."""
  out = runlog.read_summary(os.path.join(root, path))
  if out is None:
    raise FileNotFoundError(os.path.join(root, path))
  return out


def _f(x) -> float:
  return float(x)  # JSON's "nan" strings too (report._finite)


def _ci(mean: float, low: float, high: float) -> dict:
  return dict(mean=mean, low=low, high=high)


def fmt(ci: dict, spec: str = "{:+.4f}") -> str:
  """``mean [low, high]``."""
  return f"{spec.format(_f(ci['mean']))} [{spec.format(_f(ci['low']))}, {spec.format(_f(ci['high']))}]"


def frontier_reading(summary: dict, label: str) -> dict:
  """``syncs_saved.reading`` of ``label``, as its report stored it
  (``report.collect``; the summaries written before it were completed once by
  ``report.complete``)."""
  return summary["syncs_saved_reading"][label]


def _delta(claim: Claim, summary: dict) -> tuple[dict, str, int, str]:
  key = "comparisons" if claim.model == "headline" else "worker_comparisons"
  (c,) = [
      c for c in summary.get(key) or ()
      if (c["candidate"], c["reference"]) == (claim.candidate, claim.reference)
  ]
  ci = {k: _f(c["loss"][k]) for k in ("mean", "low", "high")}
  return ci, seed_stats.verdict(ci, claim.tolerance), int(c["loss"]["n"]), fmt(ci)


def _syncs_saved(claim: Claim, summary: dict) -> tuple[dict, str, int, str]:
  r = frontier_reading(summary, claim.candidate)
  n = int(summary["syncs_saved"][claim.candidate]["n"])
  saved = r["saved"]
  if saved is None:  # a flat stretch: neither a saving nor a cost
    flat = re.search(r"flat from (\d+) to (\d+) syncs", r["why"])
    where = f" ({flat[1]}-{flat[2]} syncs)" if flat else ""
    return _ci(NAN, NAN, NAN), "inconclusive", n, f"on a flat stretch of the frontier{where}: not read"
  ci = {k: _f(saved[k]) for k in ("mean", "low", "high")}
  if not math.isfinite(ci["low"]):
    return ci, "inconclusive", n, "outside the frontier's range: not read"
  verdict = seed_stats.verdict(ci, claim.tolerance, lower_is_better=False)
  return ci, verdict, n, fmt(ci, "{:+.1%}") + f" ({'line' if r['model'] == 'loglinear' else 'monotone'})"


def _time(claim: Claim, result: dict) -> tuple[dict, str, int, str]:
  row = result["speedups"][claim.network][claim.candidate]
  reached, n = row["reached"], row["seeds"]
  if reached == n and "speedup" in row and math.isfinite(row["high"]):
    ci = _ci(row["speedup"], row["low"], row["high"])
    logs = {k: math.log(v / claim.threshold) for k, v in ci.items()}
    text = f"{ci['mean']:.2f}× [{ci['low']:.2f}, {ci['high']:.2f}]"
    return ci, seed_stats.verdict(logs, claim.tolerance, lower_is_better=False), n, text
  # Missing the target on most seeds is no time to it: a speed-up of 0.
  end = -math.inf if 2 * reached < n else math.inf
  verdict = seed_stats.verdict(dict(low=-math.inf, high=end), claim.tolerance, lower_is_better=False)
  return _ci(NAN, NAN, NAN), verdict, n, f"reached {reached}/{n}"


def _ratio(claim: Claim, summary: dict) -> tuple[dict, str, int, str]:
  key = "bytes_per_worker" if claim.quantity == "bytes_ratio" else "peak_bandwidth"
  stats = summary["stats"]
  ref = stats[claim.reference][key][0]
  if claim.every_step:  # one all-reduce of the model on every step, not every H
    steps = summary["runs"][claim.reference][0]["eval"]["step"][-1]
    ref *= steps / stats[claim.reference]["syncs"][0]
  ratio = ref / stats[claim.candidate][key][0]
  log = math.log(ratio / claim.threshold)
  verdict = seed_stats.verdict(dict(low=log, high=log), claim.tolerance, lower_is_better=False)
  n = len(stats[claim.candidate]["seeds"])
  return _ci(ratio, ratio, ratio), verdict, n, (f"{ratio:.1f}×" if ratio >= 10 else f"{ratio:.2f}×")


READERS = dict(
    delta=_delta, syncs_saved=_syncs_saved, time_to_target=_time,
    bytes_ratio=_ratio, peak_ratio=_ratio,
)


def outcome(verdict: str, holds_if: tuple[str, ...], high: float = NAN, claimed=None) -> str:
  """The claim's outcome from its interval's verdict. A claim of a magnitude
  (``paper_value``: 27% fewer syncs) holds only where the interval reaches it:
  a resolved saving whose interval ``high`` lies below the claimed value is a
  smaller effect than claimed, not the claim."""
  if verdict in holds_if:
    if claimed is not None and math.isfinite(high) and high < claimed:
      return "not reproduced"
    return "reproduced"
  return "inconclusive" if verdict == "inconclusive" else "not reproduced"


def combine(rule: Rule, outcomes: list[str]) -> str:
  """A compound's outcome: *reproduced* when ``rule.holds`` parts hold and
  fewer than ``rule.fails`` fail, *not reproduced* the other way round, else
  *inconclusive* (``configs.claims.Rule``)."""
  n = len(outcomes)
  need = n if rule.holds is None else rule.holds
  against = n - need + 1 if rule.fails is None else n if rule.fails == "all" else rule.fails
  held = outcomes.count("reproduced") >= need
  failed = outcomes.count("not reproduced") >= against
  if held != failed:
    return "reproduced" if held else "not reproduced"
  return "inconclusive"


def read(claim: Claim | Compound, root: str = ".") -> Reading:
  """``claim`` read from its report under ``root`` (module docstring)."""
  if isinstance(claim, Compound):
    parts = tuple((p, read(p, root)) for p in claim.parts)
    outcomes = [r.outcome for _, r in parts]
    result = combine(claim.rule, outcomes) if claim.verdict else ""
    held = outcomes.count("reproduced")
    text = f"{held} of {len(parts)} parts hold" if claim.verdict else "measurement"
    ns = [r.n for _, r in parts]
    seeds = sorted({s for _, r in parts for s in r.seeds})
    return Reading(NAN, NAN, NAN, max(ns), "", result, text, tuple(seeds), parts)
  report = load(claim.report, root)
  ci, verdict, n, text = READERS[claim.quantity](claim, report)
  if not claim.verdict:
    verdict = ""
  return Reading(
      ci["mean"], ci["low"], ci["high"], n, verdict,
      outcome(verdict, claim.holds_if, ci["high"], claim.paper_value) if claim.verdict else "",
      text, tuple(report["seeds"]),
  )


def by_id(claims=CLAIMS) -> dict[str, Claim | Compound]:
  return {c.id: c for c in claims}


def leaves(claim: Claim | Compound) -> list[Claim]:
  """Every :class:`Claim` a claim is made of."""
  if isinstance(claim, Claim):
    return [claim]
  return [leaf for p in claim.parts for leaf in leaves(p)]


def missing_labels(claim: Claim, root: str = ".") -> list[str]:
  """The candidate and reference labels ``claim`` names that its report lacks."""
  report = load(claim.report, root)
  if claim.quantity == "time_to_target":
    present = set(report["speedups"].get(claim.network, {}))
  else:
    present = set(report["stats"]) | ({"frontier"} if report.get("frontier") else set())
  return [label for label in (claim.candidate, claim.reference) if label not in present]
