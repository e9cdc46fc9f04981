"""The package's import graph: no cycles, and the data layers import one way.

Imports are read from the source with `ast`, function-level ones included, so
an import deferred to break a cycle at load time still counts as an edge (those
under `if TYPE_CHECKING:`, for annotations only, do not).
"""

import ast
import pathlib

import autoloco_jax

PACKAGE = pathlib.Path(autoloco_jax.__file__).parent

#: The data path, lowest layer first: a layer imports only layers before it.
#: The Shakespeare builder is a source's backend, so it comes before `sources`.
DATA_LAYERS = ("shakespeare", "sources", "tokenizers", "data", "pipeline")


def _modules() -> dict[str, pathlib.Path]:
  """Every module of the package by dotted name (`autoloco_jax.x.y`)."""
  modules = {}
  for path in PACKAGE.rglob("*.py"):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts.pop()
    modules[".".join(parts)] = path
  return modules


def _runtime_nodes(node: ast.AST):
  """Every node under `node` but those in `if TYPE_CHECKING:` blocks (imports
  for annotations only, never run)."""
  for child in ast.iter_child_nodes(node):
    if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
      yield from (n for stmt in child.orelse for n in _runtime_nodes_of(stmt))
      continue
    yield child
    yield from _runtime_nodes(child)


def _runtime_nodes_of(stmt: ast.AST):
  yield stmt
  yield from _runtime_nodes(stmt)


def _imports(name: str, path: pathlib.Path, modules: dict) -> set[str]:
  """The package's modules that module `name` imports anywhere in its source."""
  package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
  found = set()
  for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names if alias.name in modules)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parent + ([base] if base else []))
      for alias in node.names:
        target = f"{base}.{alias.name}"
        target = target if target in modules else base
        if target in modules:
          found.add(target)
  found.discard(name)
  return found


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_data_layers_import_one_way():
  graph = _graph()
  for i, layer in enumerate(DATA_LAYERS):
    later = {f"autoloco_jax.{m}" for m in DATA_LAYERS[i + 1 :]}
    wrong = sorted(graph[f"autoloco_jax.{layer}"] & later)
    assert not wrong, f"{layer} imports {wrong}, a later layer of {DATA_LAYERS}"


def test_no_import_cycles():
  graph = _graph()
  state: dict[str, int] = {}  # 1: on the current path, 2: done
  path: list[str] = []
  cycles = []

  def visit(module):
    state[module] = 1
    path.append(module)
    for target in sorted(graph[module]):
      if state.get(target) == 1:
        cycles.append(" -> ".join(path[path.index(target) :] + [target]))
      elif target not in state:
        visit(target)
    path.pop()
    state[module] = 2

  for module in sorted(graph):
    if module not in state:
      visit(module)
  assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_graph_sees_deferred_imports():
  # sources imports shakespeare inside functions (TFDS only when needed).
  graph = _graph()
  assert "autoloco_jax.shakespeare" in graph["autoloco_jax.sources"]
  assert graph["autoloco_jax.data"] >= {"autoloco_jax.sources", "autoloco_jax.tokenizers"}
