"""The README's promises about the outer optimizer: the example runs, and
``autoloco_jax.outer`` needs nothing beyond JAX and optax."""

import os
import re
import subprocess
import sys
import tomllib

from tests.helpers import ROOT

SECTION = "## Use the AutoLoCo outer optimizer in your own training loop"


def _example() -> str:
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  section = readme[readme.index(SECTION) :]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_outer_optimizer_example_runs():
  out = subprocess.run(
      [sys.executable, "-c", _example()],
      cwd=ROOT,
      capture_output=True,
      text=True,
      timeout=300,
      env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )
  assert out.returncode == 0, out.stderr
  lines = [l for l in out.stdout.splitlines() if l.startswith("H=")]
  assert len(lines) == 3
  # A round of H_ref steps is the uncorrected step: r_t = 1, beta_t = beta.
  assert lines[-1] == "H=20: r_t=1.00 beta_t=0.900", lines
  # A longer round accumulates more inner lr: r_t > 1 and a lower momentum.
  r0, beta0 = (float(x.split("=")[1]) for x in lines[0].split(": ")[1].split())
  assert r0 > 1.5 and beta0 < 0.9


def test_outer_imports_nothing_beyond_jax_and_optax():
  probe = (
      "import sys; {imports}; " "print(sorted({{m.split('.')[0] for m in sys.modules}}))"
  )

  def top_level(imports):
    out = subprocess.run(
        [sys.executable, "-c", probe.format(imports=imports)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, out.stderr
    return set(eval(out.stdout))

  baseline = top_level("import jax, optax")
  extra = top_level("import autoloco_jax.outer") - baseline - {"autoloco_jax"}
  assert not extra, f"autoloco_jax.outer imports more than JAX and optax: {sorted(extra)}"


def test_core_install_needs_only_jax_and_optax():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    project = tomllib.load(f)["project"]
  names = {re.split(r"[<>=\[ ]", d)[0].lower() for d in project["dependencies"]}
  assert names == {"jax", "optax", "numpy"}
  train = {
      re.split(r"[<>=\[ ]", d)[0].lower()
      for d in project["optional-dependencies"]["train"]
  }
  assert {"tensorflow-datasets", "orbax-checkpoint", "matplotlib", "flax"} <= train
