"""recipes/evaluate.py runs every family on the tiny model (CPU), through the same files as the CLI."""

import json

import pytest

from guards import fails_after
from recipe_utils import ROOT, compose, load_recipe

FIXTURES = ROOT / "tests" / "data" / "eval"
KEYS = {"mist": {"accuracy", "overall", "sc2w"}, "box2": {"score", "delta"},
        "taste": {"seeded", "reversed", "strict", "mean", "average", "paired_outcomes", "per_cell"},
        "med": {"ea_rate", "uncertain_rate"}}


@pytest.mark.parametrize("family", sorted(KEYS))
def test_evaluate_recipe_each_family(tmp_path, family, monkeypatch):
    from selectrust.generation.backends.hf import HFBackend

    generate, lengths = HFBackend.generate, []

    def spy(self, requests, **kwargs):    # what bounds the run's cost: every generation stops at 8 tokens
        results = generate(self, requests, **kwargs)
        lengths.extend((r.request.max_new_tokens, len(s.token_ids)) for r in results for s in r.samples)
        return results

    monkeypatch.setattr(HFBackend, "generate", spy)
    cfg = compose("evaluate", [f"eval.path={FIXTURES / f'{family}_small.jsonl'}", f"eval.family={family}",
                               f"out_dir={tmp_path / family}", "eval.max_new_tokens=8", "eval.max_rows=null"])
    with fails_after(600, f"evaluate.py on {family}_small.jsonl"):
        metrics = load_recipe("evaluate").run(cfg)
    assert lengths and all(m == 8 and n <= 8 for m, n in lengths), lengths
    assert KEYS[family] <= set(metrics)
    out = tmp_path / family
    assert json.loads((out / "metrics.json").read_text())["family"] == family
    scores = [json.loads(l) for l in (out / "item_scores.jsonl").read_text().splitlines()]
    assert scores and all({"row_id", "response", "parsed", "parse_ok", "correct"} <= set(s) for s in scores)
    assert (out / "report.md").exists() and list(out.glob("*.png"))


def test_evaluate_recipe_rejects_missing_eval_path(tmp_path):
    from selectrust.core.errors import ConfigError

    cfg = compose("evaluate", ["eval=mist", f"out_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="eval.path is not set"):
        load_recipe("evaluate").run(cfg)


def test_evaluate_recipe_bad_items_fail_before_model_load(tmp_path, monkeypatch):
    import selectrust.model
    import selectrust.model.load
    from selectrust.core.io import DataError

    for module in (selectrust.model, selectrust.model.load):  # the entry, and where the policy loader looks it up
        monkeypatch.setattr(module, "load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": 1, "condition": "clean", "prompt": "q", "answer_type": "numeric", "gold": "1", '
                   '"wrong_value": "2"}\n')
    cfg = compose("evaluate", [f"eval.path={bad}", "eval.family=mist", f"out_dir={tmp_path / 'o'}"])
    with pytest.raises(DataError, match="bad.jsonl"):
        load_recipe("evaluate").run(cfg)
    assert not (tmp_path / "o").exists()
