"""The registry that picks a training algorithm by its name (``config.algorithm``).

Each algorithm is one module with a frozen dataclass of its hyperparameters,
named with its paper's symbols, a ``from_config(config)`` classmethod that reads
its own config group, and ``build(setup) -> Algorithm``
(``runtime/contract.py``). Adding one is a module and an entry in
:data:`REGISTRY` (``docs/algorithms.md``, "Adding an algorithm").
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from jax.sharding import Mesh

from autoloco_jax.runtime.contract import Algorithm, Setup


#: Algorithm name -> ``module:class`` of its hyperparameters (imported on demand).
REGISTRY = {
    "ddp": "autoloco_jax.algorithms.ddp:DDP",
    "diloco": "autoloco_jax.algorithms.diloco.diloco:DiLoCo",
    "autoloco": "autoloco_jax.algorithms.diloco.autoloco:AutoLoCo",
    "noloco": "autoloco_jax.algorithms.gossip.noloco:NoLoCo",
    "gasloc": "autoloco_jax.algorithms.gossip.gasloc:GASLoC",
}


def hyperparams_class(name: str) -> type:
  """The hyperparameter dataclass registered as ``name``."""
  if name not in REGISTRY:
    raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(REGISTRY)}")
  module, cls = REGISTRY[name].split(":")
  return getattr(importlib.import_module(module), cls)


def from_config(config: Any) -> Any:
  """The typed hyperparameters of ``config.algorithm``, read from its config
  group (validates them: a bad combination is a ``ValueError``)."""
  return hyperparams_class(config.algorithm).from_config(config)


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds the algorithm named by ``config.algorithm``."""
  return from_config(config).build(Setup.from_config(config, loss_fn, mesh))
