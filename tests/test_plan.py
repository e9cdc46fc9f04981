"""The planner (``autoloco_jax/sim/planner.py``, ``experiments/plan.py``) is the
training clock: a run's logged simulated time is its prediction, exactly; and
its bandwidths for a compute utilization match the streaming DiLoCo paper's
simulation where the two models make the same assumptions."""

import math
import os
import re
import shlex

import pytest

from autoloco_jax.model import transformer
from autoloco_jax.run import metrics as metrics_lib, trainer
from autoloco_jax.sim import network as network_lib, planner
from configs import autoloco, common, streaming
from tests import helpers
from tests.helpers import ROOT


def _tiny_run(get_config, tmp_path, **network):
  cfg = get_config("tiny")
  cfg.network.step_time = 0.01
  cfg.network.name = "hetero"
  cfg.log.progress = False
  for key, value in network.items():
    cfg.network[key] = value
  trainer.train_and_evaluate(cfg, str(tmp_path))
  return cfg, metrics_lib.read(os.path.join(tmp_path, "metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "get_config, overlap", [(autoloco.get_config, 0.0), (streaming.get_config, 2 / 3)]
)
def test_a_runs_simulated_time_is_the_planners_prediction(get_config, overlap, tmp_path):
  """AutoLoCo (adaptive H: replayed from the run's metrics.jsonl) and
  streaming DiLoCo (fragments, overlap, fp4: its H planned open loop), on the
  two-site network, with and without hiding behind the backward pass."""
  cfg, records = _tiny_run(get_config, tmp_path, overlap_backward=overlap)
  summary = records[-1]
  params = planner.abstract_params(cfg.model)
  assert transformer.param_count(params) == summary["num_params"]
  algo = planner.build(cfg, params)
  hs = None
  if algo.next_round_steps is None:
    hs = planner.h_sequence(os.path.join(tmp_path, "metrics.jsonl"))
  clock = planner.clock_on(
      cfg, network_lib.network_from_config(cfg.network, cfg.num_workers),
      summary["num_params"], cfg.network.step_time,
  )
  first_steps = algo.first_round_steps
  predicted = planner.simulate(algo, clock, cfg.total_steps, first_steps, hs)
  assert predicted["sim_time"] == summary["sim_time"]
  assert predicted["bytes_per_worker"] == summary["bytes_per_worker"]
  assert predicted["syncs"] == summary["syncs"]


# Streaming DiLoCo, arXiv 2501.18512 (v1), Table 4 ("Simulation: ... Gbit/s to
# reach a compute utilization CU = 50/80/90/95/99%"; H = 100, fragments of 3
# layers, MFU 60%, every reduction overlapped with the backward pass), read from
# the arXiv HTML as rendered in deep-diver/ai-paper-reviewer. Rows: model size
# -> (layers, step time, {method: Gbit/s}); "streaming" is the paper's
# "Streaming DiLoCo w/ overlapped com.", "streaming-fp4" "... FP4 com.".
PUBLISHED = {
    1e9: (24, 0.1, {
        "ddp": (86.8, 152.6, 184.2, 222.3, 569.0),
        "diloco": (1.4, 6.2, 13.3, 23.3, 86.8),
        "streaming": (1.4, 4.3, 6.2, 9.1, 11.0),
        "streaming-fp4": (0.4, 0.9, 1.7, 2.0, 3.0),
    }),
    1e10: (48, 0.8, {
        "ddp": (104.8, 222.3, 222.3, 268.3, 471.5),
        "diloco": (1.7, 7.5, 16.0, 33.9, 104.8),
        "streaming": (1.7, 3.6, 5.2, 6.2, 7.5),
        "streaming-fp4": (0.4, 0.9, 1.4, 1.4, 1.7),
    }),
    1e11: (108, 4.9, {
        "ddp": (184.2, 323.8, 390.7, 390.7, 471.5),
        "diloco": (3.0, 11.0, 23.3, 49.4, 184.2),
        "streaming": (1.7, 3.6, 4.3, 5.2, 5.2),
        "streaming-fp4": (0.5, 0.9, 1.1, 1.1, 1.4),
    }),
}
CUS = (0.5, 0.8, 0.9, 0.95, 0.99)
# The paper reports the first point of a log grid (ratio 10^(4/49) = 1.21, our
# reading of its values) at or above the need, rounded to 0.1 Gbit/s; we agree
# within that grid step and rounding, except where the models differ by design
# (docs/planning.md): DDP at 99% (the paper releases gradients layer by layer,
# so the last layers' reduction cannot hide; ours hides the whole reduction
# behind the backward pass) and 100B streaming at 50% (our fragment slots are
# whole steps: 36 fragments in H = 100 sync every 2 steps, a period of 72).
TOLERANCE = 1.35
BY_DESIGN = {(1e9, "ddp", 0.99), (1e10, "ddp", 0.99), (1e11, "streaming", 0.5)}


def _published_setting():
  """Our reading of the paper's assumptions: 2 sites (its main experiments'
  M = 2; the table does not say), bf16 payloads, no latency, a 32k vocabulary,
  2/3 of a step (the backward pass) to hide behind, overlap tau = 1."""
  cfg = common.base("tiny")
  cfg.num_workers = 2
  cfg.comm.bytes_per_param = 2
  cfg.interval.h = 100
  cfg.total_steps = 10**6
  cfg.network.bandwidth_gbps, cfg.network.latency_ms = (1.0,), (0.0,)
  cfg.network.overlap_backward = 2 / 3
  return cfg


@pytest.mark.slow
@pytest.mark.parametrize("size", sorted(PUBLISHED))
def test_bandwidth_for_a_utilization_matches_streaming_diloco_table_4(size):
  layers, step_time, rows = PUBLISHED[size]
  base = _published_setting()
  params = planner.abstract_params(planner.model_for_size(base.model, size, layers, 32000))
  n = transformer.param_count(params)
  assert abs(n / size - 1) < 0.05
  for name, published in rows.items():
    cfg = planner.method_config(base, name, layers // 3)
    algo = planner.build(cfg, params)
    net = network_lib.network_from_config(cfg.network, 2)

    def cu(m):
      clock = planner.clock_on(cfg, planner.scaled_network(net, m), n, step_time)
      first = algo.first_round_steps
      return planner.simulate(algo, clock, cfg.total_steps, first, horizon=300)["utilization"]

    for u, theirs in zip(CUS, published):
      ours = planner.required_factor(cu, u, lo=1e-2, hi=1e4, rel=1e-2)
      if (size, name, u) in BY_DESIGN:
        continue
      assert 1 / TOLERANCE <= ours / theirs <= TOLERANCE, (size, name, u, ours, theirs)


def _documented(path):
  """``(command, printed table)`` pairs of a docs page: each ```` ``` ```` block
  that starts with ``$ python -m experiments.plan``."""
  with open(os.path.join(ROOT, path)) as f:
    text = f.read()
  out = []
  for block in re.findall(r"```\n\$ (python -m experiments\.plan.*?)```", text, re.S):
    command, _, printed = block.partition("\n")
    while command.endswith("\\"):
      more, _, printed = printed.partition("\n")
      command = command[:-1] + more
    out.append((command, printed.strip()))
  return out


@pytest.mark.slow
@pytest.mark.parametrize("command, printed", _documented("docs/planning.md"))
def test_the_worked_examples_print_what_the_docs_show(command, printed, monkeypatch):
  """In this process (the planner needs no process of its own)."""
  monkeypatch.chdir(ROOT)
  python, m, module, *args = shlex.split(command)
  assert (python, m) == ("python", "-m"), command
  assert helpers.run_main(module, *args).strip() == printed


def _docstring_commands():
  import ast

  with open(os.path.join(ROOT, "experiments", "plan.py")) as f:
    doc = ast.get_docstring(ast.parse(f.read()))
  doc = re.sub(r"\\\n\s*", " ", doc)
  return re.findall(r"python -m experiments\.plan[^\n]*", doc)


@pytest.mark.slow
@pytest.mark.parametrize("command", _docstring_commands())
def test_the_docstring_commands_run(command, monkeypatch):
  """At their smallest: two methods, a short horizon; in this process."""
  monkeypatch.chdir(ROOT)
  python, m, module, *args = shlex.split(command)
  assert (python, m) == ("python", "-m"), command
  args += ["--plan.methods=diloco,streaming", "--plan.horizon=200"]
  printed = helpers.run_main(module, *args)
  assert re.search(r"^streaming +[0-9.e+]+ +[01]\.\d{3} ", printed, re.M), printed


def test_required_bandwidth_by_bisection():
  assert planner.required_factor(lambda m: m / (1 + m), 0.5) == pytest.approx(1.0, rel=2e-3)
  assert planner.required_factor(lambda m: 0.3, 0.5) == math.inf


def test_a_model_of_a_target_size():
  cfg = common.base("tiny")
  m = planner.model_for_size(cfg.model, 1e10, 48, 32000)
  n = transformer.param_count(planner.abstract_params(m))
  assert m["num_layers"] == 48 and m["d_model"] % 128 == 0 and abs(n / 1e10 - 1) < 0.02
