"""A misspelt key gets "did you mean" (issue 51, WEAK): ``algo.oversampel_cap=2`` got Hydra's advice to add a ``+``,
which the schema check then refused; now both refusals name the closest known key (trainer/config/suggest.py)."""

from __future__ import annotations

import subprocess

import pytest

import dist_helpers as dh
from recipe_utils import ROOT, compose
from selectrust.core.errors import ConfigError
from trainer.config import validate_grpo


@pytest.mark.parametrize("recipe,override,guess", [
    ("grpo", "algo.oversampel_cap=2", "algo.oversample_cap"),
    ("grpo", "algoo.oversample_cap=2", "algo.oversample_cap"),   # the misspelt part is a group
    ("evaluate", "generation.batchsize=8", "generation.batch_size"),
])
def test_a_misspelt_key_is_one_line_naming_the_closest_known_key(tmp_path, recipe, override, guess):
    env = dh.env()
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run(dh.command(recipe, ["recipe=grpo_tiny"] * (recipe == "grpo") + [override]),
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    key = override.split("=")[0]
    assert lines[0].startswith(f"error: unknown config key '{key}'") and f"did you mean '{guess}'?" in lines[0]
    assert "+" not in lines[0]  # no advice to append the misspelt key


def test_a_plus_key_the_schema_does_not_know_names_the_closest_known_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'algo.oversampel_cap' \(did you mean "
                                          r"'algo.oversample_cap'\?\)"):
        validate_grpo(compose("grpo", ["recipe=grpo_tiny", "+algo.oversampel_cap=2"]))
    with pytest.raises(ConfigError) as e:  # nothing close: no guess
        validate_grpo(compose("grpo", ["recipe=grpo_tiny", "+algo.zzzzzz=2"]))
    assert "did you mean" not in str(e.value)


# ---- a broken plugin chosen by a key: named as that key's own kind, never offered (issue 59 WEAK) ---------------
_GROUPS = ("selectrust.backends", "selectrust.families", "selectrust.dpo_losses", "selectrust.data_sources",
           "selectrust.demos")


@pytest.fixture(scope="module")
def same_names_everywhere(tmp_path_factory):
    """A distribution on the path declaring two broken plugins, ``brokentype`` (not the kind's object) and
    ``brokenold`` (its module missing), under the same names in five registries."""
    root = tmp_path_factory.mktemp("same_names_site")
    (root / "fakeplug_s59.py").write_text("NUMBER = 42\n")
    info = root / "fakeplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\nbrokentype = fakeplug_s59:NUMBER\nbrokenold = no_such_module_s59:X\n" for g in _GROUPS))
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)]), "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("script, override, kind", [
    ("evaluate", "eval.family=brokentype", "family"),
    ("evaluate", "eval.family=brokenold", "family"),
    ("dpo", "algo.loss_type=brokenold", "DPO loss"),
    ("dpo", "algo.loss_type=brokentype", "DPO loss"),
    ("demo", "demo=brokentype", "demo"),
    ("evaluate", "generation.backend=brokenold", "generation backend"),
])
def test_a_broken_plugin_is_named_as_the_keys_own_kind_and_never_offered(script, override, kind,
                                                                         same_names_everywhere):
    import subprocess
    import sys

    name = override.split("=")[1]
    ran = subprocess.run([sys.executable, f"recipes/{script}.py", override], capture_output=True, text=True,
                         cwd=ROOT, env=same_names_everywhere, timeout=300)
    errors = [line for line in ran.stderr.splitlines() if not line.startswith("warning: ")]
    assert ran.returncode == 2 and len(errors) == 1, ran.stderr[-3000:]
    assert errors[0].startswith(f"error: {kind} plugin {name!r} cannot be used"), errors[0]
    offered = errors[0].rsplit(f"or choose another {kind}: ", 1)[-1]
    assert "broken" not in offered, errors[0]


@pytest.mark.parametrize("recipe,keys", [
    ("evaluate", ["eval.max_new_tokens"]),
    ("grpo", ["algo.max_new_tokens", "eval.max_new_tokens"]),
])
def test_a_key_of_another_group_is_pointed_to_not_told_to_append(tmp_path, recipe, keys):
    """Issue 59 WEAK: ``generation.max_new_tokens=N`` got Hydra's "use +generation.max_new_tokens", a dead end."""
    env = dh.env()
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run(dh.command(recipe, ["recipe=grpo_tiny"] * (recipe == "grpo") + ["generation.max_new_tokens=8"]),
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines[0].startswith("error: unknown config key 'generation.max_new_tokens'"), lines[0]
    assert all(k in lines[0] for k in keys) and "+" not in lines[0], lines[0]
    if recipe == "evaluate":
        assert "algo." not in lines[0]
