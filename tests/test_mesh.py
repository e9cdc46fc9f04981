"""Workers that span devices: the ``replica × fsdp × tensor`` mesh, where each
array of the state lives on it, and that a run on it is the run with a worker
per device (``runtime/layout.py``, ``benchmarks/mesh_equivalence.py``)."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from autoloco_jax.run import assembly, config_check
from autoloco_jax.runtime import layout as layout_lib, replicas
from benchmarks import aot
from configs import diloco as diloco_config
from configs import noloco as noloco_config
from experiments import launch_local
from tests.helpers import ROOT, rounds, tiny, user_env


def test_the_replica_axis_takes_the_devices_the_model_axes_leave():
  mesh = replicas.make_mesh(4, 4, fsdp=2)
  assert dict(mesh.shape) == {"replica": 2, "fsdp": 2, "tensor": 1}
  assert replicas.replica_rows(mesh) == 2 and replicas.model_size(mesh) == 2
  # A worker's devices are consecutive (one host's, on a real slice).
  assert [d.id for d in mesh.devices[0].flat] == [0, 1]
  assert replicas.tokens_spec(mesh) == P("replica", None, "fsdp")
  assert replicas.tokens_spec(replicas.make_mesh(4, 2)) == replicas.WORKERS
  assert replicas.local_workers(mesh, 4) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_workers=4, num_devices=3, fsdp=2), "cannot be split into workers"),
        (dict(num_workers=3, num_devices=4, fsdp=2), "not divisible by the device count 2 of the replica axis"),
        (dict(num_workers=2, num_devices=4, fsdp=0), "mesh.fsdp must be a positive int"),
    ],
)
def test_a_mesh_that_cannot_hold_the_workers_is_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    replicas.make_mesh(**kwargs)


def test_a_batch_that_fsdp_does_not_divide_is_refused():
  config = tiny(diloco_config, **{"mesh.fsdp": 3})
  with pytest.raises(ValueError, match="config.mesh.fsdp=3"):
    config_check.validate(config)


def test_both_model_axes_at_once_compile_with_one_hot_lookups():
  """``fsdp 2 × tensor 2`` (one replica row of 4 devices): XLA cannot partition
  the lookups' gathers there, so they are one-hot products
  (``model/lookups.py``). The run's programs compile, its state is split four
  ways, and the one-hot cross-entropy is optax's to float rounding."""
  import flax.linen as nn
  import optax

  from autoloco_jax.model import lookups

  config = tiny(diloco_config, num_workers=2, num_devices=4, **{"mesh.fsdp": 2, "mesh.tensor": 2})
  config_check.validate(config)
  result = aot.compile_config(config, vocab_size=64)
  ratio = result["state_bytes_per_device"] / result["state_bytes_total"]
  assert 0.25 <= ratio < 0.27, ratio
  mesh = replicas.make_mesh(2, 4, jax.devices()[:4], fsdp=2, tensor=2)
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((4, 3, 64)).astype(np.float32)
  labels = rng.integers(0, 64, (4, 3))
  with jax.set_mesh(mesh), nn.logical_axis_rules(layout_lib.RULES):
    assert lookups.one_hot()
    got = jax.jit(lookups.cross_entropy)(logits, labels)
  assert not lookups.one_hot()
  want = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def _abstract_state(fsdp: int, tensor: int = 1, module=diloco_config, **overrides):
  config = tiny(
      module, num_workers=2, num_devices=2 * fsdp * tensor,
      **{"mesh.fsdp": fsdp, "mesh.tensor": tensor}, **overrides,
  )
  built = assembly.build(config, assembly.make_mesh(config), 64)
  return built, assembly.abstract_state(config, built)


def test_every_parameter_shaped_leaf_is_split_like_its_parameter():
  built, state = _abstract_state(fsdp=2)
  up = ("block_0", "mlp", "up", "kernel")
  get = lambda tree: tree["block_0"]["mlp"]["up"]["kernel"]
  # A worker's copy, its AdamW moments, the global copy and the momentum.
  assert get(state.params_K).sharding.spec == P("replica", "fsdp", None)
  moments = [
      x for path, x in jax.tree.leaves_with_path(state.inner_opt_K)
      if layout_lib._path(path)[-4:] == up
  ]
  assert len(moments) == 2 and all(m.sharding.spec == P("replica", "fsdp", None) for m in moments)
  assert get(state.algo.global_params).sharding.spec == P("fsdp", None)
  momentum = [
      x for path, x in jax.tree.leaves_with_path(state.algo.outer_opt)
      if layout_lib._path(path)[-4:] == up
  ]
  assert momentum and all(m.sharding.spec == P("fsdp", None) for m in momentum)
  # The embedding (vocab x embed) splits its width; a norm's scale stays whole.
  assert state.params_K["embed"]["embedding"].sharding.spec == P("replica", None, "fsdp")
  assert state.params_K["final_norm"]["scale"].sharding.spec == P("replica", None)
  # Scalars and per-worker statistics keep their replica specs.
  assert state.acc.loss_sum_K.sharding.spec == P("replica")


def test_the_tensor_axis_splits_heads_mlp_and_vocabulary():
  _, state = _abstract_state(fsdp=1, tensor=2)
  block = state.params_K["block_0"]
  assert block["mlp"]["up"]["kernel"].sharding.spec == P("replica", None, "tensor")
  assert block["mlp"]["down"]["kernel"].sharding.spec == P("replica", "tensor", None)
  assert block["attn"]["qkv"]["kernel"].sharding.spec == P("replica", None, "tensor")
  assert state.params_K["embed"]["embedding"].sharding.spec == P("replica", "tensor", None)


def test_without_model_axes_the_state_has_the_replica_specs_alone():
  _, state = _abstract_state(fsdp=1)
  for x in jax.tree.leaves(state.params_K):
    assert x.sharding.spec == P("replica")


def test_a_dimension_the_mesh_cannot_split_is_refused():
  mesh = replicas.make_mesh(2, 4, fsdp=2)
  logical = {"w": P("embed", "mlp")}
  shapes = {"w": jax.ShapeDtypeStruct((3, 4), np.float32)}
  with pytest.raises(ValueError, match="dimension 3 is not divisible by mesh.fsdp=2"):
    layout_lib.Layout.of(mesh, logical, shapes)


def test_state_memory_per_device_falls_as_one_over_fsdp():
  """XLA's memory analysis of the compiled inner step and sync: the arguments
  (the donated state, a chunk of tokens) on one device."""
  sizes = {}
  for fsdp in (1, 2):
    config = tiny(
        diloco_config, num_workers=2, num_devices=2 * fsdp,
        **{"mesh.fsdp": fsdp, "model.d_model": 128, "model.mlp_dim": 512},
    )
    sizes[fsdp] = aot.compile_config(config, vocab_size=64)
  one, two = sizes[1], sizes[2]
  assert two["state_bytes_total"] == one["state_bytes_total"]
  # Everything parameter-shaped halves; what stays whole (norm scales,
  # scalars, per-worker statistics) is under 2% of the state.
  ratio = two["state_bytes_per_device"] / one["state_bytes_per_device"]
  assert 0.5 <= ratio < 0.51, ratio
  for program in ("inner", "sync"):
    xla = two[program]["argument_bytes"] / one[program]["argument_bytes"]
    assert 0.5 <= xla < 0.52, (program, xla)


def test_a_checkpoint_of_a_split_state_restores_split(tmp_path):
  """A run spanning devices resumes: the state restores into the layout of a
  fresh run (``run/checkpoint.py``), values and shardings."""
  from autoloco_jax.run import checkpoint

  config = tiny(diloco_config, num_workers=2, num_devices=4, **{"mesh.fsdp": 2})
  run = assembly.setup(config)
  saved = jax.tree.map(lambda x: x + 1 if x.dtype == np.float32 else x, run.state)
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(7, saved, {"step": 7})
  ckpt.wait()
  step, restored, _ = ckpt.restore(run.state)
  assert step == 7
  for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(restored)):
    assert a.sharding == b.sharding
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  up = restored.params_K["block_0"]["mlp"]["up"]["kernel"]
  assert up.sharding.spec == P("replica", "fsdp", None)


def test_the_planner_and_the_compiler_agree_on_the_state_per_device():
  """``experiments.plan``'s ``GB/dev`` (an abstract mesh of the site count)
  is ``benchmarks.aot``'s ``state_bytes_per_device`` (the compiled run's)."""
  from autoloco_jax.sim import planner

  for name, module in (("diloco", diloco_config), ("noloco", noloco_config)):
    config = tiny(module, num_workers=2, num_devices=4, **{"mesh.fsdp": 2})
    config.model.vocab_size, config.model.seq_len = 64, config.data.seq_len
    mesh = assembly.make_mesh(config)
    built = assembly.build(config, mesh, 64)
    compiled = assembly.state_bytes_per_device(assembly.abstract_state(config, built))
    params = planner.abstract_params(config.model)
    planned = assembly.planned_state_bytes(config, planner.build(config, params), params)
    assert planned == compiled > 0, name


def test_the_mesh_page_shows_the_committed_results():
  """``docs/mesh.md``'s tables are the committed JSON results, rendered."""
  import os

  paths = [
      os.path.join(ROOT, f"docs/mesh/aot_{name}.json")
      for name in ("cpu_fsdp1", "cpu_fsdp2", "cpu_fsdp4", "1b")
  ]
  results = [json.load(open(p)) for p in paths]
  assert {(r["mesh"]["fsdp"], r["num_params"] > 1e9) for r in results} >= {(16, True), (4, False)}
  with open(os.path.join(ROOT, "docs/mesh.md")) as f:
    page = f.read()
  for path in paths:
    assert os.path.relpath(path, ROOT) in page
  assert aot.table(results) in page
  from benchmarks import mesh_equivalence

  with open(os.path.join(ROOT, "docs/mesh_equivalence.json")) as f:
    equivalence = json.load(f)
  assert mesh_equivalence.table(equivalence) in page
  assert {row["name"] for row in equivalence["rows"]} == set(mesh_equivalence.CONFIGS)
  with open(os.path.join(ROOT, "docs/mesh/wire_1b_sparseloco.json")) as f:
    wire_1b = json.load(f)
  (branch,) = wire_1b["branches"]
  assert wire_1b["worker_devices"] == 16 and wire_1b["devices"] == 64
  assert branch["wire_bytes_per_worker"] == wire_1b["segment_bytes"] == 28_599_104
  assert f"{wire_1b['segment_bytes']:,} bytes per worker" in page
  for name, layout in (("fsdp2_tensor2", (2, 2, 2)), ("one_row", (4, 1, 1))):
    with open(os.path.join(ROOT, f"docs/mesh/equivalence_{name}.json")) as f:
      result = json.load(f)
    assert (result["fsdp"], result["tensor"], result["replicas"]) == layout
    assert mesh_equivalence.table(result) in page
    assert {row["name"] for row in result["rows"]} == set(mesh_equivalence.CONFIGS)
    for row in result["rows"]:
      d = row["max_relative_difference"]
      assert d["rounds"] < RTOL and d["final_eval"] < RTOL, (name, row["name"], d)


@pytest.mark.slow
def test_each_algorithm_spanning_four_devices_equals_a_worker_per_device(tmp_path):
  """``replica 2 × fsdp 4`` (8 simulated devices) against ``replica 2 × fsdp 1``:
  the logged losses of every round of 10 steps and the final evaluation agree
  to :data:`RTOL` (float rounding carried through training), the fp4-quantized
  streaming run to :data:`RTOL_FP4` (a rounding difference moves a value by a
  whole fp4 code)."""
  out = tmp_path / "equivalence.json"
  env = user_env(XLA_FLAGS=_devices(8))
  subprocess.run(
      [sys.executable, "-m", "benchmarks.mesh_equivalence", "--fsdp", "4",
       "--total_steps", "10", "--out", str(out)],
      cwd=ROOT, env=env, check=True, timeout=900,
  )
  rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
  assert set(rows) == set(mesh_configs())
  for name, row in rows.items():
    tol = RTOL_FP4 if name == "streaming" else RTOL
    d = row["max_relative_difference"]
    assert d["rounds"] < tol and d["final_eval"] < tol, (name, d)


#: Float rounding carried through 20 steps of training: the largest difference
#: measured is 2.4e-5 (``docs/mesh_equivalence.json``).
RTOL = 1e-3
#: A quantizing codec: a rounding difference can move a value across an fp4
#: code boundary, a whole code step (measured 3e-3 after 40 steps).
RTOL_FP4 = 2e-2


def mesh_configs():
  from benchmarks import mesh_equivalence

  return mesh_equivalence.CONFIGS


def _devices(n: int) -> str:
  from tests.conftest import FAST_COMPILE

  return " ".join([f"--xla_force_host_platform_device_count={n}", *FAST_COMPILE])


@pytest.mark.slow
def test_two_processes_of_four_devices_equal_one_process_of_eight(tmp_path):
  """A worker spans one process's 4 devices (``replica 2 × fsdp 4`` over 2
  processes, ``experiments.launch_local``) and trains as in one process.
  (NoLoCo passed the same check when it was written; one algorithm is kept
  to spare the suite a minute.)"""
  flags = [
      "--config", "configs/diloco.py:tiny", "--config.num_workers=4",
      "--config.mesh.fsdp=4", "--config.total_steps=20", "--config.eval.every_steps=10",
      "--config.log.progress=False", "--config.log.tensorboard=False",
      "--config.network.step_time=0.01",
  ]
  code = launch_local.launch(
      flags + ["--workdir", str(tmp_path / "mp")], num_processes=2,
      devices_per_process=4, timeout=600,
  )
  assert code == 0, open(tmp_path / "mp" / "process_0.log").read()
  subprocess.run(
      [sys.executable, "-m", "experiments.run", *flags, "--config.num_devices=8",
       "--workdir", str(tmp_path / "one")],
      cwd=ROOT, env=user_env(XLA_FLAGS=_devices(8)), check=True, timeout=600,
  )
  a, b = rounds(tmp_path / "mp"), rounds(tmp_path / "one")
  assert len(a) == len(b) > 0
  for ra, rb in zip(a, b):
    for key in ("loss_mean", "loss_end", "eval_loss"):
      if key in ra:
        np.testing.assert_allclose(ra[key], rb[key], rtol=RTOL, err_msg=key)
