"""A misspelt key gets "did you mean" (issue 51, WEAK): ``algo.oversampel_cap=2`` got Hydra's advice to add a ``+``,
which the schema check then refused; now both refusals name the closest known key (trainer/config/suggest.py)."""

from __future__ import annotations

import subprocess

import pytest

import dist_helpers as dh
from recipe_utils import compose
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
