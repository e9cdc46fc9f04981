"""One renderer for every benchmark: JSON results to markdown tables and lines.

The benchmarks write JSON. A page in ``docs/`` is static prose (written once,
by hand) around generated blocks; each block names its spec and its JSON::

  <!-- begin benchmarks.xla_options:variants docs/xla_options.json -->
  | variant | ... |
  <!-- end -->

Regenerate every block of some pages from their committed JSON (nothing is
measured)::

  python -m benchmarks.render docs/benchmarks.md docs/xla_options.md

``--check`` only reports the pages whose blocks differ from their JSON.

A spec is a :class:`Table` (rows, columns of ``(header, template)``) or
:class:`Lines` (a few lines of fixed text around numbers). A module's specs
live in its ``TABLES`` dict; its optional ``prepare(result) -> result`` adds
derived fields (cells, ratios) before any block is rendered. Templates are
``str.format`` strings over the row (or the result), with two additions: a
spec that starts with ``/x`` divides by ``x`` first (``{flops:/1e9:.1f}``:
GFLOP/s), and a value that is missing, ``None`` or NaN turns the whole cell
(or line) into its fallback.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import re
import string
import sys
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BLOCK = re.compile(
    r"<!-- begin (?P<spec>[\w.]+:\w+) (?P<data>\S+) -->\n.*?<!-- end -->", re.S
)


class Missing(Exception):
  """A template's field is absent, ``None`` or NaN."""


class _Formatter(string.Formatter):

  def get_field(self, field_name, args, kwargs):
    try:
      return super().get_field(field_name, args, kwargs)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
      raise Missing(field_name) from e

  def format_field(self, value, spec):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
      raise Missing(spec)
    if spec.startswith("/"):
      scale, _, spec = spec[1:].partition(":")
      value = value / float(scale)
    return super().format_field(value, spec)


_FORMAT = _Formatter()


def emit(result: dict, path: str = "", indent: int = 2, echo: bool = True) -> None:
  """A benchmark's result as JSON: printed (``echo``) and written to ``path``
  when one is given (its folder made)."""
  text = json.dumps(result, indent=indent)
  if echo:
    print(text, flush=True)
  if path:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
      f.write(text + "\n")


def fmt(template: str, values: dict, fallback: str | None = "-") -> str | None:
  """``template`` filled from ``values``; ``fallback`` if a field is missing."""
  try:
    return _FORMAT.vformat(template, (), values)
  except Missing:
    return fallback


@dataclasses.dataclass(frozen=True)
class Table:
  """A markdown table: one line per element of ``rows(result)``.

  ``columns``: ``(header, template)`` or ``(header, template, fallback)``."""

  rows: Callable[[dict], list]
  columns: tuple
  title: str = ""  # a heading line above the table ('' = none)
  empty: str = ""  # the text when there are no rows ('' = nothing at all)

  def render(self, result: dict) -> str:
    rows = self.rows(result) or []
    if not rows:
      return self.empty
    headers = [c[0] for c in self.columns]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
      cells = [
          fmt(c[1], row, c[2] if len(c) > 2 else "-").replace("|", "\\|")
          for c in self.columns
      ]
      lines.append("| " + " | ".join(cells) + " |")
    title = fmt(self.title, result, "")
    return "\n".join(([title, ""] if title else []) + lines)


@dataclasses.dataclass(frozen=True)
class Lines:
  """Fixed lines around numbers of the result; a line with a missing field is
  left out (``(template, fallback)`` keeps the fallback instead)."""

  lines: tuple
  title: str = ""

  def render(self, result: dict) -> str:
    out = []
    for line in self.lines:
      template, fallback = (line, None) if isinstance(line, str) else line
      text = fmt(template, result, fallback)
      if text is not None:
        out.append(text)
    return "\n".join(([self.title, ""] if self.title and out else []) + out)


def page(result: dict, specs: list) -> str:
  """A whole page: the specs' blocks one after another, blank lines between."""
  blocks = [spec.render(result) for spec in specs]
  return "\n\n".join(b for b in blocks if b) + "\n"


def _load(path: str) -> dict | None:
  full = path if os.path.isabs(path) else os.path.join(ROOT, path)
  if not os.path.exists(full):
    return None
  with open(full) as f:
    return json.load(f)


def block(spec: str, result: dict | None) -> str:
  """One generated block: ``MODULE:NAME`` of ``MODULE.TABLES`` on ``result``."""
  module_name, _, name = spec.partition(":")
  module = importlib.import_module(module_name)
  if result is None:
    return "(no data: its JSON is not there)"
  prepare = getattr(module, "prepare", None)
  return module.TABLES[name].render(prepare(result) if prepare else result)


def fill(text: str, sources: dict[str, dict] | None = None) -> str:
  """``text`` with every generated block rewritten from its JSON: the dict in
  ``sources`` under the block's JSON path, else that file (repository-relative)."""
  sources, cache = sources or {}, {}

  def one(match: re.Match) -> str:
    data = match["data"]
    if data not in cache:
      if data in sources:  # through JSON: a live result renders as its file will
        cache[data] = json.loads(json.dumps(sources[data], default=float))
      else:
        cache[data] = _load(data)
    body = block(match["spec"], cache[data])
    return f"<!-- begin {match['spec']} {data} -->\n{body}\n<!-- end -->"

  return _BLOCK.sub(one, text)


def write(page_path: str, out_path: str, sources: dict[str, dict]) -> None:
  """``page_path`` (a page of ``docs/``, the template) filled from ``sources``
  and written to ``out_path`` (the page itself, or a copy elsewhere)."""
  with open(os.path.join(ROOT, page_path)) as f:
    text = fill(f.read(), sources)
  os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
  with open(out_path, "w") as f:
    f.write(text)


def main(argv: list[str]) -> int:
  check = "--check" in argv
  stale = []
  for path in [a for a in argv if a != "--check"]:
    with open(path) as f:
      text = f.read()
    new = fill(text)
    if new != text:
      stale.append(path)
      if not check:
        with open(path, "w") as f:
          f.write(new)
  if check and stale:
    print("not rendered from their JSON:", *stale)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
