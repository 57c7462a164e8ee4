"""A wheel that runs (issue 58): ``pip wheel .`` installed into a fresh venv outside the checkout composes every entry
point's config, prints each ``--help`` and runs the tiny DPO recipe for 2 steps, with ``conf/`` shipped as
``selectrust/conf/`` (setup.py) and found by :mod:`selectrust.core.conf_dir`.

The slow test is ``.ci/run``'s "wheel check" step (the slow-suite step leaves this file out). It builds without
isolation and installs with ``--no-deps`` into a venv made with ``--system-site-packages``, so torch and the rest are
the ones already installed; every command runs from a directory outside the checkout with no ``PYTHONPATH``, and the
test checks that the modules came from the venv (not from the checkout or an editable install).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The top-level names the wheel installs, each with its reason in docs/architecture.md ("What the wheel installs").
INSTALLED = {"bench", "demos", "eval_hooks", "launch", "recipes", "selectrust", "trainer"}


def entry_points() -> list[str]:
    """The recipes with a ``@hydra.main`` (each one ``python -m recipes.<name>``)."""
    return sorted(p.stem for p in (ROOT / "recipes").glob("*.py") if "@hydra.main(" in p.read_text())


def test_every_recipe_composes_from_the_one_conf_dir():
    """Every ``@hydra.main`` takes ``config_path=str(CONF_DIR)``: the checkout's ``conf/``, or the wheel's copy."""
    for name in entry_points():
        tree = ast.parse((ROOT / "recipes" / f"{name}.py").read_text())
        paths = [ast.unparse(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and ast.unparse(node.func) == "hydra.main" for k in node.keywords if k.arg == "config_path"]
        assert paths == ["str(CONF_DIR)"], (name, paths)
    from selectrust.core.conf_dir import CONF_DIR

    assert CONF_DIR == ROOT / "conf" and (CONF_DIR / "dpo.yaml").is_file()  # a checkout reads its own conf/


def test_no_installed_top_level_name_is_a_namespace_package():
    for name in INSTALLED:
        assert (ROOT / name / "__init__.py").is_file(), name


def _checkout_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


def _run(cmd, *, cwd, env, timeout=300) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} -> exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
def test_the_wheel_installed_outside_the_checkout_runs(tmp_path):
    start = time.monotonic()
    src = tmp_path / "src"  # a copy, so that the build's build/ and *.egg-info stay out of the checkout
    for f in _checkout_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_bytes((ROOT / f).read_bytes())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
          str(src)], cwd=tmp_path, env=env)
    (wheel,) = (tmp_path / "dist").glob("selectrust-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == INSTALLED
    shipped = {n.removeprefix("selectrust/conf/") for n in names if n.startswith("selectrust/conf/")}
    assert shipped == {p.relative_to(ROOT / "conf").as_posix() for p in (ROOT / "conf").rglob("*.yaml")}

    venv = tmp_path / "venv"  # the installed torch, transformers, hydra... are reused; only this project is new
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path, env=env)
    work = tmp_path / "work"
    work.mkdir()

    where = _run([python, "-c", "import importlib; from selectrust.core.conf_dir import CONF_DIR; "
                  f"print(CONF_DIR); [print(importlib.import_module(n).__file__) for n in {sorted(INSTALLED)}]"],
                 cwd=work, env=env).stdout.split()
    site = venv.resolve()
    assert all(Path(p).resolve().is_relative_to(site) for p in where), where  # none from the checkout

    for name in entry_points():  # --help composes the entry point's config from CONF_DIR (else: "does not compose")
        helped = _run([python, "-m", f"recipes.{name}", "--help"], cwd=work, env=env).stdout
        assert "Keys: KEY = value" in helped and "does not compose" not in helped, (name, helped[:2000])
        assert "Config groups" in helped or name == "demo", (name, helped[:2000])  # the demo's config has no groups
    # Hydra's own composition through @hydra.main(config_path=str(CONF_DIR)) (the same line in every recipe: the
    # fast test above), on a recipe that imports no torch
    composed = _run([python, "-m", "recipes.evaluate", "--cfg", "job"], cwd=work, env=env).stdout
    assert isinstance(yaml.safe_load(composed), dict) and "eval" in yaml.safe_load(composed), composed[:2000]
    assert "usage:" in _run([venv / "bin" / "selectrust-eval", "--help"], cwd=work, env=env).stdout

    run_dir = tmp_path / "run"
    _run([python, "-m", "recipes.dpo", "trainer.max_steps=2", f"trainer.run_dir={run_dir}", "eval=none"],
         cwd=work, env=env)
    steps = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(steps) >= 2 and (run_dir / "run_complete.json").is_file()
    print(f"wheel check: {time.monotonic() - start:.0f} s")
