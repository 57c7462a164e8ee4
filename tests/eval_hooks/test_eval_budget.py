"""Generation budgets of an evaluation: ``eval.max_new_tokens`` None = the family's default for the rows
(``Family.default_max_new_tokens``: MIST from the answer types, short_text 32; other families 256), and an
explicit value (a preset's, the command line's or a caller's) always wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from eval_hooks import load_rows, run_matched_eval
from selectrust.generation.backends.base import GenerationResult, Sample
from eval_hooks.families import get_family
from eval_hooks.families.base import DEFAULT_MAX_NEW_TOKENS

DATA = Path(__file__).parents[1] / "data" / "eval"
CONDITIONS = {"clean": "", "misleading": "Someone said Lyon.\n\n", "correct": "Someone said Paris.\n\n",
              "irrelevant": "France has many rivers.\n\n"}


class _Recorder:
    """Stand-in backend: answers every request with ``text`` and keeps the requests it was sent."""

    name = "recorder"
    prompt_settings = None

    def __init__(self, text: str):
        self.text, self.requests = text, []

    def generate(self, requests, *, progress=False, desc="generate"):
        self.requests.extend(requests)
        return [GenerationResult(request=r, samples=[Sample(self.text, [], [], "stop")]) for r in requests]


def _short_text_rows(tmp_path) -> list[dict]:
    path = tmp_path / "capitals.jsonl"
    path.write_text("".join(json.dumps({
        "item_id": "c1", "condition": c, "prompt": f"{ctx}What is the capital of France? Answer in one line.",
        "answer_type": "short_text", "gold": "Paris", "wrong_value": "Lyon",
        "question": "What is the capital of France?"}) + "\n" for c, ctx in CONDITIONS.items()))
    return load_rows("mist", path)


def test_short_text_mist_without_a_budget_generates_32_tokens(tmp_path):
    be = _Recorder("Paris")
    m = run_matched_eval(be, _short_text_rows(tmp_path), "mist", tmp_path / "o", progress=False, n_boot=10)
    assert len(be.requests) == 4 and {r.max_new_tokens for r in be.requests} == {32}
    assert m["eval_settings"]["max_new_tokens"] == 32 and m["overall"] == 1.0


def test_an_explicit_budget_wins_over_the_family_default(tmp_path):
    be = _Recorder("Paris")
    m = run_matched_eval(be, _short_text_rows(tmp_path), "mist", tmp_path / "o", max_new_tokens=7, progress=False,
                         n_boot=10)
    assert {r.max_new_tokens for r in be.requests} == {7} and m["eval_settings"]["max_new_tokens"] == 7


def test_mist_reasoning_rows_keep_the_reasoning_budget(tmp_path):
    mist = get_family("mist")
    reasoning = load_rows("mist", DATA / "mist_small.jsonl")  # numeric, multiple_choice, boolean
    assert mist.default_max_new_tokens(reasoning) == 512
    assert mist.default_max_new_tokens(reasoning + _short_text_rows(tmp_path)) == 512  # the largest need wins


@pytest.mark.parametrize("family", ["taste", "box2"])
def test_the_base_family_default(family, tmp_path):
    rows = load_rows(family, DATA / f"{family}_small.jsonl")
    assert get_family(family).default_max_new_tokens(rows) == DEFAULT_MAX_NEW_TOKENS == 256
    be = _Recorder("ANSWER: B")
    run_matched_eval(be, rows, family, tmp_path / "o", progress=False, n_boot=10)
    assert be.requests and {r.max_new_tokens for r in be.requests} == {256}


def test_run_eval_resolves_an_unset_eval_max_new_tokens(tmp_path):
    """The path of ``recipes/evaluate.py`` and the epoch ends: the schema's None reaches the family default."""
    from trainer.config import EvalConfig
    from trainer.eval_bridge import eval_budget, run_eval

    ecfg = OmegaConf.structured(EvalConfig(path="unused", family="mist"))
    assert ecfg.max_new_tokens is None
    rows = _short_text_rows(tmp_path)
    be = _Recorder("Paris")
    run_eval(be, rows, ecfg, tmp_path / "o", progress=False)
    assert {r.max_new_tokens for r in be.requests} == {32}
    ecfg.max_new_tokens = 5
    assert eval_budget(ecfg, rows) == 5


def test_presets_keep_their_budgets_and_null_is_accepted():
    from recipe_utils import compose

    from selectrust.core.errors import ConfigError
    from trainer.config import validate_common

    assert compose("evaluate", []).eval.max_new_tokens == 4  # toy_mist, the default
    assert compose("evaluate", ["eval=facts", "eval.path=x"]).eval.max_new_tokens == 32
    assert compose("evaluate", ["eval=mist"]).eval.max_new_tokens == 1024
    validate_common(compose("evaluate", ["eval.max_new_tokens=null"]))
    with pytest.raises(ConfigError, match="eval.max_new_tokens must be > 0"):
        validate_common(compose("evaluate", ["eval.max_new_tokens=0"]))
