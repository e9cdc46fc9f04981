"""GASLoC's claim G1 read from the G1 study's report (``experiments.gasloc_claims``):
labels parsed to (method, graph), the docstring's rule on made-up reports whose
verdict is known, and the documented command at its smallest size."""

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


def test_documented_command_at_its_smallest_size(tmp_path):
  """The G1 study docstring's command on a made-up report (and before one)."""
  (command,) = [
      c for w, c in documented.documented_commands()
      if w.endswith("gossip_g1.py") and "gasloc_claims" in c
  ]
  args = shlex.split(command)[1:]
  args[args.index("--dir") + 1] = str(tmp_path)
  run = lambda: subprocess.run(  # noqa: E731
      [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  proc = run()
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Not reported yet." in (tmp_path / "claims.md").read_text()
  (tmp_path / "report").mkdir()
  both = dict(gasloc_g0=BETTER, noloco=BETTER)
  report = _report(dict(ring=both, exponential=both))
  (tmp_path / "report" / "summary.json").write_text(json.dumps(report))
  proc = run()
  assert proc.returncode == 0, proc.stderr[-3000:]
  text = (tmp_path / "claims.md").read_text()
  assert "| ring | -0.0300 [-0.0400, -0.0200] better |" in text
  assert "12 fresh seeds (100-111), final eval of 583,520 tokens" in text
  assert "**G1: reproduced.**" in text
