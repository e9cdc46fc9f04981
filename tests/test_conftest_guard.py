"""The suite's guard: a test that requests a training fixture (``helpers.trains``)
without the slow mark fails before the fixture runs (``tests/conftest.py``)."""

import textwrap

import pytest

from tests import conftest

PROBE = """
import pytest
from tests.helpers import trains

TRAINED = []

@pytest.fixture(scope="module")
@trains
def heavy():
  TRAINED.append(1)
  return 1

@pytest.fixture
def light(heavy):  # the training fixture reached through another one
  return heavy

def test_unmarked(light):
  pass

@pytest.mark.slow
def test_marked(light):
  pass

def test_untouched():
  pass
"""


class _Outcomes:
  """Records each test's outcome, setup errors included."""

  def __init__(self):
    self.by_name = {}

  def pytest_runtest_logreport(self, report):
    name = report.nodeid.split("::")[-1]
    if report.failed or report.when == "call":
      self.by_name.setdefault(name, report.outcome if report.when == "call" else "error")


def test_a_training_fixture_without_the_slow_mark_fails(tmp_path):
  probe = tmp_path / "test_probe.py"
  probe.write_text(textwrap.dedent(PROBE))
  outcomes = _Outcomes()
  pytest.main(
      [str(probe), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts="],
      plugins=[conftest, outcomes],
  )
  assert outcomes.by_name == {
      "test_unmarked": "error",
      "test_marked": "passed",
      "test_untouched": "passed",
  }
