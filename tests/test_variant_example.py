"""``docs/algorithms.md`` §7a: a DiLoCo variant is a new sync piece. The
document's example runs: the shared leaves are synced, the others stay each
worker's own, and ``DiLoCo.build`` composes it unchanged."""

import os
import re

import jax
import numpy as np

from autoloco_jax.runtime import contract, replicas, rounds as rounds_lib
from autoloco_jax.runtime import state as state_lib
from tests.helpers import ROOT, config, tokens, toy_loss, toy_params

K = 2


def _example() -> dict:
  with open(os.path.join(ROOT, "docs", "algorithms.md")) as f:
    doc = f.read()
  section = doc[doc.index("### 7a. A DiLoCo variant is a new piece") :]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  namespace = {"__name__": "variant_example"}
  exec(compile(code, "docs/algorithms.md §7a", "exec"), namespace)
  return namespace


def test_the_documented_variant_syncs_only_the_shared_leaves():
  example = _example()
  cfg = config("diloco", K=K, h=3, momentum=0.0)
  mesh = replicas.make_mesh(K, 1)
  hparams = example["SharedLayersDiLoCo"].from_config(cfg)
  algo = hparams.build(contract.Setup.from_config(cfg, toy_loss, mesh))
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data = tokens(K, 6)
  for r in range(2):
    chunk = lambda n, r=r: data[:, 3 * r : 3 * r + n]
    state, metrics = rounds_lib.run_round(algo, state, chunk, 3, 3, mesh)
  params_K = jax.device_get(state.params_K)
  # The shared leaf is the same on every worker after a sync; the local one is not.
  np.testing.assert_array_equal(params_K["out"][0], params_K["out"][1])
  assert not np.array_equal(params_K["embed"][0], params_K["embed"][1])
  # The global model moved on the shared leaf only.
  anchor = jax.device_get(state.algo.global_params)
  np.testing.assert_array_equal(anchor["out"], params_K["out"][0])
  np.testing.assert_array_equal(anchor["embed"], np.asarray(toy_params()["embed"]))
  assert int(jax.device_get(metrics["next_h"])) == 3
