"""recipes/distill.py's pipelines take their stages' recipes from the one stage table (recipes/stage_recipes.py's
STAGE_RECIPES), not from a table of their own; the stage ``distill`` is recipes/distill_stage.py's run."""

import ast
from pathlib import Path

from recipe_utils import ROOT, compose
from recipes import distill, distill_stage, evaluate, sft
from recipes.stage_recipes import STAGE_RECIPES


def test_the_pipeline_hands_down_the_stage_tables_runs(monkeypatch, tmp_path):
    handed = {}

    class Recording:
        def __init__(self, cfg, *, compose, runners, overrides):
            handed.update(runners)

        def run(self):
            return {"ran": True}

    class Kinds:
        @staticmethod
        def get(name):
            assert name == "taste"
            return Recording

    monkeypatch.setattr(distill, "PIPELINES", Kinds)
    cfg = compose("distill", ["recipe=taste_tiny", f"trainer.run_dir={tmp_path / 'run'}"])
    assert distill.pipeline(cfg, overrides=[]) == {"ran": True}
    assert handed == {name: STAGE_RECIPES.get(name).run for name in distill.STAGES}
    assert handed == {"sft": sft.run, "evaluate": evaluate.run, "distill": distill_stage.run}


def _stage_recipes_named(path: Path) -> set[str]:
    """The recipe names a pipeline module gives ``Stage(name, recipe, ...)`` as string literals."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Stage" and len(node.args) >= 2:
            arg = node.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                names.add(arg.value)
    return names


def test_every_stage_the_pipelines_name_resolves_through_the_one_table():
    named = set().union(*(_stage_recipes_named(p) for p in (ROOT / "recipes" / "pipelines").glob("*.py")))
    assert {"sft", "distill", "evaluate"} <= named  # the finder sees the pipelines' stages
    assert named <= set(distill.STAGES) <= set(STAGE_RECIPES.names())
    assert STAGE_RECIPES.get("distill").run is distill_stage.run


def test_the_distillation_entry_point_keeps_no_runners_table_of_its_own():
    # no recipe's run imported into recipes/distill.py: the stage table is the one place that names them
    tree = ast.parse((ROOT / "recipes" / "distill.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module in ("recipes", None)
                for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "recipes.stage_recipes" in imported
    assert not imported & {"sft", "evaluate", "distill_stage", "recipes.sft", "recipes.evaluate",
                           "recipes.distill_stage"}
