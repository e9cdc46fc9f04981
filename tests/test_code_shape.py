"""The package's shape (issue 39): no module over 600 lines, no function over 90
lines of code (docstrings, comments and blank lines not counted)."""

import ast
import pathlib

import autoloco_jax

PACKAGE = pathlib.Path(autoloco_jax.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_CODE_LINES = 90


def code_lines(source: str, node: ast.AST) -> int:
  """Lines of ``node`` that hold code: not blank, not only a comment, not its
  docstrings (or any string statement)."""
  lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
  strings = set()
  for sub in ast.walk(node):
    if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant):
      if isinstance(sub.value.value, str):
        strings.update(range(sub.lineno, sub.end_lineno + 1))
  count = 0
  for i, line in enumerate(lines, start=node.lineno):
    text = line.strip()
    if text and not text.startswith("#") and i not in strings:
      count += 1
  return count


def _modules():
  return sorted(PACKAGE.rglob("*.py"))


def test_no_module_over_600_lines():
  long = {
      str(p.relative_to(PACKAGE)): n
      for p in _modules()
      if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
  }
  assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_90_code_lines():
  long = {}
  for path in _modules():
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        n = code_lines(source, node)
        if n > MAX_FUNCTION_CODE_LINES:
          long[f"{path.relative_to(PACKAGE)}:{node.name}"] = n
  assert not long, f"functions over {MAX_FUNCTION_CODE_LINES} code lines: {long}"


def test_code_lines_leave_out_docstrings_comments_and_blanks():
  source = 'def f():\n  """Doc\n  string."""\n  # why\n\n  x = 1\n  return x\n'
  (node,) = ast.parse(source).body
  assert code_lines(source, node) == 3  # def, x = 1, return
