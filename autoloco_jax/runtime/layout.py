"""Where every array of a run lives on a ``replica × fsdp × tensor`` mesh.

The mesh (``replicas.make_mesh``) has the replica axis, which ``shard_map``
maps by hand (``replicas.map_workers``: each device block runs its workers),
and two model axes that the compiler shards (GSPMD), as MaxText and big_vision
do:

* ``fsdp``: each worker's parameters, its AdamW moments, the global parameters
  and the outer momentum are split over these devices (ZeRO-3 / FSDP; Rajbhandari
  et al. 2020, arXiv:1910.02054), and so is each worker's batch; the compiler
  gathers a weight where a matmul needs it and reduce-scatters its gradient;
* ``tensor``: the heads, the MLP's hidden width and the vocabulary are split
  (Megatron-style; Shoeybi et al. 2019, arXiv:1909.08053).

A parameter says what its dimensions mean by logical names (``embed``,
``mlp``, ``vocab``...; the model's ``nn.with_logical_partitioning``), and
:data:`RULES` maps each name to a mesh axis (Flax's logical partitioning,
``nn.logical_to_mesh_axes``). Every other array of the state that has a
parameter's shape (an AdamW moment, the global copy, the momentum, a
residual) is found by its path, which ends in the parameter's path, and gets
the parameter's model axes after its own replica spec:

.. code-block:: text

  params_K['block_0']['mlp']['up']['kernel']      [K, D, F] -> P('replica', 'fsdp', 'tensor')
  inner_opt_K[1][0].mu[...]['up']['kernel']       [K, D, F] -> P('replica', 'fsdp', 'tensor')
  algo.global_params[...]['up']['kernel']         [D, F]    -> P('fsdp', 'tensor')

With ``fsdp = tensor = 1`` nothing changes: the specs are the replica specs
alone and no constraint is added, so every program is the one-axis program.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from autoloco_jax.runtime import replicas

#: Logical axis → mesh axis (MaxText's ``logical_axis_rules``, in small):
#: ``embed`` (the model width) over ``fsdp``; the heads' width, the MLP's
#: hidden width and the vocabulary over ``tensor``; a norm's scale whole.
RULES = (
    ("embed", replicas.FSDP),
    ("heads", replicas.TENSOR),
    ("mlp", replicas.TENSOR),
    ("vocab", replicas.TENSOR),
    ("norm", None),
    # Activations (the model's ``_constrain``): a worker's batch over fsdp, as
    # its tokens are (``replicas.tokens_spec``); their width whole, but for
    # the MLP's hidden width over tensor.
    ("act_batch", replicas.FSDP),
    ("act_embed", None),
    ("act_mlp", replicas.TENSOR),
)


def _path(keys) -> tuple[str, ...]:
  """A key path as plain strings (dict keys, attribute names, indices)."""
  out = []
  for k in keys:
    for field in ("key", "name", "idx"):
      if hasattr(k, field):
        out.append(str(getattr(k, field)))
        break
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class Layout:
  """The mesh and the model axes of every parameter, by path.

  Attributes:
    mesh: the ``replica × fsdp × tensor`` mesh (or a ``jax.sharding.AbstractMesh``
      of that shape, to size a slice this process does not have).
    params: ``((path, shape, spec), ...)``: each parameter's path in the
      params tree, its shape and its spec over the model axes (from its
      logical names and :data:`RULES`); empty without model axes.
  """

  mesh: Mesh
  params: tuple = ()

  @classmethod
  def of(cls, mesh: Mesh, logical: Any = None, shapes: Any = None) -> "Layout":
    """The layout of ``mesh`` for a model whose parameters have the logical
    specs ``logical`` (a tree of ``PartitionSpec`` of logical names, the
    model's ``logical_specs``) and the shapes ``shapes`` (same tree).

    Raises:
      ValueError: a parameter dimension that its mesh axes do not divide.
    """
    if logical is None or not replicas.model_size(mesh) > 1:
      return cls(mesh)
    sizes = dict(mesh.shape)
    specs = jax.tree.leaves_with_path(logical, is_leaf=lambda x: isinstance(x, P))
    shape_of = {_path(p): tuple(s.shape) for p, s in jax.tree.leaves_with_path(shapes)}
    params = []
    for keys, names in specs:
      path = _path(keys)
      spec = nn.logical_to_mesh_axes(tuple(names), RULES)
      spec = P(*(a if a is None or sizes.get(a, 1) > 1 else None for a in spec))
      for dim, axis in zip(shape_of[path], spec):
        if axis is not None and dim % sizes[axis]:
          raise ValueError(
              f"parameter {'/'.join(path)} of shape {shape_of[path]}: dimension "
              f"{dim} is not divisible by mesh.{axis}={sizes[axis]}"
          )
      params.append((path, shape_of[path], spec))
    return cls(mesh, tuple(params))

  def spec(self, keys, shape: tuple[int, ...], manual: P) -> P:
    """The spec of one leaf: its ``manual`` (replica) spec, then, if its path
    ends in a parameter's and its shape ends in that parameter's shape, the
    parameter's model axes on those trailing dimensions."""
    path = _path(keys)
    for param_path, param_shape, spec in self.params:
      n = len(param_path)
      if path[-n:] == param_path and tuple(shape[len(shape) - len(param_shape):]) == param_shape:
        lead = len(shape) - len(param_shape)
        head = tuple(manual) + (None,) * (lead - len(manual))
        return P(*head, *spec)
    return manual

  def specs(self, tree: Any, manual: Any) -> Any:
    """Each leaf's :meth:`spec`; ``manual`` is a prefix tree of replica specs
    (a state's ``specs()``)."""
    full = _broadcast(manual, tree)
    return jax.tree.map_with_path(
        lambda keys, spec, x: self.spec(keys, tuple(getattr(x, "shape", ())), spec), full, tree,
        is_leaf=lambda x: isinstance(x, P),
    )

  def shardings(self, tree: Any, manual: Any) -> Any:
    """``NamedSharding``s of :meth:`specs` on the mesh."""
    return jax.tree.map(
        lambda s: NamedSharding(self.mesh, s), self.specs(tree, manual),
        is_leaf=lambda x: isinstance(x, P),
    )

  def constrain(self, tree: Any, manual: Any) -> Any:
    """``tree`` held to :meth:`shardings` inside a jitted function (the
    outputs of a round keep the state's layout); ``tree`` itself without
    model axes."""
    if not self.params:
      return tree
    return jax.lax.with_sharding_constraint(tree, self.shardings(tree, manual))

  def rules(self):
    """The context in which a round is traced: :data:`RULES` as Flax's
    logical axis rules (the model's activations read them), none without
    model axes."""
    if not self.params:
      return contextlib.nullcontext()
    return nn.logical_axis_rules(RULES)

  def jit_models(self, fn):
    """``jax.jit(fn)`` for a function that returns models (trees of
    parameters) to evaluate: replicated over ``replica``, so every process can
    evaluate them, and split over the model axes like the parameters (no
    device holds a whole model it would not hold in training)."""
    if not self.params:
      return jax.jit(fn, out_shardings=NamedSharding(self.mesh, P()))
    return jax.jit(lambda *args: self.constrain(fn(*args), P()))


def _broadcast(prefix: Any, tree: Any) -> Any:
  """``prefix`` (a tree of specs, some standing for whole subtrees of ``tree``)
  repeated down to ``tree``'s leaves."""
  return jax.tree.map(
      lambda spec, sub: jax.tree.map(lambda _: spec, sub),
      prefix,
      tree,
      is_leaf=lambda x: isinstance(x, P) or x is None,
  )


def as_layout(mesh_or_layout: Mesh | Layout) -> Layout:
  """A :class:`Layout` from either (a bare mesh: no model axes)."""
  if isinstance(mesh_or_layout, Layout):
    return mesh_or_layout
  return Layout(mesh_or_layout)
