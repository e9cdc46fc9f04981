"""Every command that a benchmark's docstring shows runs, at its smallest size.

The throughput benchmark (``--quick``, ``--render_only``), ``xla_options
--quick``, ``device_check.sh --dry_run`` and ``mesh_equivalence``
(``tests/test_mesh.py``) have their own test files; this one
runs the rest as a user would, each on a ``:tiny`` config, and checks the JSON
it writes."""

import json
import os
import subprocess
import sys

import pytest

from tests import helpers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "configs/diloco.py:tiny"


def _every_core(result: dict) -> bool:
  """Every mode ran as a real run, each with a summary (this replaces the
  per-mode runs ``tests/test_every_core.py`` used to start itself): the CLI
  left alone uses one device per usable core (the largest count dividing K =
  4), a user's ``XLA_FLAGS`` device count is kept (one device), and one
  process per core runs the same program on a two-process mesh, with the same
  threads: the same model at the end (pinning changes XLA's thread count, and
  so its reductions' summation order)."""
  from autoloco_jax.run import distributed

  runs = {r["mode"]: r for r in result["runs"]}
  assert set(runs) == {
      "default", "one_device", "process_per_core", "process_per_core_pinned"
  }, runs
  assert runs["default"]["devices"] == distributed.host_device_count(4), runs
  assert runs["one_device"]["devices"] == 1, runs
  assert all(r["tokens_per_sec"] > 0 and r["wall_time"] > 0 for r in runs.values())
  assert min(result["tokens_per_sec_vs_first"].values()) > 0
  assert runs["default"]["final_eval_bpb"] == runs["process_per_core"]["final_eval_bpb"]
  return "tokens_per_sec_ratio" in result


def _host_wait(result: dict) -> bool:
  """Four rounds of H = 2 (the first compiles; three intervals measured): the
  run's medians are finite and consistent, each interval splits into a wait and
  the host's own work, and one repeat's medians are its run's."""
  (run,) = result["runs"]
  assert (result["config"], result["total_steps"], result["repeats"]) == ("diloco", 8, 1)
  assert run["rounds"] == 4 and 0 <= run["reads_without_wait"] <= 3
  assert run["tokens_per_sec"] > 0 and run["wall_time"] > 0
  assert run["interval_s"] > 0 and run["data_wait_s"] >= 0
  assert 0 <= run["host_wait_s"] <= run["interval_s"]
  # Per round busy = interval − wait <= interval, so the medians keep the order.
  assert 0 <= run["host_busy_s"] <= run["interval_s"]
  assert result["median"] == {k: run[k] for k in result["median"]}
  return result["host_busy_share"] == run["host_busy_s"] / run["interval_s"]


def _checkpoint_cost(result: dict) -> bool:
  """The state of DiLoCo with K workers: K models and their two Adam moments,
  the global model and the outer momentum (float32), plus a few counters; the
  checkpoint on disk holds at least one model's bytes and is not larger than
  twice the state (orbax compresses)."""
  K, P = result["num_workers"], result["num_params"]
  assert (result["algorithm"], K, result["repeats"]) == ("diloco", 4, 1) and P > 0
  floats = 4 * P * (3 * K + 2)
  assert floats <= result["state_bytes"] < floats + 4096, (floats, result)
  assert 4 * P < result["checkpoint_bytes"] < 2 * result["state_bytes"]
  return result["save_seconds_median"] > 0 and result["restore_seconds_median"] > 0


def _step_profile(result: dict) -> bool:
  """Every piece timed, each share its time over the project's own step, and
  the tokens per second those of the project's step."""
  rows = {r["name"]: r for r in result["rows"]}
  assert set(rows) == {
      "forward", "forward_backward", "optimizer", "pieces", "one_model", "project"
  }
  project = rows["project"]["ms_per_step"]
  for row in rows.values():
    assert row["ms_per_step"] > 0
    assert row["share"] == pytest.approx(row["ms_per_step"] / project, rel=1e-12)
  s = result["shapes"]
  tokens = s["num_workers"] * s["batch_size"] * s["seq_len"]
  assert result["tokens_per_sec"] == pytest.approx(tokens / (project / 1e3), rel=1e-12)
  ops = result["forward_backward_ops"]
  assert sum(op["share"] for op in ops) == pytest.approx(1.0)
  # The tiny model's every part runs forward and backward, with matmuls in each.
  placed = {(op["part"], op["direction"]) for op in ops if op["kind"] == "matmul"}
  for part in ("attention projections", "MLP", "embedding and logits"):
    assert {(part, "forward"), (part, "backward")} <= placed, part
  one = result["one_model_ops"]
  assert sum(op["share"] for op in one) == pytest.approx(1.0)
  if "skipped" in result["torch_ops"]:  # torch is optional
    assert "jax_vs_torch" not in result
  else:
    kinds = {r["kind"]: r for r in result["jax_vs_torch"]}
    assert set(kinds) == set(result["torch_ops"]["kinds_ms_per_step"])
    assert all(r["torch_ms"] >= 0 and r["jax_ms"] >= 0 for r in kinds.values())
  return result["steps"] == 2 and result["model_flops_per_sec"] > 0


def _stream_peak(result: dict) -> bool:
  """Every depth × unit × mode read; the clock's peak ratio is the bound
  ``max(τ, 1) · M / max_p m_p`` of the fragments' sizes (so the clock charges
  each exchange its fragment's bytes); the study's own model (2 blocks,
  sublayer units) has 4 fragments of which the largest holds 30.8%: 3.25×,
  the 39.4 against 128 MB/s its tune report measured."""
  rows = {(r["layers"], r["unit"], r["mode"]): r for r in result["rows"]}
  assert len(rows) == 8 and (result["fragments"], result["tau"]) == (4, 1)
  for r in rows.values():
    assert sum(r["fragment_shares"]) == pytest.approx(1.0)
    assert r["peak_ratio"] == pytest.approx(r["bound"], rel=1e-9)
    assert r["peak_ratio"] <= result["fragments"] * max(result["tau"], 1)
  study = rows[(2, "sublayer", "strided")]
  assert study["largest_share"] == pytest.approx(0.308, abs=5e-4)
  return study["peak_ratio"] == pytest.approx(3.25, abs=0.01)


#: (module, its arguments at the smallest size, a check of the JSON it writes).
COMMANDS = [
    (
        "benchmarks.memory",
        ["--config", TINY, "--num_workers", "2"],
        lambda r: r["state_fields"] and r["num_workers"] == 2,
    ),
    (
        "benchmarks.memory",
        ["--search", "--max_bytes", "1GiB", "--k_range", "1,2", "--search_configs", TINY],
        lambda r: r["results"][TINY]["largest_k"] == 2,
    ),
    (
        "benchmarks.aot",
        ["--config", "configs/autoloco.py:tiny"],
        lambda r: r["inner"]["argument_bytes"] > 0,
    ),
    (
        # Both of the docstring's commands in one: every mode, the default once.
        "benchmarks.every_core",
        [
            "--config", TINY, "--total_steps", "4", "--repeats", "1",
            "--modes", "default,one_device,process_per_core,process_per_core_pinned",
        ],
        _every_core,
    ),
    (
        "benchmarks.host_wait",
        [
            "--config",
            TINY,
            "--config.interval.h=2",
            "--total_steps",
            "8",
            "--repeats",
            "1",
        ],
        _host_wait,
    ),
    (
        "benchmarks.checkpoint_cost",
        ["--config", TINY, "--repeats", "1"],
        _checkpoint_cost,
    ),
    (
        "benchmarks.worker_mean",
        ["--config", "configs/gasloc.py:tiny", "--repeats", "1"],
        lambda r: r["mean_ms"]["unrolled"] > 0 and r["sync_ms"]["worker_mean"] > 0
        and r["max_abs_diff"] < 1e-5 and r["num_workers"] == 4,
    ),
    (
        "benchmarks.parallel_runs",
        ["--config", TINY, "--runs", "2", "--steps", "4", "--repeats", "1"],
        lambda r: r["speedup_one_per_core"] > 0
        and all(len(v) == 1 for v in r["seconds"].values()),
    ),
    (
        "benchmarks.build_reuse",
        ["--config", TINY, "--labels", "2", "--seeds", "2", "--steps", "4", "--repeats", "1"],
        # One build kept: every run builds; every label's: each label once.
        lambda r: [b["builds"] for b in r["batches"]["keep_one"]] == [4]
        and [b["builds"] for b in r["batches"]["keep_every_label"]] == [2]
        and r["seconds_ratio"] > 0,
    ),
    (
        "benchmarks.bf16",
        [
            "--config",
            "configs/default.py:tiny",
            "--config.total_steps=4",
            "--config.eval.every_steps=2",
        ],
        lambda r: r["runs"]["bfloat16"]["steps"] == r["runs"]["float32"]["steps"] != [],
    ),
    (
        "benchmarks.step_profile",
        ["--config", TINY, "--steps", "2", "--repeats", "1"],
        _step_profile,
    ),
    (
        "benchmarks.stream_peak",
        ["--layers", "2,4"],
        _stream_peak,
    ),
    (
        "benchmarks.same_programs",
        ["--configs", "diloco", "--size", "tiny", "--num_devices", "1"],
        lambda r: set(r) == {"diloco"} and len(r["diloco"]["inner"]) == 16
        and r["diloco"]["inner"] != r["diloco"]["sync"],
    ),
    (
        "benchmarks.remat",
        ["--config", TINY, "--workers", "1"],
        lambda r: [(x["num_workers"], x["remat"]) for x in r["rows"]]
        == [(1, "none"), (1, "full")]
        and r["rows"][0]["activation_bytes"] > 0,
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, args, check",
    COMMANDS,
    ids=[f"{m}{' ' + a[0] if a[0] == '--search' else ''}" for m, a, _ in COMMANDS],
)
def test_docstring_command_runs_at_its_smallest_size(module, args, check, tmp_path):
  out = tmp_path / "out.json"
  env = helpers.user_env()  # one CPU device, as a user's shell has
  proc = subprocess.run(
      [sys.executable, "-m", module, *args, f"--out={out}"],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert check(result), result
