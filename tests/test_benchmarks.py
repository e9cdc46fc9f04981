"""The throughput benchmark's CI mode (``--quick``): every row present, every
ratio finite and positive, compilations counted. Structure only: these machines
are shared and noisy, so no speed is asserted here (the targets are reported in
``docs/benchmarks.md``, never checked by a test).

torch is optional (CI has none): without it the report says so in one line
(checked in CI, and with torch present by pretending it is missing). The
PyTorch model is checked against ``autoloco_jax/model/transformer.py`` (parameter
count, loss on the same weights, one optimizer step) wherever torch is, or
where the run asks for it (``AUTOLOCO_TORCH_TESTS=install``: these tests then
install it themselves, ``tests/torch_wheel.py``, which says why a fresh machine
does not by default).
"""

import copy
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import render
from autoloco_jax.runtime import replicas
from benchmarks.throughput import measure, pytorch, runners, timing
from benchmarks.throughput.workload import (
    algorithm_config,
    build_model,
    make_workload,
    synthetic_data,
)
from benchmarks.throughput.report import SAME_DEVICES, targets
from tests import torch_wheel
from tests import helpers
from tests.helpers import trains

HAS_TORCH = importlib.util.find_spec("torch") is not None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ("ddp", "diloco", "autoloco")
OPTIONAL = ("noloco", "gasloc")  # rows a config may refuse (then 'skipped: why')


@pytest.fixture(scope="module")
@trains
def quick(tmp_path_factory):
  """One run of ``python -m benchmarks.throughput --quick``: (result, markdown)."""
  out = tmp_path_factory.mktemp("throughput")
  # The benchmark runs on one device and starts its own child for N devices;
  # the test session's four simulated devices must not leak into it.
  env = helpers.user_env()
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.throughput",
          "--quick",
          f"--out={out / 'b.json'}",
          f"--md={out / 'b.md'}",
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=1200,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
  return json.loads((out / "b.json").read_text()), (out / "b.md").read_text()


def _positive(x) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _page(result: dict) -> str:
  """``docs/benchmarks.md`` with its blocks rendered from ``result``."""
  with open(os.path.join(ROOT, "docs", "benchmarks.md")) as f:
    return render.fill(f.read(), {"docs/benchmarks.json": result})


@pytest.mark.slow
def test_every_row_present(quick):
  result, _ = quick
  main = result["main"]
  names = [r["name"] for r in main["rows"]]
  assert names[0] == "reference"
  for name in ALGORITHMS + ("naive",):
    assert name in names
  # Every algorithm builds in the quick workload: NoLoCo and GASLoC are measured, not
  # skipped (a skip is only for a config the algorithm refuses, and a crash fails
  # the run itself: test_a_crash_in_a_row_fails_the_run).
  for name in OPTIONAL:
    assert name in names, (name, main["skipped"])
  assert main["skipped"] == {}
  sharded = result["sharded"]
  assert "error" not in sharded, sharded.get("error")
  assert sharded["devices"] == 2 and sharded["process"].startswith("child")
  # Every algorithm of the main process on the default path (N devices) too,
  # against the reference on the same 2 devices; the one-device reference is a
  # row of that process.
  names_at_2 = [r["name"] for r in sharded["rows"]]
  assert names_at_2[:2] == ["reference@2", "reference"]
  for name in ALGORITHMS:
    assert f"{name}@2" in names_at_2
  for name in OPTIONAL:
    assert f"{name}@2" in names_at_2, (name, sharded["skipped"])
  assert sharded["skipped"] == {}
  assert {n for n in names_at_2[2:] if not n.startswith("pytorch")} == {
      f"{n}@2"
      for n in names
      if n not in ("reference", "naive") and not n.startswith("pytorch")
  }


@pytest.mark.slow
def test_every_row_against_the_reference_on_its_own_devices(quick):
  """A one-device row against ``reference``, an ``@2`` row against the
  data-parallel ``reference@2`` of its own process: both raw rates, their
  ratio, and the ratio to the one-device reference of the same process."""
  result, _ = quick
  for row in result["main"]["rows"][1:]:
    assert row["reference"] == "reference" and row["equal_devices"], row["name"]
    assert row["devices"] == row["reference_devices"] == 1
  rows = {r["name"]: r for r in result["sharded"]["rows"]}
  assert rows["reference@2"]["devices"] == 2 and "ratio" not in rows["reference@2"]
  one = rows["reference"]  # what splitting the reference over 2 devices gains
  assert one["reference"] == "reference@2" and not one["equal_devices"]
  assert _positive(one["ratio"]) and "ratio_vs_one_device" not in one
  for name in ALGORITHMS:
    row = rows[f"{name}@2"]
    assert row["reference"] == "reference@2" and row["equal_devices"]
    assert row["devices"] == row["reference_devices"] == 2
    assert _positive(row["tokens_per_sec"])
    assert _positive(row["reference_tokens_per_sec"])
    assert _positive(row["ratio"]) and _positive(row["ratio_vs_one_device"])
    assert result["targets"][f"{name}@2 {SAME_DEVICES}"]["value"] == row["ratio"]


@pytest.mark.slow
def test_ratios_finite_and_positive(quick):
  result, _ = quick
  for block in (result["main"], result["sharded"]):
    assert _positive(block["matmul_peak_max"])
    for row in block["rows"]:
      assert _positive(row["tokens_per_sec"]), row["name"]
      assert _positive(row["model_flops_per_sec"]), row["name"]
      assert _positive(row["mfu_vs_measured_peak"]), row["name"]
      if row is not block["rows"][0]:  # the first is the bracketing reference
        assert _positive(row["ratio"]), row["name"]
        assert len(row["ratios"]) == block["repeats"]
  assert _positive(result["hot_path"]["scan_vs_while"]["ratio"])
  for name in (
      "global_flops_per_sec",
      "batched_flops_per_sec",
      "worker_flops_per_sec",
      "square_flops_per_sec",
  ):
    assert _positive(result["shape_matmul"][name])
  assert _positive(result["machine"]["nominal_peak_flops"]) or (
      result["machine"]["flop_per_cycle_per_core"] == 0
  )


@pytest.mark.slow
def test_compilations_counted_once(quick):
  result, _ = quick
  for block in (result["main"], result["sharded"]):
    jax_rows = {r["name"] for r in block["rows"] if not r["name"].startswith("pytorch")}
    assert set(block["compiles"]) == jax_rows
    for name, c in block["compiles"].items():
      assert c["distinct_h"] > 1, name  # H changed between rounds...
      assert c["inner"] == 1, name  # ...and nothing recompiled
      if not name.startswith("reference"):
        assert c["sync"] == 1, name
      assert c["once"]
      assert c["compile_seconds"] > 0, name
  assert result["targets"]["compilations of each round function"]["met"]


@pytest.mark.slow
def test_scaling_and_hot_path_present(quick):
  result, _ = quick
  scaling, workload = result["scaling"], result["workload"]
  assert [p["num_workers"] for p in scaling["by_workers"]] == workload["scale_workers"]
  assert [p["d_model"] for p in scaling["by_width"]] == workload["scale_widths"]
  for point in scaling["by_workers"] + scaling["by_width"]:
    assert _positive(point["ratio"]) and _positive(point["tokens_per_sec"])
    assert point["xla"]["state_bytes"] > 0
    assert point["memory"]["peak_bytes"] > 0 and point["memory"]["method"]
  hot = result["hot_path"]
  assert all(hot["donated"].values()) and not hot["donation_warnings"]
  assert hot["staging"]["seconds"]["int32"] > 0


@pytest.mark.slow
def test_markdown_has_every_row_and_the_command(quick):
  result, md = quick
  assert md == _page(result)  # --md is the page rendered from --out
  assert "python -m benchmarks.throughput --quick" in md
  assert result["machine"]["uptime"] in md
  for row in result["main"]["rows"] + result["sharded"]["rows"]:
    assert f"`{row['name']}`" in md
  for target in result["targets"]:
    assert target in md
  assert "### The default path, at equal devices" in md
  # Every @2 row and target has its equal-devices number.
  assert "| not measured |" not in md and "| not recorded |" not in md


@pytest.mark.slow
def test_pytorch_row_or_one_line_note(quick):
  """With torch: a measured row, its ratios and targets; without: one line."""
  result, md = quick
  names = [r["name"] for r in result["main"]["rows"]]
  if HAS_TORCH:
    row = next(r for r in result["main"]["rows"] if r["name"] == "pytorch")
    assert _positive(row["tokens_per_sec"]) and _positive(row["mfu_vs_measured_peak"])
    assert result["main"]["pytorch"]["num_params"] == result["main"]["num_params"]
    assert "| `pytorch` |" in md and "PyTorch row: none" not in md
    for name in ("reference",) + ALGORITHMS:
      assert f"{name} / pytorch tokens/s" in result["targets"]
    # The simulator-style peer: K single-threaded processes, in both blocks.
    assert result["main"]["pytorch"]["diloco"]["processes"] == result["main"]["num_workers"]
    for block, diloco in (("main", "diloco"), ("sharded", "diloco@2")):
      peer = next(r for r in result[block]["rows"] if r["name"] == "pytorch_diloco")
      assert _positive(peer["tokens_per_sec"])
      assert f"{diloco} / pytorch_diloco tokens/s" in result["targets"]
    assert "| `pytorch_diloco` |" in md
  else:
    assert "pytorch" not in names
    assert result["main"]["pytorch"] == {"skipped": pytorch.NOT_INSTALLED}
    assert f"PyTorch row: none: {pytorch.NOT_INSTALLED}." in md
    assert "| `pytorch" not in md and "x pytorch" not in md


@pytest.mark.slow
def test_without_torch_the_report_says_so_in_one_line(quick, monkeypatch):
  """The no-torch path, even where torch is installed: no child, no row, no
  target, one line in the report."""
  monkeypatch.setattr(pytorch, "torch_available", lambda: False)
  workload = make_workload(
      quick=True,
      num_workers=4,
      h=0,
      repeats=0,
      sweep_repeats=0,
      scale_workers=[],
      scale_widths=[],
      scale_steps=2,
  )
  config = algorithm_config(workload, "diloco")
  rows, info, served = pytorch.start(workload, config, build_model(config), steps=3)
  assert rows == [] and served == []
  assert info == {"skipped": pytorch.NOT_INSTALLED}
  result = copy.deepcopy(quick[0])
  result["main"]["rows"] = [
      r for r in result["main"]["rows"] if not r["name"].startswith("pytorch")
  ]
  result["main"]["pytorch"] = info
  if "rows" in result.get("sharded", {}):  # the child's peer row, where torch ran
    result["sharded"]["rows"] = [
        r for r in result["sharded"]["rows"] if not r["name"].startswith("pytorch")
    ]
  result["targets"] = targets(result)
  assert not [t for t in result["targets"] if "pytorch" in t]
  md = _page(result)
  assert f"PyTorch row: none: {pytorch.NOT_INSTALLED}." in md
  assert "| `pytorch" not in md and "x pytorch" not in md


@pytest.mark.slow
def test_render_only_rewrites_the_page_from_the_json(quick, tmp_path):
  """``--render_only``: the page from the numbers in ``--out``, nothing measured."""
  result, md = quick
  (tmp_path / "b.json").write_text(json.dumps(result))
  env = helpers.user_env()
  args = [f"--out={tmp_path / 'b.json'}", f"--md={tmp_path / 'b.md'}"]
  proc = subprocess.run(
      [sys.executable, "-m", "benchmarks.throughput", "--render_only", *args],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (tmp_path / "b.md").read_text() == md


def test_committed_pages_are_rendered_from_their_committed_json():
  """``python -m benchmarks.render --check``: every generated block of the
  benchmark pages is what their JSON renders to."""
  pages = [os.path.join(ROOT, "docs", p) for p in ("benchmarks.md", "xla_options.md", "device.md", "bf16_cpu.md")]
  assert render.main(["--check", *pages]) == 0


def test_render_formats_scales_and_falls_back():
  table = render.Table(
      lambda r: r["rows"],
      (("a", "{x:/1e3:.1f}"), ("b", "**{y[z]:.0%}**", "none"), ("c", "{s}")),
      title="{title}",
  )
  text = table.render(
      dict(title="T", rows=[dict(x=2500, y=dict(z=0.5), s="p|q"), dict(x=None, s="")])
  )
  assert text.splitlines() == [
      "T",
      "",
      "| a | b | c |",
      "|---|---|---|",
      "| 2.5 | **50%** | p\\|q |",
      "| - | none |  |",
  ]
  lines = render.Lines(("kept {n}", "dropped {missing}", ("{missing}", "fallback")))
  assert lines.render(dict(n=float("nan"))) == "fallback"
  assert lines.render(dict(n=1)) == "kept 1\nfallback"


_MODEL_KEYS = ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim", "seq_len")


def _model_cfg(size: str, **overrides) -> dict:
  from configs import common

  return dict(common.base(size).model.to_dict(), vocab_size=256, **overrides)


def _load_jax_weights(net, params) -> None:
  """Copies a ``model.make`` params tree into ``torch_reference.Transformer``
  (Flax kernels are [in, out], torch's Linear weights [out, in])."""
  import torch

  t = lambda x: torch.from_numpy(np.array(x))
  with torch.no_grad():
    net.embed.weight.copy_(t(params["embed"]["embedding"]))
    net.final_norm.weight.copy_(t(params["final_norm"]["scale"]))
    for i, block in enumerate(net.blocks):
      p = params[f"block_{i}"]
      block.attn_norm.weight.copy_(t(p["attn_norm"]["scale"]))
      block.mlp_norm.weight.copy_(t(p["mlp_norm"]["scale"]))
      block.qkv.weight.copy_(t(p["attn"]["qkv"]["kernel"]).T)
      block.out.weight.copy_(t(p["attn"]["out"]["kernel"]).T)
      block.up.weight.copy_(t(p["mlp"]["up"]["kernel"]).T)
      block.down.weight.copy_(t(p["mlp"]["down"]["kernel"]).T)


@pytest.fixture(scope="module")
def torch():
  """torch where the machine has it, or installed by the tests when asked, once
  per machine (``tests/torch_wheel.py``: 2.9 GB of wheels, about 2.5 minutes);
  else the tests skip, saying why."""
  if not torch_wheel.wanted():
    pytest.skip(torch_wheel.WHY_NOT_HERE)
  return torch_wheel.import_torch()


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_cfg",
    [
        _model_cfg("cpu"),  # the benchmark's model
        _model_cfg("tiny"),
        _model_cfg("tiny", d_model=48, num_heads=3, mlp_dim=80, num_layers=3),
    ],
)
def test_torch_model_param_count_matches(model_cfg, torch):
  import jax

  from autoloco_jax.model import transformer as model_lib
  from benchmarks import torch_reference

  net = torch_reference.Transformer(*(model_cfg[k] for k in _MODEL_KEYS))
  params = model_lib.make(model_cfg)[0](jax.random.key(0))
  assert torch_reference.param_count(net) == model_lib.param_count(params)
  assert torch_reference.param_count(net) == model_lib._param_count_formula(
      model_lib.validate(model_cfg)
  )


@pytest.mark.slow
def test_torch_model_and_optimizer_match_the_jax_ones(torch):
  """Same weights, same tokens: the same logits and loss, and after two steps of
  each inner optimizer (clipping, AdamW, schedule) the same parameters."""
  import jax
  import jax.numpy as jnp

  from autoloco_jax.model import transformer as model_lib
  from autoloco_jax.runtime import inner
  from benchmarks import torch_reference
  from configs import common

  config = common.base("tiny")
  # Adam's g / (sqrt(v) + eps) turns float rounding of a gradient near zero into
  # an update of up to lr: a large eps keeps the comparison about the formula.
  config.inner.eps = 1e-3
  model_cfg = _model_cfg("tiny", seq_len=16)
  init, apply = model_lib.make(model_cfg)
  params = init(jax.random.key(0))
  tokens_SxNxL1 = np.random.default_rng(0).integers(0, 256, (2, 8, 17))
  trainer = torch_reference.Trainer(
      dict(
          model=model_cfg,
          inner=config.inner.to_dict(),
          total_steps=config.total_steps,
          global_batch=8,
      )
  )
  _load_jax_weights(trainer.model, params)
  trainer.tokens_SxNxL1 = torch.from_numpy(tokens_SxNxL1)
  inputs_NxL = tokens_SxNxL1[0, :, :-1]
  np.testing.assert_allclose(
      trainer.model(torch.from_numpy(inputs_NxL)).detach().numpy(),
      apply(params, jnp.asarray(inputs_NxL, jnp.int32)),
      atol=1e-5,
  )

  tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
  opt = tx.init(params)
  for tokens_NxL1 in tokens_SxNxL1:
    tokens = jnp.asarray(tokens_NxL1, jnp.int32)
    loss, grads = jax.value_and_grad(lambda p: model_lib.loss_fn(apply, p, tokens))(
        params
    )
    updates, opt = tx.update(grads, opt, params)
    params = jax.tree.map(jnp.add, params, updates)
    np.testing.assert_allclose(float(trainer.train_step()), float(loss), rtol=1e-5)
  want = torch_reference.Transformer(*(model_cfg[k] for k in _MODEL_KEYS))
  _load_jax_weights(want, params)
  for (name, got), (_, expected) in zip(
      trainer.model.named_parameters(), want.named_parameters()
  ):
    np.testing.assert_allclose(
        got.detach().numpy(), expected.detach().numpy(), atol=1e-6, err_msg=name
    )


@pytest.mark.slow
def test_torch_diloco_sync_is_the_outer_nesterov_step(torch):
  """The PyTorch peer's sync, one worker: the pseudo-gradient Δ = θ_global − θ_k,
  then Nesterov SGD's first step θ_global − α(1 + β)Δ, copied into the worker."""
  import torch.distributed as dist

  from benchmarks import torch_diloco
  from configs import common

  config = common.base("tiny")
  spec = dict(
      model=_model_cfg("tiny", seq_len=16),
      inner=config.inner.to_dict(),
      total_steps=10,
      batch=2,
      seed=0,
      num_workers=1,
      h=2,
      alpha=0.7,
      beta=0.9,
  )
  dist.init_process_group(
      "gloo", init_method=f"tcp://127.0.0.1:{torch_diloco._free_port()}", rank=0,
      world_size=1,
  )
  try:
    worker = torch_diloco.Worker(spec, rank=0)
    start = [p.detach().clone() for p in worker.params]
    for _ in range(2):
      worker.trainer.train_step()
    local = [p.detach().clone() for p in worker.params]
    worker.sync()
  finally:
    dist.destroy_process_group()
  for s0, loc, g, p in zip(start, local, worker.global_params, worker.params):
    want = s0 - 0.7 * 1.9 * (s0 - loc)
    np.testing.assert_allclose(g.detach().numpy(), want.numpy(), atol=1e-6)
    np.testing.assert_array_equal(p.detach().numpy(), g.detach().numpy())
  assert any(not np.allclose(a.numpy(), b.numpy()) for a, b in zip(start, local))


class _Crashing:
  """A row whose round raises what a bug would."""

  name = "crashing"

  def round(self, h):
    raise ZeroDivisionError("a bug in the round")


def test_a_crash_in_a_row_fails_the_run():
  """``try_row`` reports only a row its algorithm refuses; a crash in the build
  or the warm-up propagates (so the benchmark, and the quick fixture, fail)."""

  def crashing_build():
    raise RuntimeError("a bug in the build")

  with pytest.raises(RuntimeError, match="a bug in the build"):
    measure.try_row("crashing", crashing_build)
  with pytest.raises(ZeroDivisionError, match="a bug in the round"):
    measure.try_row("crashing", _Crashing)


def test_a_row_its_algorithm_refuses_is_skipped_with_the_reason():
  """NoLoCo runs a fixed interval: with an adaptive controller ``registry.make``
  refuses the config, and the row is reported as skipped, naming why."""
  workload = make_workload(
      quick=True,
      num_workers=4,
      h=0,
      repeats=0,
      sweep_repeats=0,
      scale_workers=[],
      scale_widths=[],
      scale_steps=2,
  )
  config = algorithm_config(workload, "noloco")
  config.interval.controller = "loss_ratio"
  mesh = replicas.make_mesh(config.num_workers, 1)
  data = synthetic_data(config)
  build = lambda: runners.AlgoRunner("noloco", config, build_model(config), mesh, data)
  runner, why = measure.try_row("noloco", build)
  assert runner is None
  assert why.startswith("ValueError: ") and "fixed interval" in why, why


class _FakeRunner:
  """A row whose every unit 'takes' a fixed time (no JAX)."""

  def __init__(self, name, seconds, tokens_per_step=10):
    self.name, self.seconds, self.tokens_per_step = name, seconds, tokens_per_step
    self.units = []

  def unit(self, steps, round_h=0):
    self.units.append(steps)


def test_bracketed_pairs_each_row_with_its_neighbouring_reference_units(monkeypatch):
  reference = _FakeRunner("reference", 2.0)
  fast, slow = _FakeRunner("fast", 1.0), _FakeRunner("slow", 4.0, tokens_per_step=20)
  clock = []

  def fake_timed(fn):
    fn()
    # The runner whose units outnumber its timed ones plus its untimed first.
    runner = next(
        r for r in (reference, fast, slow) if len(r.units) > clock.count(r.name) + 1
    )
    clock.append(runner.name)
    return runner.seconds

  monkeypatch.setattr(timing, "timed", fake_timed)
  out = timing.bracketed(reference, [fast, slow], steps=5, repeats=2)
  # Each row ran one untimed unit more than it was timed, before any timed one.
  assert [len(r.units) - clock.count(r.name) for r in (reference, fast, slow)] == [1] * 3
  # ref, fast, ref, slow, ref | ref, slow, ref, fast, ref
  assert clock == ["reference", "fast", "reference", "slow", "reference"] * 1 + [
      "reference",
      "slow",
      "reference",
      "fast",
      "reference",
  ]
  assert out["fast"]["ratio"] == [2.0, 2.0]  # twice the reference's tokens/s
  assert out["slow"]["ratio"] == [1.0, 1.0]  # twice the tokens in twice the time
  assert len(out["reference"]["seconds"]) == 6
