"""Old import paths (the fourth cut moved them; README "Moved in this release") fail with a pointer to the new home
instead of a bare ModuleNotFoundError (issue 59 WEAK): a plugin author learns where the module went."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from recipe_utils import ROOT


@pytest.mark.parametrize("old,new", [
    ("eval_hooks.core", "selectrust.core"),
    ("eval_hooks.core.io", "selectrust.core"),
    ("eval_hooks.model", "selectrust.model"),
    ("eval_hooks.generation", "selectrust.generation"),
    ("eval_hooks.generation.backends", "selectrust.generation"),
    ("trainer.dpo_losses", "trainer.dpo.losses"),
    ("trainer.model.pairs", "trainer.logprobs (its pairs: trainer.dpo.pairs)"),  # the parent is imported first
    ("trainer.core.run", "trainer.runtime"),
    ("trainer.evaluation", "trainer.eval_bridge"),
    ("trainer.data.sft_data", "trainer.sft.data"),
    ("eval_hooks.vocab", "selectrust.conditions"),
])
def test_an_old_import_path_names_the_new_home(old, new):
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module(old)
    assert f"moved to {new}" in str(e.value) and "README" in str(e.value), str(e.value)
    assert isinstance(e.value, ImportError)  # `except ImportError` still catches it


def test_a_module_that_never_existed_is_a_plain_module_not_found():
    with pytest.raises(ModuleNotFoundError) as e:
        importlib.import_module("eval_hooks.no_such_module_59")
    assert "moved" not in str(e.value)


def test_the_pointer_in_a_fresh_interpreter():
    p = subprocess.run([sys.executable, "-c", "from eval_hooks.core.io import DataError"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert p.returncode == 1 and "eval_hooks.core moved to selectrust.core" in p.stderr, p.stderr[-2000:]
