"""NoLoCo's claims read from the N1 study's reports (``experiments.noloco_claims``):
each rule the study's docstring fixed, on made-up reports whose verdict is known,
DDP's bytes from the clock against the ring's formula, and the documented command
at its smallest size (one worker count reported)."""

import json
import os
import shlex
import subprocess
import sys

import pytest

from autoloco_jax.model import transformer
from autoloco_jax.sim import clock as clock_lib, planner
from configs.studies import noloco_n1
from experiments import noloco_claims as nc, time_to_target
from tests import test_documented_commands as documented
from tests.helpers import ROOT

NOLOCO, DILOCO = "noloco_matching_alpha1p0_beta0p5", "diloco_alpha0p7_beta0p7"
NETS = ("1gbps_10ms", "1gbps_50ms")


def test_n1_rule():
  assert nc.n1_verdict({4: "better", 8: "inconclusive", 16: None}) == "reproduced"
  assert nc.n1_verdict({4: "better", 8: "worse", 16: "worse"}) == "inconclusive"
  assert nc.n1_verdict({4: "worse", 8: "equal", 16: None}) == "not reproduced"
  assert nc.n1_verdict({4: "worse", 8: None, 16: None}) == "inconclusive"


def _row(reached, seeds=6, low=None, high=None):
  row = dict(reached=reached, seeds=seeds)
  if low is not None:
    row.update(speedup=(low * high) ** 0.5, low=low, high=high)
  return row


def test_n2_rule():
  missed = {n: _row(0) for n in NETS}
  slower = {n: _row(6, low=0.8, high=0.95) for n in NETS}
  faster = {NETS[0]: _row(6, low=0.9, high=1.1), NETS[1]: _row(6, low=1.2, high=1.5)}
  mixed = {NETS[0]: _row(6, low=0.9, high=1.1), NETS[1]: _row(2)}
  assert nc.n2_verdict({4: missed, 8: slower, 16: faster}) == "reproduced"
  assert nc.n2_verdict({4: missed, 8: slower, 16: missed}) == "not reproduced"
  assert nc.n2_verdict({4: missed, 8: slower, 16: None}) == "inconclusive"
  assert nc.n2_verdict({4: missed, 8: mixed, 16: missed}) == "inconclusive"
  # Reaching on every seed is not enough: the interval must lie above 1.
  assert not time_to_target.faster_somewhere({NETS[0]: _row(6, low=0.99, high=1.3)})


def test_n3_rule():
  assert nc.n3_verdict({4: 30.0, 8: 35.0, 16: 37.5}) == "reproduced"
  assert nc.n3_verdict({4: 1.5, 8: 1.75, 16: 1.88}) == "not reproduced"
  assert nc.n3_verdict({4: 1.5, 8: 2.5, 16: 1.9}) == "inconclusive"
  assert nc.n3_verdict({4: 30.0, 8: None, 16: 37.5}) == "inconclusive"


def test_ddp_sends_a_ring_all_reduce_every_step_and_gasloc_one_model_a_round():
  """DDP's bytes from the clock's accounting of its rounds equal the ring's
  formula, ``T · 2(K − 1)/K · 4P``, at the study's size; GASLoC's on the
  study's matching graph, ``T/H · 4P``."""
  config = next(iter(noloco_n1.get_config("coarse,k4").runs.values()))
  num_params = transformer.param_count(planner.abstract_params(config.model))
  expected = config.total_steps * 2 * 3 / 4 * num_params * config.comm.bytes_per_param
  assert nc.planned_bytes(4, "ddp") == pytest.approx(expected, rel=1e-12)
  assert expected == config.total_steps * clock_lib.ring_allreduce(num_params, 4).bytes
  # GASLoC on the study's matching graph: one model to one peer every H steps.
  rounds = config.total_steps // config.interval.h
  assert nc.planned_bytes(4, "gasloc") == pytest.approx(
      rounds * num_params * config.comm.bytes_per_param, rel=1e-12
  )


def _write(root, k, loss, reached, bytes_=(51.2e6, 76.8e6), time_own=True, longer=True):
  """A made-up report at ``K = k``: NoLoCo minus DiLoCo ``loss = (mean, low,
  high)``; NoLoCo ``reached`` DiLoCo's loss on that many of 6 seeds, and at
  twice the steps on every seed, 1.5-3 times sooner."""
  mean, low, high = loss
  report = dict(
      comparisons=[
          dict(
              candidate=NOLOCO,
              reference=DILOCO,
              tolerance=0.01,
              loss=dict(n=6, mean=mean, low=low, high=high),
          )
      ],
      runs={l: [dict(summary=dict(final_eval_tokens=583520))] * 6 for l in (NOLOCO, DILOCO)},
  )
  cost = lambda b: dict(bytes=b, idle=1.0, time=10.0)  # noqa: E731
  time = dict(
      seeds=list(range(100, 106)),
      eval_tokens=583520,
      speedups={n: {NOLOCO: _row(reached), DILOCO: _row(6, low=1, high=1)} for n in NETS},
      costs={n: {NOLOCO: cost(bytes_[0]), DILOCO: cost(bytes_[1])} for n in NETS},
  )
  own = dict(time, speedups={n: {DILOCO: _row(6, low=0.5, high=0.8)} for n in NETS})
  files = [("report", "summary.json", report), ("time", "time_to_target.json", time)]
  twice = dict(time, speedups={
      n: {f"{NOLOCO}_steps1200": _row(6, low=1.5, high=3.0), DILOCO: _row(6, low=1, high=1)}
      for n in NETS
  }, steps={f"{NOLOCO}_steps1200": _row(6, low=0.81, high=1.0), DILOCO: _row(6, low=1, high=1)})
  if time_own:
    files.append(("time_to_noloco", "time_to_target.json", own))
  if longer:
    files.append(("longer_time", "time_to_target.json", twice))
  for folder, name, content in files:
    os.makedirs(os.path.join(root, f"k{k}", folder), exist_ok=True)
    with open(os.path.join(root, f"k{k}", folder, name), "w") as f:
      json.dump(content, f)


def test_every_worker_count_reported_gives_each_claim_its_verdict(tmp_path):
  """Higher at every ``K``, DiLoCo's loss never reached, 1.5× fewer bytes than
  DiLoCo and 30× fewer than DDP: N1 and N2 not reproduced; N3 reproduced against
  DDP, not against DiLoCo. NoLoCo's speed-up to its own loss is DiLoCo's
  inverted (DiLoCo's 0.5-0.8 over NoLoCo: NoLoCo's 1.25-2)."""
  for k in noloco_n1.WORKERS:
    _write(str(tmp_path), k, (0.04, 0.02, 0.06), reached=0)
  planned = dict(
      ddp={k: 30 * 51.2e6 for k in noloco_n1.WORKERS},
      gasloc={k: 51.2e6 for k in noloco_n1.WORKERS},
  )
  text, verdicts = nc.claims(str(tmp_path), planned=planned)
  assert verdicts == dict(
      N1="not reproduced",
      N2=dict(equal_steps="not reproduced"),
      N3=dict(diloco="not reproduced", ddp="reproduced"),
  )
  assert "| 1 Gbit/s, 50ms | reached 0/6 | 1.58× [1.25, 2.00] | 2.12× [1.50, 3.00] |" in text
  assert "| 4 | 51.2 | 51.2 | 76.8 | 1536 | 1.50× | 30.0× |" in text
  assert "(DiLoCo's steps over NoLoCo's; below 1: NoLoCo needs more): 0.90× [0.81, 1.00]" in text
  assert "583,520" in text


def test_documented_command_at_its_smallest_size(tmp_path):
  """The N1 study docstring's command, on one reported worker count: the others
  are rows that say so, and no verdict is drawn from one ``K``."""
  (command,) = [
      c for w, c in documented.documented_commands()
      if w.endswith("noloco_n1.py") and "noloco_claims" in c
  ]
  args = shlex.split(command)[1:]
  args[args.index("--dir") + 1] = str(tmp_path)
  _write(str(tmp_path), 4, (0.04, 0.02, 0.06), reached=0, time_own=False, longer=False)
  proc = subprocess.run(
      [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  text = (tmp_path / "claims.md").read_text()
  assert "| 8 | not reported |" in text and "K = 16: not reported." in text
  assert "| 1 Gbit/s, 50ms | reached 0/6 | not run | not run |" in text
  assert "**N1: inconclusive.**" in text and "**N2, by the rule (equal steps): inconclusive.**" in text
