"""The registry that picks a training algorithm by its name (``config.algorithm``).

Each algorithm is one module with a frozen dataclass of its hyperparameters,
named with its paper's symbols, a ``from_config(config)`` classmethod that reads
its own config group and the shared ones it composes (each through its typed
group, which checks the group's ranges), ``build(setup) -> Algorithm``
(``runtime/contract.py``) around a sync of the shape of ``round_sync.py``, and
class attributes that say which shared settings it implements (``streams``,
``compresses``, ``averages``, ``controllers``): :func:`from_config` refuses the others here,
once, naming the setting. Adding one is a module and an entry in
:data:`REGISTRY` (``docs/algorithms.md``, "Adding an algorithm").
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from jax.sharding import Mesh

from autoloco_jax.algorithms.diloco import stream
from autoloco_jax.compression import exchange
from autoloco_jax.runtime.contract import Algorithm, Setup

#: Algorithm name -> ``module:class`` of its hyperparameters (imported on demand).
REGISTRY = {
    "ddp": "autoloco_jax.algorithms.ddp:DDP",
    "diloco": "autoloco_jax.algorithms.diloco.diloco:DiLoCo",
    "autoloco": "autoloco_jax.algorithms.diloco.autoloco:AutoLoCo",
    "noloco": "autoloco_jax.algorithms.gossip.noloco:NoLoCo",
    "gasloc": "autoloco_jax.algorithms.gossip.gasloc:GASLoC",
    "gossip_adamw": "autoloco_jax.algorithms.gossip.gossip_adamw:GossipAdamW",
}

#: The config groups the algorithms read through typed groups, which check
#: their fields' ranges themselves (``config_check.validate`` leaves them to
#: :func:`from_config`).
GROUPS = (
    "interval",
    "stream",
    "compress",
    "diloco",
    "autoloco",
    "noloco",
    "gasloc",
    "gossip_adamw",
    "gossip",
)


def hyperparams_class(name: str) -> type:
  """The hyperparameter dataclass registered as ``name``."""
  if name not in REGISTRY:
    raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(REGISTRY)}")
  module, cls = REGISTRY[name].split(":")
  return getattr(importlib.import_module(module), cls)


def _those(supports: str) -> str:
  """The registered names whose class sets ``supports``, as prose."""
  names = [n for n in REGISTRY if getattr(hyperparams_class(n), supports)]
  return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def refuse_unsupported(hparams: Any, config: Any) -> None:
  """Refuses the shared settings the algorithm does not implement, as its
  class declares them: streaming (``streams``), compressed messages
  (``compresses``), the senders' mean of them (``averages``) and interval
  controllers (``controllers``; None: any).

  Raises:
    ValueError: naming the setting.
  """
  name = hparams.name
  compression = exchange.Compression.from_config(config)
  if not hparams.streams and not stream.Stream.from_config(config).plain:
    raise ValueError(
        f"{name} does not stream: stream.fragments must be 1 and stream.tau 0 "
        f"(streaming and overlapped syncs are implemented for {_those('streams')})"
    )
  if not hparams.compresses and not compression.plain:
    raise ValueError(
        f"{name} sends its messages uncompressed: compress.codec must be "
        "'identity' and compress.ef_beta unset (codecs and error feedback are "
        f"implemented for {_those('compresses')})"
    )
  if not hparams.averages and compression.aggregate != "mean":
    raise ValueError(
        f"{name} mixes its messages by its own rule: compress.aggregate must be "
        f"'mean' (the senders' mean is implemented for {_those('averages')})"
    )
  controller = hparams.interval.controller
  if hparams.controllers is not None and controller not in hparams.controllers:
    raise ValueError(
        f"{name} runs a fixed interval: interval.controller must be one of "
        f"{hparams.controllers}, got {controller!r}"
    )


def from_config(config: Any) -> Any:
  """The typed hyperparameters of ``config.algorithm``, read from its config
  groups (validates them, and refuses settings it does not implement: a bad
  value or combination is a ``ValueError`` naming it)."""
  hparams = hyperparams_class(config.algorithm).from_config(config)
  refuse_unsupported(hparams, config)
  return hparams


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds the algorithm named by ``config.algorithm``."""
  return from_config(config).build(Setup.from_config(config, loss_fn, mesh))
