"""GASLoC's claims G1, G2 and G3 read from their studies' reports
(``experiments.gasloc_claims``): labels parsed to (method, graph), each
docstring's rule on made-up reports whose verdict is known, and the documented
command at its smallest size."""

import json
import shlex
import subprocess
import sys

from configs.studies import gossip_g1
from experiments import gasloc_claims as gc
from tests import test_documented_commands as documented
from tests.helpers import ROOT

BETTER, EQUAL, WORSE = (-0.03, -0.04, -0.02), (0.001, -0.005, 0.007), (0.03, 0.02, 0.04)


def test_labels_parse_to_method_and_graph():
  assert gc.parse("gasloc_g0_ring_eta1p5_alpha0p5") == ("gasloc_g0", "ring")
  assert gc.parse("gasloc_exponential_eta1p0_gamma0p5_alpha1p0") == ("gasloc", "exponential")
  assert gc.parse("gossip_complete_weight1p0") == ("gossip", "complete")
  assert gc.parse("ddp_lr2p0x") is None and gc.parse("ddp") is None
  coarse = gossip_g1.get_config("coarse")
  parsed = [gc.parse(l) for l in coarse.labels if not l.startswith("ddp")]
  assert {m for m, _ in parsed} == set(gossip_g1.METHODS)
  assert {g for _, g in parsed} == set(gossip_g1.TOPOLOGIES)


def _report(by_graph: dict) -> dict:
  """A made-up G1 report: ``{graph: {baseline: (mean, low, high)}}`` of GASLoC
  minus each baseline; every method equal to DDP."""
  comparisons = []
  for graph, diffs in by_graph.items():
    for baseline in gc.BASELINES:
      mean, low, high = diffs.get(baseline, EQUAL)
      comparisons.append(dict(
          candidate=f"gasloc_{graph}_eta1p0_gamma0p5_alpha1p0",
          reference=f"{baseline}_{graph}_x1p0",
          tolerance=0.01,
          loss=dict(n=12, mean=mean, low=low, high=high),
      ))
    for method in gossip_g1.METHODS:
      comparisons.append(dict(
          candidate=f"{method}_{graph}_x1p0", reference="ddp_lr2p0x", tolerance=0.01,
          loss=dict(n=12, mean=EQUAL[0], low=EQUAL[1], high=EQUAL[2]),
      ))
  runs = {"ddp_lr2p0x": [dict(summary=dict(final_eval_tokens=583520))] * 12}
  return dict(comparisons=comparisons, runs=runs, seeds=list(range(100, 112)))


def _verdict(by_graph: dict) -> str:
  return gc.verdict(gc.reads(_report(by_graph)))


def test_the_rule():
  both = dict(gasloc_g0=BETTER, noloco=BETTER)
  assert _verdict(dict(ring=both, complete=both, matching={})) == "reproduced"
  # Better than both on one graph only: neither reproduced nor refuted.
  assert _verdict(dict(ring=both, complete={}, matching={})) == "inconclusive"
  # Better than both nowhere, matched on two graphs (equal, or a baseline better).
  one = dict(gasloc_g0=BETTER, noloco=WORSE)
  assert _verdict(dict(ring=one, complete={}, matching=dict(noloco=BETTER))) == "not reproduced"
  # gossip AdamW at the shared rate counts for nothing.
  assert _verdict(dict(ring=dict(gossip=BETTER), complete={})) == "not reproduced"
  wide = (0.0, -0.03, 0.03)
  assert _verdict(dict(ring=dict(gasloc_g0=wide, noloco=wide))) == "inconclusive"


def _g2_report(deltas: dict) -> dict:
  """A made-up G2 report: ``{method: (mean, low, high)}`` of its Δ against the
  frontier at equal syncs (tolerance 0.0084), every method 10% saved; on its
  three seeds each method is 0.01, 0.03, 0.05 above DiLoCo at H = 60 (by
  position, which would be wrong, 0.03 on each)."""
  comparisons, saved = [], {}
  seeds = [100, 101, 102]
  stats = {
      "diloco_h20": dict(syncs=[60.0, 0.0], seeds=seeds, loss_by_seed=[2.6, 2.6, 2.6]),
      "diloco_h60": dict(syncs=[20.0, 0.0], seeds=seeds, loss_by_seed=[2.70, 2.69, 2.68]),
  }
  for method, (mean, low, high) in deltas.items():
    stats[f"{method}_matching_x1p0"] = dict(
        syncs=[60.0, 0.0], seeds=seeds[::-1], loss_by_seed=[2.73, 2.72, 2.71]
    )
    label = f"{method}_matching_x1p0"
    loss = dict(n=10, mean=mean, low=low, high=high)
    comparisons += [
        dict(candidate=label, reference="frontier", tolerance=0.0084, loss=loss),
        dict(candidate=label, reference="diloco_h20", tolerance=0.0084, loss=loss),
    ]
    ci = dict(mean=0.1, low=0.05, high=0.15)
    saved[label] = dict(saved=ci, saved_t=ci)
  # GASLoC against each baseline too, as the report has them (not read by G2).
  against = dict(n=10, mean=-0.5, low=-0.6, high=-0.4)
  comparisons += [
      dict(candidate="gasloc_matching_x1p0", reference=f"{m}_matching_x1p0",
           tolerance=0.0084, loss=against)
      for m in deltas if m != "gasloc"
  ]
  return dict(comparisons=comparisons, syncs_saved=saved, seeds=list(range(100, 110)),
              stats=stats, frontier=["diloco_h20", "diloco_h60"])


def _g2(deltas: dict) -> str:
  _, verdict = gc.g2_section(_g2_report(deltas), "shakespeare")
  return verdict


def test_the_g2_rule():
  inside, above, wide = (0.0, -0.005, 0.006), (0.03, 0.02, 0.04), (0.01, -0.01, 0.03)
  assert _g2(dict(gasloc=inside, gasloc_g0=above, noloco=wide)) == "reproduced"
  assert _g2(dict(gasloc=inside, gasloc_g0=inside, noloco=above)) == "half reproduced"
  assert _g2(dict(gasloc=above, gasloc_g0=inside)) == "not reproduced"
  assert _g2(dict(gasloc=wide, gasloc_g0=above)) == "inconclusive"
  assert gc.over_corpora(dict(shakespeare="reproduced", python="reproduced")) == "reproduced"
  assert gc.over_corpora(dict(shakespeare="reproduced", python=None)) == (
      "inconclusive (shakespeare: reproduced, python: not reported)"
  )


NETS = ("0.1gbps_50ms", "1gbps_50ms")
G2_LABELS = dict(gasloc="gasloc_matching_x1p0", noloco="noloco_matching_x1p0")


def _row(reached, low=None, high=None, seeds=10):
  row = dict(reached=reached, seeds=seeds)
  if low is not None:
    row.update(speedup=(low * high) ** 0.5, low=low, high=high)
  return row


def _time(gasloc: dict, noloco=None) -> dict:
  """A made-up time-to-target result of G2's report: GASLoC's rows by network,
  NoLoCo's (default: missing the target everywhere) and DiLoCo's own."""
  noloco = noloco or {n: _row(0) for n in NETS}
  rows = {n: {G2_LABELS["gasloc"]: gasloc[n], G2_LABELS["noloco"]: noloco[n],
              "diloco_h20": _row(10, 1.0, 1.0)} for n in NETS}
  steps = {G2_LABELS["gasloc"]: _row(10, 0.5, 0.7), G2_LABELS["noloco"]: _row(0),
           "diloco_h20": _row(10, 1.0, 1.0)}
  return dict(reference="diloco_h20", seeds=list(range(100, 110)), speedups=rows, steps=steps)


def _g3(gasloc: dict) -> str:
  return gc.g3_section(_time(gasloc), "shakespeare")[1]["equal_steps"]


def test_the_g3_rule():
  """N2's rule: faster on some network (every seed, interval above 1)."""
  assert _g3({NETS[0]: _row(10, 1.2, 1.6), NETS[1]: _row(10, 0.8, 0.9)}) == "reproduced"
  assert _g3({NETS[0]: _row(10, 0.9, 1.3), NETS[1]: _row(10, 0.8, 0.9)}) == "inconclusive"
  assert _g3({NETS[0]: _row(3), NETS[1]: _row(10, 0.8, 1.0)}) == "not reproduced"
  # Reaching on half the seeds is neither a miss on most nor a speed-up.
  assert _g3({NETS[0]: _row(5), NETS[1]: _row(0)}) == "inconclusive"
  lines, _ = gc.g3_section(_time({n: _row(0) for n in NETS}), "shakespeare")
  assert "| 0.1 Gbit/s, 50ms | reached 0/10 | reached 0/10 |" in lines
  assert "| in inner steps (any network) | 0.59× [0.50, 0.70] | reached 0/10 |" in lines


def test_g3_shows_the_longer_phase_as_a_measurement_not_a_verdict():
  missed = _time({n: _row(0) for n in NETS})
  label = G2_LABELS["gasloc"] + "_steps2400"
  longer = dict(
      reference="diloco_h20", seeds=list(range(100, 110)),
      speedups={NETS[0]: {label: _row(10, 1.5, 2.0)}, NETS[1]: {label: _row(10, 0.9, 1.2)}},
      steps={"diloco_h20": _row(10, 1.0, 1.0), label: _row(10, 0.4, 0.6)},
  )
  lines, reads = gc.g3_section(missed, "shakespeare", longer)
  # GASLoC given twice the steps is faster everywhere, but DiLoCo was not given
  # them: the column is shown, and the verdict is the equal-steps one alone.
  assert reads == dict(equal_steps="not reproduced")
  assert "| 0.1 Gbit/s, 50ms | reached 0/10 | reached 0/10 | 1.73× [1.50, 2.00] |" in lines
  assert any("a measurement, not a verdict" in l for l in lines)
  assert not any("reproduced**" in l for l in lines if "reached" not in l and "G3 on" not in l)


def test_documented_command_at_its_smallest_size(tmp_path):
  """The command both studies' docstrings show, on made-up reports (and before
  any): each claim's folder gets its ``claims.md``."""
  commands = {
      c for w, c in documented.documented_commands() if "gasloc_claims" in c
  }
  assert len(commands) == 1, commands
  args = shlex.split(commands.pop())[1:]
  g1, g2 = tmp_path / "g1", tmp_path / "g2"
  args[args.index("--g1") + 1], args[args.index("--g2") + 1] = str(g1), str(g2)
  run = lambda: subprocess.run(  # noqa: E731
      [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  proc = run()
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Not reported yet." in (g1 / "claims.md").read_text()
  assert "## python: not reported yet" in (g2 / "claims.md").read_text()
  (g1 / "report").mkdir()
  both = dict(gasloc_g0=BETTER, noloco=BETTER)
  (g1 / "report" / "summary.json").write_text(json.dumps(_report(dict(ring=both, exponential=both))))
  (g2 / "shakespeare" / "report").mkdir(parents=True)
  g2_report = _g2_report(dict(gasloc=(0.0, -0.005, 0.006), noloco=(0.03, 0.02, 0.04)))
  (g2 / "shakespeare" / "report" / "summary.json").write_text(json.dumps(g2_report))
  (g2 / "shakespeare" / "time").mkdir()
  time = _time({NETS[0]: _row(10, 1.2, 1.6), NETS[1]: _row(10, 0.8, 0.9)})
  (g2 / "shakespeare" / "time" / "time_to_target.json").write_text(json.dumps(time))
  proc = run()
  assert proc.returncode == 0, proc.stderr[-3000:]
  text = (g1 / "claims.md").read_text()
  assert "| ring | -0.0300 [-0.0400, -0.0200] better |" in text
  assert "12 fresh seeds (100-111), final eval of 583,520 tokens" in text
  assert "**G1: reproduced.**" in text
  assert (g1 / gc.G1_PLOT).read_bytes().startswith(b"\x89PNG")
  text = (g2 / "claims.md").read_text()
  assert (
      "| gasloc | +0.0000 [-0.0050, +0.0060] | equal | yes | +10.0% [+5.0%, +15.0%] | "
      "+0.0000 [-0.0050, +0.0060] |" in text
  )
  # Paired by seed, not by position (the made-up seeds run in reverse order).
  assert "Δ vs `diloco_h60` (20 syncs) |" in text
  assert "| +0.0300 [-0.0197, +0.0797] |" in text
  assert "G2 on shakespeare: **reproduced**." in text
  assert "**G2: inconclusive (shakespeare: reproduced, python: not reported).**" in text
  assert "| 0.1 Gbit/s, 50ms | 1.39× [1.20, 1.60] | reached 0/10 |" in text
  assert "G3 on shakespeare: **reproduced**." in text
  assert "**G3: inconclusive (shakespeare: reproduced, python: not reported)** (at equal steps)." in text
