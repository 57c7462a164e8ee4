"""The recipes a stage may run, by name (:data:`STAGE_RECIPES`): what a chain stage's ``script`` and a demo stage's
recipe name. The stage runner (``recipes/stages/``) knows no recipe; the entry points that run stages
(``recipes/chain.py``, ``recipes/demo.py``) hand it the ``run`` functions (:func:`runners`) and the config checks
(:func:`trainers`) from here, so nothing below ``recipes/`` imports a recipe.

The one table: ``recipes/distill.py``'s pipelines take their stages' recipes from here too (the stage ``distill``
is ``recipes/distill_stage.py``, which imports neither this module nor the pipeline's entry point). Each recipe is
imported plainly here (``dpo`` and ``grpo`` import torch), so the entry points import this module
where they run stages, not when ``--help`` is asked. A recipe from another package is an entry point in group
``selectrust.stage_recipes`` naming a :class:`StageRecipe` (its ``conf/<name>.yaml`` must be on Hydra's search
path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from recipes import distill_stage, dpo, evaluate, grpo, mine_pairs, sft
from selectrust.core.plugins import Registry
from selectrust.core.errors import ConfigError
from trainer.config import validate_distill, validate_dpo, validate_grpo, validate_sft


@dataclass(frozen=True)
class StageRecipe:
    """One recipe a stage runs: ``run(cfg)`` on the config composed from ``conf/<name>.yaml`` and the stage's
    overrides. ``check(cfg)``: its config check, run on every stage's config before the first stage runs; a recipe
    with one trains, and a chain stage may name it (:func:`trainers`)."""

    name: str
    run: Callable[[Any], Any]
    check: Callable[[Any], None] | None = None


def _accept(name: str, obj: object) -> StageRecipe:
    if not isinstance(obj, StageRecipe) or obj.name != name:
        raise ConfigError(f"stage recipe {name!r}: not a StageRecipe named {name!r} (got {obj!r})")
    return obj


#: The trainers first, in the order a chain's error message lists them, then the recipes a demo's stages also run.
STAGE_RECIPES: Registry[StageRecipe] = Registry("stage recipe", "selectrust.stage_recipes", {
    "sft": StageRecipe("sft", sft.run, validate_sft),
    "dpo": StageRecipe("dpo", dpo.run, validate_dpo),
    "grpo": StageRecipe("grpo", grpo.run, validate_grpo),
    "distill": StageRecipe("distill", distill_stage.run, validate_distill),
    "evaluate": StageRecipe("evaluate", evaluate.run),
    "mine_pairs": StageRecipe("mine_pairs", mine_pairs.run),
}, accept=_accept, error=ConfigError, component=StageRecipe)


def runners(names) -> dict[str, Callable[[Any], Any]]:
    """``{name: run}`` of the recipes ``names`` (those a demo's stages name): what the stage runner calls."""
    return {n: STAGE_RECIPES.get(n).run for n in names}


def trainers() -> dict[str, Callable[[Any], None]]:
    """``{name: check}`` of every recipe with a config check (the trainers): the recipes a chain stage may name
    (``script``), and the checks the stage runner runs before the first stage."""
    return {n: r.check for n in STAGE_RECIPES if (r := STAGE_RECIPES.get(n)).check is not None}
