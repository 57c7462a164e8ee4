"""Every bad model source is one line naming the path and what is wrong, exit 2, before any model loads (issue 51,
BAD 6 and 7), in evaluate, dpo and mine_pairs: a missing, empty or incomplete directory, truncated weights, a text
or random file named .gguf, ``pkg:`` of a package absent or holding no GGUF, a hub id while offline, and a damaged
cache entry named by its directory. Each case was a traceback (exit 1), or a line about something else.

In-process through the error contract each recipe's ``__main__`` applies (``run_with_contract`` with the trainers'
``config_errors()``); one subprocess per recipe checks the command line itself. transformers' ``from_pretrained`` is
made to fail the test if it is reached."""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

import dist_helpers as dh
from recipe_utils import run_recipe

RECIPES = {"evaluate": "out_dir", "dpo": "trainer.run_dir", "mine_pairs": "out_dir"}
FIXTURES = dh.REPO / "tests" / "data" / "eval"


@pytest.fixture
def no_model_loads(monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def refuse(*args, **kwargs):
        raise AssertionError(f"a model or tokenizer was loaded: {args}")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse)


def _copy_tiny(tiny_model_dir, dst, *, manifest: bool):
    shutil.copytree(tiny_model_dir, dst)
    if not manifest:
        (dst / "COMPLETE").unlink()
    return dst


def _case(name: str, tmp_path, tiny_model_dir, monkeypatch) -> tuple[str, str]:
    """``(model.path, what the line must say)`` of one bad source, made under ``tmp_path``."""
    if name == "missing dir":
        return str(tmp_path / "no_such_model"), "does not exist"
    if name == "empty dir":
        (tmp_path / "empty").mkdir()
        return str(tmp_path / "empty"), "the model directory is empty"
    if name == "no config.json":
        d = _copy_tiny(tiny_model_dir, tmp_path / "noconfig", manifest=False)
        (d / "config.json").unlink()
        return str(d), "holds no config.json"
    if name == "truncated safetensors":
        d = _copy_tiny(tiny_model_dir, tmp_path / "cut", manifest=False)
        w = d / "model.safetensors"
        os.truncate(w, w.stat().st_size // 2)
        return str(d), f"model.safetensors is truncated: {w.stat().st_size} bytes found"
    if name == "text file .gguf":
        (tmp_path / "model.gguf").write_text("this is not a model\n")
        return str(tmp_path / "model.gguf"), "is not a GGUF file (it starts b'this'"
    if name == "random .gguf":
        (tmp_path / "random.gguf").write_bytes(random.Random(0).randbytes(4096))
        return str(tmp_path / "random.gguf"), "is not a GGUF file"
    if name == "pkg not installed":
        return "pkg:no_such_pkg_xyz", "the package 'no_such_pkg_xyz' is not installed"
    if name == "pkg without gguf":
        return "pkg:json", "the package 'json' is installed"
    if name == "hub id offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        return "selectrust-tests/no-such-model", "not in the Hugging Face cache while downloads are off"
    assert name == "damaged cache entry"
    d = _copy_tiny(tiny_model_dir, tmp_path / "entry", manifest=True)
    with open(d / "config.json", "a") as f:
        f.write(" ")
    return str(d), f"model cache entry {d} is damaged: config.json has"


def _real_settings(recipe: str, tmp_path) -> list[str]:
    """Data that is not the toy's: a real model (any model.path but the tiny one) is refused with the toy's settings
    before its source is looked at, and a hub id is checked when it loads, past the config checks."""
    mist = FIXTURES / "mist_small.jsonl"
    if recipe == "dpo":
        return [f"data.train_path={dh.write_pairs(tmp_path / 'pairs.jsonl', 5)}", "eval=none"]
    return [f"eval.path={mist}"] if recipe == "evaluate" else [f"items_path={mist}"]


CASES = ["missing dir", "empty dir", "no config.json", "truncated safetensors", "text file .gguf", "random .gguf",
         "pkg not installed", "pkg without gguf", "hub id offline", "damaged cache entry"]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("case", CASES)
def test_a_bad_model_source_is_one_line_naming_it_exit_2(tmp_path, tiny_model_dir, monkeypatch, capsys,
                                                        no_model_loads, recipe, case):
    from eval_hooks.cli_contract import run_with_contract
    from trainer.config.cli_help import config_errors

    path, says = _case(case, tmp_path, tiny_model_dir, monkeypatch)
    overrides = [f"model.path={path}", f"{RECIPES[recipe]}={tmp_path / 'out'}", *_real_settings(recipe, tmp_path)]
    capsys.readouterr()
    status = run_with_contract(lambda: run_recipe(recipe, recipe, overrides), input_errors=config_errors())
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: model.path") and path in lines[0] and says in lines[0], lines[0]
    assert not (tmp_path / "out" / "config.yaml").exists() or case == "hub id offline"  # a hub id: checked at load


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_wrong_model_path_on_the_command_line_is_one_line_exit_2(tmp_path, recipe):
    env = dh.env()
    env.pop("HYDRA_FULL_ERROR", None)
    missing = tmp_path / "models" / "SmolLM2"
    p = subprocess.run(dh.command(recipe, [f"model.path={missing}", f"{RECIPES[recipe]}={tmp_path / 'out'}"]),
                       env=env, cwd=dh.REPO, capture_output=True, text=True, timeout=300)
    lines = [line for line in p.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines[0] == f"error: model.path: model directory '{missing}' does not exist"


def test_a_model_that_fails_while_loading_is_one_line_naming_it(tmp_path, tiny_model_dir):
    """Past the cheap checks (same size, damaged bytes in the safetensors header), loading still names the model."""
    from selectrust.model import load_model
    from selectrust.model.errors import ModelSourceError

    d = _copy_tiny(tiny_model_dir, tmp_path / "garbled", manifest=False)
    w = d / "model.safetensors"
    data = bytearray(w.read_bytes())
    data[8:12] = b"\xff\xfe\xfd\xfc"  # the header's first bytes: no longer JSON
    w.write_bytes(bytes(data))
    with pytest.raises(ModelSourceError, match=rf"{d}.*(not a safetensors file|cannot be loaded)") as e:
        load_model(str(d))
    assert "\n" not in str(e.value)
