"""The results page and the studies' claims pages are generated
(``experiments.results_page``): the committed pages are what the generator
writes from the committed reports, so no word can drift from its reading; the
documented command runs; no prose around the tables types a verdict word."""

import os
import re
import shlex
import subprocess
import sys

from configs import claims as records
from experiments import results_page
from tests import test_documented_commands as documented
from tests.helpers import ROOT

#: The words only a reading may write.
VERDICT_WORDS = re.compile(r"\b(better|worse|inconclusive|reproduced|holds|fails|outperforms)\b", re.I)


def _committed(path: str) -> str:
  with open(os.path.join(ROOT, path)) as f:
    return f.read()


def test_the_committed_results_page_is_the_generated_one():
  """Run ``python -m experiments.results_page`` after a report or a record changes."""
  assert results_page.page(ROOT) == _committed("docs/results.md")


def test_the_committed_claims_pages_are_the_generated_ones():
  rs = results_page.readings(ROOT)
  for path in records.STUDY_PAGES:
    assert results_page.study_page(path, rs) == _committed(path), path


def test_the_page_is_short_and_lists_every_claim():
  text = _committed("docs/results.md")
  assert len(text.splitlines()) <= 300
  for c in records.CLAIMS:
    assert f"| {c.id} | " in text, c.id


def test_no_verdict_word_is_typed_in_the_prose():
  """Section contexts, questions and notes are data; their verdicts come from readings."""
  prose = [s.context for s in records.SECTIONS] + [q for q, _ in records.WHEN]
  prose += [c.note for c in records.CLAIMS] + [results_page.HEAD.split("How to read")[0]]
  typed = [p for p in prose if VERDICT_WORDS.search(p)]
  assert not typed, typed


def test_which_method_when_follows_the_readings():
  rs = results_page.readings(ROOT)
  lines = results_page.when(rs)
  for (question, ids), line in zip(records.WHEN, lines[2:]):
    assert line.startswith(f"- **{question}**")
    for i in ids:
      word = rs[i].outcome
      group = re.search(rf"(?:^|; |\*\*: )(?<!not ){word}: ([^;]*)", line)
      assert group and f"{i} (" in group[1], (i, word, line)


def test_documented_command_writes_the_committed_pages(tmp_path):
  """The command the claim records' and studies' docstrings show, writing into
  a temporary folder: the same pages as the committed ones."""
  commands = {c for _, c in documented.documented_commands() if "experiments.results_page" in c}
  assert len(commands) == 1, commands
  args = shlex.split(commands.pop())[1:] + [f"--docs={tmp_path}"]
  proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (tmp_path / "results.md").read_text() == _committed("docs/results.md")
  for path in records.STUDY_PAGES:
    written = tmp_path / os.path.relpath(path, "docs")
    assert written.read_text() == _committed(path), path
