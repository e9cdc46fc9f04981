"""``experiments/evidence.sh``, the evidence study's runner: which phases it
starts, in which order, how many copies, and where it starts for ``many``,
``long`` or
``EVIDENCE_FROM``. A stand-in ``python`` on the PATH records each call instead
of training (the phases themselves: tests/test_study_modules.py)."""

import pytest

from tests.helpers import script_calls


def calls(tmp_path, *args, **env):
  """The ``--study`` arguments of the sweeps the script starts, in order."""
  out = script_calls(tmp_path, "experiments/evidence.sh", *args, **env)
  if not isinstance(out, list):
    return out
  return [l.split("configs/studies/evidence.py:")[1] for l in out]


def test_every_phase_in_order_two_copies_each(tmp_path):
  out = calls(tmp_path, "base", "python", "quick")
  phases = ("regime", "coarse", "tune", "design", "report")
  assert out == [f"{p},base,python,quick" for p in phases for _ in range(2)]


@pytest.mark.parametrize("regime", ["many", "long"])
def test_pruned_regimes_start_at_coarse_and_evidence_from_skips_phases(tmp_path, regime):
  from configs.studies import evidence

  assert calls(tmp_path, regime, "python", EVIDENCE_COPIES="1") == [
      f"{p},{regime},python" for p in evidence.regime_phases(regime)
  ]
  assert evidence.regime_phases(regime)[0] == "coarse"
  (tmp_path / "calls.txt").unlink()
  assert calls(tmp_path, "base", "python", EVIDENCE_FROM="report", EVIDENCE_COPIES="1") == [
      "report,base,python"
  ]


@pytest.mark.parametrize("args, env, message", [
    (("base",), {}, "corpus"),
    (("base", "python"), {"EVIDENCE_FROM": "nope"}, "unknown phase nope"),
])
def test_bad_arguments_fail_with_a_message(tmp_path, args, env, message):
  proc = calls(tmp_path, *args, **env)
  assert proc.returncode != 0 and message in proc.stderr
