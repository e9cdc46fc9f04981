"""The package's import graph: no cycles, the layers of ``docs/architecture.md``
import one way, and ``configs/`` never imports ``experiments/``.

Imports are read from the source with `ast`, function-level ones included, so
an import deferred to break a cycle at load time still counts as an edge (those
under `if TYPE_CHECKING:`, for annotations only, do not).
"""

import ast
import pathlib

import autoloco_jax

PACKAGE = pathlib.Path(autoloco_jax.__file__).parent

#: The package's layers, lowest first (``docs/architecture.md``): a module
#: imports modules of its own subpackage and of lower layers only. Subpackages
#: of one layer do not import each other.
LAYERS = (
    ("outer", "ranges"),  # standalone: JAX, optax and the standard library
    ("data", "model", "runtime"),
    ("compression",),
    ("algorithms",),
    ("sim",),
    ("run",),
)

#: Within ``algorithms``: the families and DDP do not import each other; the
#: registry, which builds any of them by name, imports them all.
FAMILIES = ("algorithms.diloco", "algorithms.gossip", "algorithms.ddp")

#: The data path, lowest layer first: a layer imports only layers before it.
#: The Shakespeare builder is a source's backend, so it comes before `sources`;
#: the shard readers are the `parquet` and `jsonl` sources, so they do too.
DATA_LAYERS = tuple(
    f"data.{m}"
    for m in ("shakespeare", "shards", "sources", "tokenizers", "corpus", "pipeline")
)


def _modules(package: pathlib.Path = PACKAGE) -> dict[str, pathlib.Path]:
  """Every module of ``package`` by dotted name (`autoloco_jax.x.y`)."""
  modules = {}
  for path in package.rglob("*.py"):
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


def _graph(package: pathlib.Path = PACKAGE) -> dict[str, set[str]]:
  modules = _modules(package)
  return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_data_layers_import_one_way():
  graph = _graph()
  for i, layer in enumerate(DATA_LAYERS):
    later = {f"autoloco_jax.{m}" for m in DATA_LAYERS[i + 1 :]}
    wrong = sorted(graph[f"autoloco_jax.{layer}"] & later)
    assert not wrong, f"{layer} imports {wrong}, a later layer of {DATA_LAYERS}"


def _part(module: str) -> tuple[int, str]:
  """``(layer index, top subpackage)`` of ``autoloco_jax.<sub>...``."""
  top = module.split(".")[1] if module.count(".") else ""
  for i, layer in enumerate(LAYERS):
    if top in layer:
      return i, top
  raise AssertionError(f"{module} is in no layer of {LAYERS}: add it to one")


def test_layers_import_one_way():
  graph = _graph()
  wrong = []
  for module, targets in graph.items():
    if module == "autoloco_jax":
      continue
    layer, top = _part(module)
    for target in targets:
      t_layer, t_top = _part(target)
      if t_top != top and t_layer >= layer:
        wrong.append(f"{module} -> {target}")
  assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_algorithm_families_do_not_import_each_other():
  graph = _graph()
  family = lambda m: next((f for f in FAMILIES if m.startswith(f"autoloco_jax.{f}")), None)
  wrong = [
      f"{m} -> {t}"
      for m, targets in graph.items()
      for t in targets
      if family(m) and family(t) and family(m) != family(t)
  ]
  assert not wrong, "\n".join(wrong)


def test_configs_never_import_experiments():
  root = PACKAGE.parent / "configs"
  wrong = []
  for path in root.rglob("*.py"):
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""]
      wrong += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "experiments"]
  assert not wrong, wrong


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
  assert "autoloco_jax.data.shakespeare" in graph["autoloco_jax.data.sources"]
  assert graph["autoloco_jax.data.corpus"] >= {"autoloco_jax.data.sources", "autoloco_jax.data.tokenizers"}


def _experiment_floors() -> dict[str, int | None]:
  """``experiments.<file>`` -> its floor in ``docs/architecture.md``'s table of
  ``experiments/`` (None: apart)."""
  import re

  doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
  section = doc.split("## From runs to verdicts", 1)[1].split("\n## ", 1)[0]
  floors = {}
  for floor, files in re.findall(r"^\| *(\d+|apart) *\| ([^|]+)\|", section, re.M):
    for name in re.findall(r"`(\w+)\.py`", files):
      floors[f"experiments.{name}"] = None if floor == "apart" else int(floor)
  return floors


def test_experiments_import_down_the_floors_of_architecture_md():
  """Every file of ``experiments/`` has a floor in the architecture's table, and
  imports only files on lower floors; a file marked apart imports none and none
  imports it."""
  graph = _graph(PACKAGE.parent / "experiments")
  graph.pop("experiments")
  floors = _experiment_floors()
  assert sorted(floors) == sorted(graph), "the table and experiments/ differ"
  wrong = []
  for module, targets in graph.items():
    for target in targets - {"experiments"}:
      f, t = floors[module], floors[target]
      if f is None or t is None or t >= f:
        wrong.append(f"{module} (floor {f}) -> {target} (floor {t})")
  assert not wrong, "\n".join(sorted(wrong))


def _third_party_imports(folders: tuple[str, ...]) -> dict[str, str]:
  """The top-level names imported anywhere under ``folders`` (relative to the
  repository root) that are neither the standard library nor the repository's own,
  each with one file that imports it."""
  import sys

  root = PACKAGE.parent
  own = {p.name for p in root.iterdir() if p.is_dir()} | {p.stem for p in root.glob("*.py")}
  found = {}
  for folder in folders:
    for path in (root / folder).rglob("*.py"):
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
          names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
          names = [node.module]
        else:
          continue
        for name in names:
          top = name.split(".")[0]
          if top not in sys.stdlib_module_names and top not in own:
            found.setdefault(top, str(path.relative_to(root)))
  return found


#: Imported only where the code says it is optional (a torch reference that the
#: tests skip without torch; benchmarks that compare against torch on a device).
OPTIONAL = {"torch"}


def test_every_imported_package_is_declared():
  # Each third-party package the code imports is pinned in requirements.txt by
  # its distribution's name, not only pulled in as another package's dependency.
  import importlib.metadata
  import re

  root = PACKAGE.parent
  pinned = {
      re.split(r"[=<>\[ ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
      for line in (root / "requirements.txt").read_text().splitlines()
      if line.strip() and not line.startswith("#")
  }
  dists = importlib.metadata.packages_distributions()
  imports = _third_party_imports(("autoloco_jax", "experiments", "configs", "benchmarks", "tests"))
  missing = {
      name: where
      for name, where in imports.items()
      if name not in OPTIONAL
      and not any(d.lower().replace("_", "-") in pinned for d in dists.get(name, [name]))
  }
  assert not missing, f"imported but not in requirements.txt: {missing}"
