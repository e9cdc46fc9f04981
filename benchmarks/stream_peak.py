r"""Streaming DiLoCo's peak bandwidth against DiLoCo's, by depth: where the 4× holds.

  python -m benchmarks.stream_peak --out docs/studies/compression_many/stream_peak.json

A streaming sync of ``P`` fragments with overlap ``τ`` sends one fragment at a
time, so the simulated clock's peak bandwidth (``SimClock.advance``: the bytes
of one exchange per worker over the compute it may hide behind) falls from
DiLoCo's whole model per step to the largest fragment per ``max(τ, 1)`` steps:

    peak ÷ = (DiLoCo's peak) / (streaming's peak) = max(τ, 1) · M / max_p m_p,

``M`` the model's bytes and ``m_p`` fragment ``p``'s (a ring all-reduce sends
``2(K−1)/K`` of each, the same factor on both sides). With equal fragments it
is ``max(τ, 1) · P``; the issue's target (4× at ``P = 4``, ``τ = 1``) needs
fragments within a few percent of equal.

The rows: issue 42's study row (``--study``, ``--row``: the many/Python cell's
model, ``P = 4``, ``τ = 1``) at the depths ``--layers``, for each fragment unit
(a block; a block's attention or MLP) and mode (strided, the paper's; or
contiguous), read through the code a run uses: the row's config, the registry's
sync (``comm_pattern``) over the parameters' shapes (nothing is allocated or
trained), and the simulated clock over one cycle of the ``2P`` rounds of the
stream's schedule. The study's runs use 2 blocks in sublayer units, strided.
"""

from __future__ import annotations

import json
import types

import jax
from absl import flags

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import fragments, stream
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.sim import clock as clock_lib
from experiments import cli, engine

_STUDY = flags.DEFINE_string(
    "study", "configs/studies/compression_many.py:report", "The study (FILE:PHASE)."
)
_ROW = flags.DEFINE_string("row", "stream_tau1", "The study's streaming row.")
_LAYERS = flags.DEFINE_list("layers", ["2", "4", "8", "16", "32"], "Depths to read.")
_OUT = flags.DEFINE_string("out", None, "Where to write the JSON.")


def peak_bandwidth(config, shapes) -> float:
  """The largest per-round peak bandwidth (bytes/s per worker) of one cycle of
  ``config``'s sync on the simulated clock, over parameters of ``shapes``."""
  k = config.num_workers
  piece = registry.from_config(config).sync_piece(None)
  pattern = piece.comm_pattern(types.SimpleNamespace(get=lambda: shapes), k)
  num_params = sum(x.size for x in jax.tree.leaves(shapes))
  clock = clock_lib.clock_from_config(config, num_params, step_time=1.0)
  h, schedule = config.interval.h, stream.Stream.from_config(config)
  # Round lengths as the trainer runs them: a first slot, then each round
  # after the event that ends the one before.
  steps = [schedule.slot_length(h)]
  for r in range(len(schedule.events) - 1):
    steps.append(piece.round_length(r, h))
  for r, n in enumerate(steps):
    clock.advance(pattern(r, n))
  return clock.peak_bandwidth


def row(config, layers: int, unit: str, mode: str) -> dict:
  """Peak ÷ of ``config``'s streaming row at depth ``layers`` in ``unit``s and
  ``mode``, against the same model's DiLoCo (one fragment, no overlap)."""
  c = config.copy_and_resolve_references()
  c.model.num_layers = layers
  c.stream.unit, c.stream.mode = unit, mode
  init, _ = model_lib.make(c.model)
  shapes = jax.eval_shape(init, jax.random.key(0))
  ids = fragments.leaf_fragments(shapes, c.stream.fragments, mode, unit)
  sizes = [0] * c.stream.fragments
  for i, leaf in zip(ids, jax.tree.leaves(shapes)):
    sizes[i] += leaf.size
  whole = c.copy_and_resolve_references()
  whole.stream.fragments, whole.stream.tau = 1, 0
  ratio = peak_bandwidth(whole, shapes) / peak_bandwidth(c, shapes)
  return dict(
      layers=layers,
      unit=unit,
      mode=mode,
      num_params=sum(sizes),
      fragment_shares=[s / sum(sizes) for s in sizes],
      largest_share=max(sizes) / sum(sizes),
      peak_ratio=ratio,
      bound=max(c.stream.tau, 1) * sum(sizes) / max(sizes),
  )


def main(argv) -> None:
  del argv
  runs = engine.load(_STUDY.value).runs
  if _ROW.value not in runs:
    raise ValueError(f"the study has no row {_ROW.value!r}; its rows: {sorted(runs)}")
  config = runs[_ROW.value]
  if config.stream.fragments < 2:
    raise ValueError(f"{_ROW.value} is not a streaming row (stream.fragments < 2)")
  rows = [
      row(config, int(layers), unit, mode)
      for layers in _LAYERS.value
      for unit in fragments.UNITS
      for mode in fragments.MODES
  ]
  result = dict(
      study=_STUDY.value.partition(":")[0],
      row=_ROW.value,
      fragments=config.stream.fragments,
      tau=config.stream.tau,
      model={k: config.model[k] for k in ("d_model", "mlp_dim", "vocab_size", "tie_embeddings")},
      rows=rows,
  )
  print(f"{'layers':>6} {'unit':>8} {'mode':>10} {'largest':>8} {'peak ÷':>7}")
  for r in rows:
    print(
        f"{r['layers']:>6} {r['unit']:>8} {r['mode']:>10} "
        f"{r['largest_share']:>8.1%} {r['peak_ratio']:>6.2f}×"
    )
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  cli.run(main)
