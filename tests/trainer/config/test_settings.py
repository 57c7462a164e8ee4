"""Typed settings, built once (trainer/config/settings.py): each entry point composes and validates with Hydra, then
converts once (``to_settings``); below it functions take the typed settings, a group of them or plain values, never a
``DictConfig``. The converter keeps every check before any model loads, and the way back (``to_config``) writes the
composed config's YAML byte for byte, as do the typed settings' plain values (``dataclasses.asdict``, what
``trainer/runtime`` writes to ``config.yaml`` and compares on resume), so a run's files and its resume are unchanged."""

from __future__ import annotations

import ast
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from hydra.errors import ConfigCompositionException
from omegaconf.errors import MissingMandatoryValue

from recipe_utils import compose, load_recipe
from selectrust.core.settings import Choice
from selectrust.core.errors import ConfigError
from trainer.config import (DistillRunConfig, DPORunConfig, EvaluateRunConfig, GRPORunConfig,
                            SFTRunConfig, validate_common, validate_distill, validate_dpo, validate_grpo, validate_sft)
from trainer.config.settings import to_config, to_settings

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("selectrust", "trainer", "eval_hooks", "recipes", "launch", "bench", "demos")

TRAINERS = {"dpo": (DPORunConfig, validate_dpo), "sft": (SFTRunConfig, validate_sft),
            "grpo": (GRPORunConfig, validate_grpo), "distill": (DistillRunConfig, validate_distill),
            "evaluate": (EvaluateRunConfig, validate_common)}


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_converter_builds_the_root_dataclass(name):
    schema, validate = TRAINERS[name]
    settings = to_settings(compose(name), validate)
    assert type(settings) is schema
    assert isinstance(settings.model.dtype, Choice) and settings.model.dtype == "float32"
    assert to_settings(settings, validate) == settings  # typed settings pass through, checked all the same


@pytest.mark.parametrize("name,overrides", [("dpo", []), ("grpo", []), ("sft", []), ("distill", []),
                                            ("evaluate", []), ("mine_pairs", []), ("chain", []),
                                            ("dpo", ["algo=scope_knowledge_aware"]),
                                            ("dpo", ["recipe=standard_dpo_tiny"]),
                                            ("grpo", ["recipe=grpo_env_tiny"]),
                                            ("dpo", ["generation=vllm_server", "optim.lr=1e-5"])])
def test_way_back_is_byte_identical(name, overrides):
    """config.yaml (trainer/runtime/run.py: write_config) and the resume check read the settings back as the
    composed config: the same YAML, byte for byte, so runs written before resume as they did."""
    try:
        cfg = compose(name, overrides)
    except ConfigCompositionException as e:  # a recipe renamed elsewhere: the primaries still hold the rule
        pytest.skip(str(e).splitlines()[0])
    settings, composed = OmegaConf.to_object(cfg), OmegaConf.to_yaml(cfg, resolve=True)
    assert OmegaConf.to_yaml(to_config(settings), resolve=True) == composed
    assert OmegaConf.to_container(to_config(settings), resolve=True) == OmegaConf.to_container(cfg, resolve=True)
    # as trainer/runtime/run.py writes config.yaml and trainer/runtime/run_dir.py compares it on resume
    assert OmegaConf.to_yaml(OmegaConf.create(asdict(settings))) == composed
    assert asdict(settings) == OmegaConf.to_container(cfg, resolve=True)


def test_converter_keeps_every_check_before_any_model_loads(monkeypatch):
    def no_model(*a, **k):
        raise AssertionError("a model loaded before the config was checked")

    import selectrust.model

    monkeypatch.setattr(selectrust.model, "load_policy", no_model)
    with pytest.raises(ConfigError, match="algo.beta must be > 0"):  # a bad value
        load_recipe("dpo").run(compose("dpo", ["algo.beta=-1"]))
    with pytest.raises(ConfigError, match="unknown config key 'algo.betaa'"):  # a misspelt key that '+' let in
        load_recipe("dpo").run(compose("dpo", ["+algo.betaa=1"]))
    with pytest.raises(ConfigError, match="unknown config key 'algo.kl_betaa'"):
        load_recipe("grpo").run(compose("grpo", ["+algo.kl_betaa=1"]))
    with pytest.raises(MissingMandatoryValue, match="train_path"):  # a mandatory value left unset
        to_settings(compose("dpo", ["data.train_path=???"]))


# -- the rule, on the code -------------------------------------------------------------------------------------
#: Where a DictConfig may still be handled: the entry points (a recipe's ``run``/``main``, before and at the
#: converter), the config package (composition, validation of the composed config, --help, the converter), and
#: the places that compose or read configs that are not the run's settings, each with its reason.
ALLOWED_FILES = {
    "trainer/config/": "the converter, and the checks and --help it runs on the composed config",
    "recipes/stages/": "the stage runner composes each stage's config (compose_stage), like a command line",
    "trainer/runtime/relocation.py": "reads a saved config.yaml of a finished stage",
    "eval_hooks/builders/taste_mining_run.py": "its own entry point: merges a YAML onto its schema, then to_object",
}
ENTRY_FUNCTIONS = {"run", "main", "pipeline", "chain_runner"}  # recipes/<x>.py: where the converter is called
SELECTS = ("OmegaConf.select", "OmegaConf.is_missing", "OmegaConf.update")


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    if any(rel.startswith(a) for a in ALLOWED_FILES):
        return []
    out = []
    for fn in ast.walk(ast.parse(path.read_text(), rel)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if rel.startswith("recipes/") and fn.name in ENTRY_FUNCTIONS:
            continue
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        for ann in [a.annotation for a in args if a.annotation is not None] + [fn.returns]:
            if ann is not None and "DictConfig" in ast.unparse(ann):
                out.append(f"{rel}:{fn.lineno} {fn.name} annotates a DictConfig")
        for call in ast.walk(fn):
            if not isinstance(call, ast.Call):
                continue
            name = ast.unparse(call.func)
            if name == "isinstance" and len(call.args) == 2 and "DictConfig" in ast.unparse(call.args[1]):
                out.append(f"{rel}:{call.lineno} {fn.name} checks isinstance(..., DictConfig)")
            if name in SELECTS:
                out.append(f"{rel}:{call.lineno} {fn.name} calls {name}")
    return out


def test_no_dictconfig_below_the_entry_points():
    found = [v for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py")) for v in _violations(p)]
    assert not found, ("below the entry points functions take typed settings (trainer/config/settings.py), a group "
                       "of them or plain values, never a DictConfig:\n  " + "\n  ".join(found))


#: ``recipe`` (its ``run``) or ``recipe:function``: distillation's entry point converts in ``pipeline``, its stage
#: (recipes/distill_stage.py) in ``run``.
CONVERTED = ("dpo", "grpo", "sft", "distill_stage", "distill:pipeline", "evaluate", "mine_pairs", "merge", "advise",
             "demo")


@pytest.mark.parametrize("entry", CONVERTED)
def test_entry_point_converts_once_at_the_top(entry):
    """``run(cfg)`` calls the converter before anything else it calls (its imports aside)."""
    recipe, _, function = entry.partition(":")
    tree = ast.parse((ROOT / "recipes" / f"{recipe}.py").read_text())
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == (function or "run"))
    body = [s for s in run.body if not isinstance(s, (ast.Import, ast.ImportFrom, ast.Expr))
            or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call))]
    first = ast.unparse(body[0])
    assert "to_settings(cfg" in first, f"recipes/{recipe}.py: run() starts with {first!r}, not the converter"
