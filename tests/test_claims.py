"""Claims as records (``configs/claims.py``) read by ``experiments.claims``:
every verdict word of both signs through the one reader, each compound rule on
each case, every record's labels and tolerance against its committed report,
and the headline numbers the hand-written page stated, recomputed."""

import ast
import json
import math

import pytest

from configs import claims as records
from configs.claims import Claim, Compound, at_least, every, some
from experiments import claims as ec
from experiments import syncs_saved
from tests.helpers import ROOT

LEAVES = [leaf for c in records.CLAIMS for leaf in ec.leaves(c)]


def _write(tmp_path, name: str, content: dict) -> str:
  (tmp_path / name).write_text(json.dumps(content))
  return name


def _delta_report(low: float, high: float) -> dict:
  loss = dict(n=10, mean=(low + high) / 2, low=low, high=high)
  c = dict(candidate="a", reference="b", loss=loss, tolerance=0.01)
  return dict(comparisons=[c], worker_comparisons=[dict(c, loss=dict(loss, low=low + 1, high=high + 1))],
              seeds=list(range(100, 110)), stats=dict(a={}, b={}))


@pytest.mark.parametrize("low, high, word", [
    (-0.03, -0.02, "better"), (0.02, 0.03, "worse"), (-0.005, 0.008, "equal"),
    (0.001, 0.009, "equal"), (-0.02, 0.005, "inconclusive"),
])
def test_delta_reads_every_word(tmp_path, low, high, word):
  path = _write(tmp_path, "s.json", _delta_report(low, high))
  claim = Claim("X", "x", "a", "b", path, "delta", tolerance=0.01)
  r = ec.read(claim, str(tmp_path))
  assert (r.verdict, r.n, r.seeds[0]) == (word, 10, 100)
  assert r.outcome == {"better": "reproduced", "inconclusive": "inconclusive"}.get(word, "not reproduced")
  worker = ec.read(Claim("X", "x", "a", "b", path, "delta", 0.01, model="worker"), str(tmp_path))
  assert worker.low == low + 1  # the model worker 0 holds is read from its own list


def _saved_report(saved) -> dict:
  entry = dict(n=12, frontier=["f"], saved=saved)
  reading = dict(model="monotone", saved=saved, delta=None, verdict="-",
                 why="the line is rejected, flat from 100 to 150 syncs" if saved is None else "")
  return dict(syncs_saved=dict(a=entry), syncs_saved_reading=dict(a=reading),
              seeds=list(range(12)), stats=dict(a={}), frontier=["f"])


@pytest.mark.parametrize("low, high, word", [
    (0.12, 0.3, "better"), (-0.3, -0.12, "worse"), (-0.05, 0.08, "equal"), (-0.05, 0.2, "inconclusive"),
])
def test_syncs_saved_reads_both_signs(tmp_path, low, high, word):
  """Higher is better for a saving: the same rule with ``lower_is_better=False``."""
  path = _write(tmp_path, "s.json", _saved_report(dict(mean=(low + high) / 2, low=low, high=high)))
  claim = Claim("X", "x", "a", "frontier", path, "syncs_saved", tolerance=0.1)
  assert ec.read(claim, str(tmp_path)).verdict == word


@pytest.mark.parametrize(
    "verdict, high, claimed, want",
    [
        ("better", 0.248, 0.27, "not reproduced"),  # a saving, smaller than claimed
        ("better", 0.278, 0.27, "reproduced"),  # the claimed value inside
        ("better", 0.248, None, "reproduced"),  # no magnitude claimed
        ("worse", 0.5, 0.27, "not reproduced"),
        ("inconclusive", 0.5, 0.27, "inconclusive"),
    ],
)
def test_a_claimed_magnitude_holds_only_where_the_interval_reaches_it(verdict, high, claimed, want):
  assert ec.outcome(verdict, ("better",), high, claimed) == want


def test_a_flat_stretch_is_neither_a_saving_nor_a_cost(tmp_path):
  path = _write(tmp_path, "s.json", _saved_report(None))
  r = ec.read(Claim("X", "x", "a", "frontier", path, "syncs_saved", tolerance=0.1), str(tmp_path))
  assert r.verdict == "inconclusive" and math.isnan(r.mean)
  assert "flat stretch of the frontier (100-150 syncs)" in r.text


def _row(reached, low=None, high=None, seeds=6):
  row = dict(reached=reached, seeds=seeds)
  if low is not None:
    row.update(speedup=(low * high) ** 0.5, low=low, high=high)
  return row


@pytest.mark.parametrize("row, word", [
    (_row(6, 1.2, 1.5), "better"), (_row(6, 0.7, 0.9), "worse"), (_row(6, 0.9, 1.2), "inconclusive"),
    (_row(0), "worse"), (_row(2), "worse"), (_row(3), "inconclusive"), (_row(5), "inconclusive"),
])
def test_time_to_target_reads_speedups_and_misses(tmp_path, row, word):
  """Missing the target on most seeds is a speed-up of 0; on half, open."""
  result = dict(speedups={"1gbps_50ms": dict(a=row)}, seeds=list(range(6)))
  path = _write(tmp_path, "t.json", result)
  claim = Claim("X", "x", "a", "b", path, "time_to_target", 0.0, network="1gbps_50ms")
  assert ec.read(claim, str(tmp_path)).verdict == word


@pytest.mark.parametrize("quantity, every_step, threshold, word, ratio", [
    ("bytes_ratio", False, 2.0, "worse", 1.5), ("bytes_ratio", True, 2.0, "better", 30.0),
    ("peak_ratio", False, 1.5, "equal", 1.5), ("peak_ratio", False, 1.0, "better", 1.5),
])
def test_ratios_read_against_their_threshold(tmp_path, quantity, every_step, threshold, word, ratio):
  """DDP's bytes: the reference's all-reduce on each of its 600 steps, not its 30 syncs."""
  stats = dict(a=dict(bytes_per_worker=[2.0], peak_bandwidth=[2.0], seeds=[0, 1]),
               b=dict(bytes_per_worker=[3.0], peak_bandwidth=[3.0], syncs=[30.0]))
  runs = dict(b=[dict(eval=dict(step=[300, 600]))])
  path = _write(tmp_path, "s.json", dict(stats=stats, runs=runs, seeds=[0, 1]))
  claim = Claim("X", "x", "a", "b", path, quantity, 0.0, threshold=threshold,
                every_step=every_step, holds_if=("better", "equal"))
  r = ec.read(claim, str(tmp_path))
  assert (r.verdict, r.mean) == (word, pytest.approx(ratio))


H, F, O = "reproduced", "not reproduced", "inconclusive"


@pytest.mark.parametrize("rule, outcomes, expected", [
    (every(), [H, H, H], H), (every(), [H, F, H], F), (every(), [H, O, H], O),
    (every(fails="all"), [H, F], O), (every(fails="all"), [F, F], F), (every(fails="all"), [H, H], H),
    (some(), [F, O, H], H), (some(), [F, F, F], F), (some(), [F, O, F], O),
    (at_least(2), [H, H, F, F], H), (at_least(2), [H, F, F, F], F), (at_least(2), [H, O, F, F], O),
    # G1's rule: two graphs hold; two fail (and fewer than two hold); else open.
    (at_least(2, fails=2), [H, H, O, O], H), (at_least(2, fails=2), [F, F, O, O], F),
    (at_least(2, fails=2), [F, O, O, O], O), (at_least(2, fails=2), [H, H, F, F], O),
    # N1's: one K holds; two fail.
    (at_least(1, fails=2), [F, F, F], F), (at_least(1, fails=2), [H, O, O], H),
    (at_least(1, fails=2), [F, O, O], O),
])
def test_each_compound_rule_reads_each_case(rule, outcomes, expected):
  assert ec.combine(rule, outcomes) == expected


def test_a_compound_reads_its_parts_by_the_same_reader(tmp_path):
  better = _write(tmp_path, "b.json", _delta_report(-0.03, -0.02))
  wide = _write(tmp_path, "w.json", _delta_report(-0.03, 0.02))
  part = lambda p, name: Claim("X", "x", "a", "b", p, "delta", 0.01, name=name)  # noqa: E731
  compound = Compound("X", "x", at_least(2), (part(better, "one"), part(better, "two"), part(wide, "three")))
  r = ec.read(compound, str(tmp_path))
  assert r.outcome == H and [pr.verdict for _, pr in r.parts] == ["better", "better", "inconclusive"]
  nested = Compound("Y", "y", every(), (compound, part(wide, "four")))
  assert ec.read(nested, str(tmp_path)).outcome == O


def test_every_claims_labels_are_in_its_report():
  missing = {leaf.id + " " + leaf.name: ec.missing_labels(leaf, ROOT) for leaf in LEAVES}
  assert not {k: v for k, v in missing.items() if v}


def test_every_claim_is_well_formed():
  ids = [c.id for c in records.CLAIMS]
  assert len(ids) == len(set(ids))
  for leaf in LEAVES:
    assert leaf.quantity in records.QUANTITIES and leaf.model in records.MODELS
    assert set(leaf.holds_if) <= {"better", "equal", "worse"}
  for c in records.CLAIMS:
    assert c.fixed_at and c.command.startswith(("python -m", "experiments/")) and c.regime
    assert not c.after_report or c.note, f"{c.id}: fixed after a report, and no note says why"
  listed = {i for s in records.SECTIONS for i in s.claims}
  assert listed == set(ids)
  assert {i for _, group in records.WHEN for i in group} <= set(ids)


def test_tolerances_are_the_reports():
  """A loss tolerance is the one its report fixed before it ran; a saving's is
  the frontier reading's ±10% of syncs."""
  for leaf in LEAVES:
    if leaf.quantity == "syncs_saved":
      assert leaf.tolerance == syncs_saved.TOLERANCE_FRACTION
    elif leaf.quantity == "delta":
      report = ec.load(leaf.report, ROOT)
      key = "comparisons" if leaf.model == "headline" else "worker_comparisons"
      (c,) = [c for c in report[key] if (c["candidate"], c["reference"]) == (leaf.candidate, leaf.reference)]
      assert leaf.tolerance == pytest.approx(c["tolerance"], abs=1e-7), leaf


def test_syncs_saved_reads_as_the_frontier_reading_does():
  for leaf in LEAVES:
    if leaf.quantity == "syncs_saved":
      expected = ec.frontier_reading(ec.load(leaf.report, ROOT), leaf.candidate)["verdict"]
      assert ec.read(leaf, ROOT).verdict == expected, leaf.id


def test_the_records_are_pure_data():
  """``configs/claims.py`` does no I/O and imports nothing but dataclasses."""
  tree = ast.parse(open(records.__file__).read())
  names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
  names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
  assert names == {"__future__", "dataclasses"}
  calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
  assert not calls & {"open", "print", "eval", "exec"}


#: Numbers the hand-written docs/results.md stated before issue 63 (copied from
#: that page, now docs/results_history.md, as a regression check): (id, part
#: path, the estimate as the generated page shows it, its reading).
OLD_PAGE = [
    ("A1", (), "+5.8% [-2.6%, +14.8%] (monotone)", "inconclusive"),
    ("A2", (), "+17.3% [+9.8%, +24.8%] (line)", "better"),
    ("A3", (), "+19.9% [+11.3%, +27.8%] (monotone)", "better"),
    ("A4", (), "+6.6% [-2.6%, +15.9%] (line)", "inconclusive"),
    ("A5", (), "+1.4% [-4.1%, +7.8%] (monotone)", "equal"),
    ("A2h", (), "-0.0096 [-0.0155, -0.0038]", "better"),
    ("A5h", (), "+0.0094 [+0.0004, +0.0185]", "worse"),
    ("A11", (), "-27.6% [-32.1%, -23.1%] (monotone)", "worse"),
    ("A12", (), "+0.0198 [+0.0154, +0.0243]", "worse"),
    ("A13", (), "-1.6% [-6.8%, +4.4%] (monotone)", "equal"),
    ("A14", (), "-78.9% [-95.2%, -62.6%] (monotone)", "worse"),
    ("C1", ("bytes ratio",), "103.3×", "better"),
    ("C1", ("Δ loss",), "-0.0082 [-0.0147, -0.0017]", "better"),
    ("C3", ("peak ratio",), "10.4×", "better"),
    ("C6", ("Δ loss",), "+0.0007 [-0.0023, +0.0038]", "inconclusive"),
    ("N1", ("K = 4",), "+0.0377 [+0.0158, +0.0595]", "worse"),
    ("N1", ("K = 16",), "+0.1185 [+0.1024, +0.1345]", "worse"),
    ("N1w", ("K = 8",), "+0.0821 [+0.0746, +0.0896]", "worse"),
    ("N3p", ("K = 16",), "37.5×", "better"),
    ("N3d", ("K = 4",), "1.50×", "worse"),
    ("G1", ("complete", "gasloc_g0"), "+0.0203 [+0.0050, +0.0357]", "worse"),
    ("G1", ("matching", "noloco"), "-0.0243 [-0.0308, -0.0178]", "better"),
    ("G1w", ("complete", "noloco"), "+0.0263 [+0.0011, +0.0515]", "worse"),
    ("G2", ("shakespeare", "gasloc"), "+0.1369 [+0.1249, +0.1489]", "worse"),
    ("G2w", ("python", "gasloc"), "+0.1465 [+0.1335, +0.1596]", "worse"),
]


def _part(reading, path):
  for name in path:
    (reading,) = [r for p, r in reading.parts if p.name == name]
  return reading


def test_the_old_pages_numbers_are_recomputed_from_the_records():
  readings = {c.id: ec.read(c, ROOT) for c in records.CLAIMS if c.id in {i for i, *_ in OLD_PAGE}}
  for i, path, text, word in OLD_PAGE:
    r = _part(readings[i], path)
    assert (r.text, r.verdict) == (text, word), (i, path)
