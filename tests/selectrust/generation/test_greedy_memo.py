"""GreedyMemo (selectrust/generation/backends/base.py): a greedy request already answered is not generated again; sampled,
multi-sample and adapter requests always are; and in an evaluation with a k=1 knowledge estimate the clean rows
are generated once."""

from __future__ import annotations

from selectrust.generation.backends.base import GenerationRequest, GreedyMemo
from mining_fakes import TableBackend


def test_greedy_requests_are_answered_once_and_others_always_reach_the_backend():
    inner = TableBackend({"Q1": "one", "Q2": "two"})
    memo = GreedyMemo(inner)
    first = memo.generate([GenerationRequest(prompt="Q1", max_new_tokens=8), GenerationRequest(prompt="Q2")])
    again = memo.generate([GenerationRequest(prompt="Q2"), GenerationRequest(prompt="Q1", max_new_tokens=8),
                           GenerationRequest(prompt="Q1", max_new_tokens=9),            # another budget
                           GenerationRequest(prompt="Q1", max_new_tokens=8, temperature=1.0, seed=3),  # sampled
                           GenerationRequest(prompt="Q1", max_new_tokens=8, stop=["."]),  # other stop strings
                           GenerationRequest(messages=[{"role": "user", "content": "Q1"}], max_new_tokens=8)])
    assert [r.samples[0].text for r in first] == ["one", "two"]
    assert [r.samples[0].text for r in again] == ["two", "one", "one", "one", "one", "one"]
    assert [r.request.max_new_tokens for r in again[:3]] == [64, 8, 9]  # each result carries its own request
    assert len(inner.asked) == 6 and memo.hits == 2  # 2 + the 4 requests the memo had not seen
    assert memo.table is inner.table  # every other attribute is the inner backend's


def test_an_evaluation_with_a_one_sample_knowledge_estimate_generates_each_clean_row_once(tmp_path, monkeypatch):
    """recipes/evaluate.py with knowledge.enabled, k=1 on the tiny model: the estimate's greedy clean answers are
    served again for the evaluation's clean rows."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from recipe_utils import ROOT, load_recipe, spy_greedy_memos

    made = spy_greedy_memos(monkeypatch)
    evaluate = load_recipe("evaluate")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="evaluate", overrides=[f"out_dir={tmp_path}", "eval.max_rows=8",
                                                          "knowledge.enabled=true", "knowledge.k=1"])
    metrics = evaluate.run(cfg)
    assert len(made) == 1 and made[0].hits == 2, made[0].hits  # 8 rows = 2 items x 4 conditions: 2 clean rows
    assert metrics["n_items"] == 2 and (tmp_path / "knowledge.jsonl").exists()
