"""Knowledge-aware SCOPE: the knowledge estimate, the unknown pools, their sampling mass, the pair-file
checks and the evaluation split by knowledge (docs/scope.md#knowledge-aware-scope)."""

import json
from collections import Counter

import pytest
from omegaconf import OmegaConf

from selectrust.core.io import DataError
from eval_hooks.knowledge import attach_knowledge, classify
from eval_hooks import compute_metrics
from selectrust.conditions import MIST_CONDITIONS as CONDS
from mining_fakes import TableBackend, rows_for
from recipe_utils import load_recipe
from selectrust.core.errors import ConfigError
from trainer.config import KnowledgeConfig, validate_knowledge
from trainer.data.mining import mine
from trainer.data.train_data import ConditionSampler, check_pool_mass, pool_mass
from trainer.dpo.data import load_pairs


def knowledge_cfg(**kw):
    return KnowledgeConfig(enabled=True, k=4, temperature=1.0, known_threshold=0.75, unknown_threshold=0.25, **kw)


FIXTURE = {
    # i1 known (4/4 clean right), follows the misleading hint -> a SCOPE quartet
    "Q1 clean": "4", "Q1 hint 7": "7", "Q1 hint 4": "4",
    # i2 unknown (0/4) with a stable wrong answer 3 (4/4); uses the correct hint -> unknown_correct + irrelevant
    "Q2 clean": ["3", "3", "3", "3"], "Q2 hint 8": "8", "Q2 hint 5": "5",
    # i3 uncertain (2/4): in no pool
    "Q3 clean": ["6", "1", "6", "2"], "Q3 hint": "9",
    # i4 unknown (1/4 right <= 0.25), unstable (modal share 1/4): unknown_correct only; rejected = first wrong sample
    "Q4 clean": ["0", "1", "2", "3"], "Q4 hint 9": "9", "Q4 hint 1": "1",
    # i5 unknown, but under the correct hint it still answers wrongly: no on-policy hint-using text -> dropped
    "Q5 clean": ["7", "7", "8", "8"], "Q5 hint": "7",
    # i6 unknown, every wrong sample empty: nothing to reject -> dropped
    "Q6 clean": ["", "", "", ""], "Q6 hint 3": "3",
}


def mine_fixture(**kw):
    rows = rows_for(1, 4, 7) + rows_for(2, 5, 8) + rows_for(3, 6, 9) + rows_for(4, 1, 9) + rows_for(5, 2, 0) + \
        rows_for(6, 3, 4)
    backend = TableBackend(FIXTURE)
    pairs, stats = mine(rows, backend, max_new_tokens=2, use_fallback=True, fallback_note="n {gold}",
                                 leak_patterns=["note"], model_name="m", knowledge=knowledge_cfg(**kw), seed=0)
    return pairs, stats, backend


def test_pools_from_known_unknown_and_uncertain_items():
    pairs, stats, backend = mine_fixture(unknown_irrelevant=True, stable_threshold=0.75)
    by_pool = Counter(p.get("pool", p["condition"]) for p in pairs)
    assert by_pool == {"clean": 1, "misleading": 1, "correct": 1, "irrelevant": 1, "unknown_correct": 2,
                       "unknown_irrelevant": 1}
    assert {p["item_id"] for p in pairs if "pool" not in p} == {"i1"}  # quartets: known items only
    q1 = [p for p in pairs if p["item_id"] == "i1"]
    assert all(p["chosen"] == "4" and p["rejected"] == "7" and p["knowledge"] == "known" for p in q1)
    u2 = next(p for p in pairs if p.get("pool") == "unknown_correct" and p["item_id"] == "i2")
    assert (u2["condition"], u2["prompt"], u2["chosen"], u2["rejected"]) == ("correct", "Q2 hint 5", "5", "3")
    assert u2["knowledge"] == "unknown" and u2["clean_accuracy"] == 0.0
    u4 = next(p for p in pairs if p.get("pool") == "unknown_correct" and p["item_id"] == "i4")
    assert (u4["chosen"], u4["rejected"], u4["clean_accuracy"]) == ("1", "0", 0.25)
    irr = next(p for p in pairs if p.get("pool") == "unknown_irrelevant")
    assert (irr["item_id"], irr["condition"], irr["prompt"], irr["chosen"], irr["rejected"]) == \
        ("i2", "irrelevant", "Q2 sky", "3", "5")
    k = stats["knowledge"]
    assert k["counts"] == {"known": 1, "unknown": 4, "uncertain": 1}
    assert k["mean_clean_accuracy"]["unknown"] == pytest.approx((0 + 0.25 + 0 + 0) / 4)
    assert k["per_pool"] == {"unknown_correct": 2, "unknown_irrelevant": 1}
    assert k["unknown_dropped_items"] == {"i5": "correct_context_wrong", "i6": "no_nonempty_wrong_sample"}
    assert stats["items"] == 6 and stats["kept"] == 1
    assert {r["item_id"]: r["knowledge"] for r in stats["knowledge_items"]} == \
        {"i1": "known", "i2": "unknown", "i3": "uncertain", "i4": "unknown", "i5": "unknown", "i6": "unknown"}
    # the estimate sampled 4 answers per clean prompt at temperature 1
    assert ("Q1 clean", 4, 1.0) in backend.asked


def test_without_the_irrelevant_option_or_below_the_stability_rule_no_irrelevant_pool():
    pairs, _, _ = mine_fixture(unknown_irrelevant=False)
    assert not any(p.get("pool") == "unknown_irrelevant" for p in pairs)
    pairs, _, _ = mine_fixture(unknown_irrelevant=True, stable_threshold=1.0)  # i2 is 4/4 stable: still in
    assert [p["item_id"] for p in pairs if p.get("pool") == "unknown_irrelevant"] == ["i2"]


def test_k1_is_one_greedy_answer():
    rows = rows_for(1, 4, 7)
    backend = TableBackend({"Q1 clean": "4", "Q1 hint": "7"})
    mine(rows, backend, max_new_tokens=2, use_fallback=False, fallback_note="n {gold}", leak_patterns=[],
                  model_name="m", knowledge=KnowledgeConfig(enabled=True, k=1))
    assert backend.asked[0] == ("Q1 clean", 1, 0.0)


def test_classify_thresholds_are_inclusive():
    kw = dict(known_threshold=0.75, unknown_threshold=0.25)
    assert [classify(a, **kw) for a in (1.0, 0.75, 0.5, 0.25, 0.0)] == \
        ["known", "known", "uncertain", "unknown", "unknown"]


def test_knowledge_config_is_validated():
    validate_knowledge(knowledge_cfg())
    with pytest.raises(ConfigError, match="unknown_threshold"):
        validate_knowledge(OmegaConf.structured(KnowledgeConfig(enabled=True, known_threshold=0.2, unknown_threshold=0.5)))
    with pytest.raises(ConfigError, match="temperature"):
        validate_knowledge(OmegaConf.structured(KnowledgeConfig(enabled=True, k=3, temperature=0.0)))
    with pytest.raises(ConfigError, match="stable_threshold"):
        validate_knowledge(OmegaConf.structured(KnowledgeConfig(enabled=True, unknown_irrelevant=True,
                                                                stable_threshold=0.2)))


# -- sampling mass ---------------------------------------------------------------------------------
def test_pool_mass_formula_and_lambda_u_zero_is_scope():
    m = pool_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5, lambda_u=0.2)
    assert m == pytest.approx({"misleading": 0.2, "clean": 0.2, "correct": 0.2, "irrelevant": 0.2,
                               "unknown_correct": 0.2})
    m = pool_mass(lambda_m=0.5, lambda_c=0.2, lambda_p=0.3, rho=0.6, lambda_u=0.4, unknown_irrelevant=True)
    assert m == pytest.approx({"misleading": 0.3, "clean": 0.12, "correct": 0.108, "irrelevant": 0.072,
                               "unknown_correct": 0.24, "unknown_irrelevant": 0.16})
    assert sum(m.values()) == pytest.approx(1.0)
    assert pool_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5) == \
        {"misleading": 0.25, "clean": 0.25, "correct": 0.25, "irrelevant": 0.25}


def test_sampler_draws_each_pool_within_one_percent_of_its_mass_and_resumes():
    labels = ["misleading"] * 40 + ["clean"] * 40 + ["correct"] * 40 + ["irrelevant"] * 40 + \
        ["unknown_correct"] * 13 + ["unknown_irrelevant"] * 7
    mass = pool_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5, lambda_u=0.3, unknown_irrelevant=True)
    s = ConditionSampler(labels, mass, seed=1)
    draws = s.draw(10_000)
    freq = Counter(labels[i] for i, _ in draws)
    for pool, m in mass.items():
        assert abs(freq[pool] / 10_000 - m) < 0.01, (pool, freq[pool], m)
    t = ConditionSampler(labels, mass, seed=1)
    t.draw(3_333)
    u = ConditionSampler(labels, mass, seed=1)
    u.load_state_dict(t.state_dict())
    assert u.draw(500) == draws[3_333:3_833]


def test_missing_unknown_pool_with_mass_is_refused():
    with pytest.raises(DataError, match="unknown_correct.*knowledge.enabled"):
        check_pool_mass({"clean": 4}, {"clean": 0.8, "unknown_correct": 0.2})


# -- pair file ---------------------------------------------------------------------------------------
def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_pair_file_with_unknown_pools_loads_without_quartets(tmp_path):
    quartet = [{"pair_id": "p1", "condition": c, "prompt": c, "chosen": "4", "rejected": "7"} for c in CONDS]
    unk = [{"pair_id": "u1", "condition": "correct", "pool": "unknown_correct", "prompt": "h", "chosen": "5",
            "rejected": "3"}]
    ps = load_pairs(_write(tmp_path / "p.jsonl", quartet + unk))
    assert ps.stats["per_pool"] == {"clean": 1, "misleading": 1, "correct": 1, "irrelevant": 1, "unknown_correct": 1}
    assert ps.stats["per_condition"]["correct"] == 2
    bad = [{**unk[0], "condition": "irrelevant"}]
    with pytest.raises(DataError, match=r"line 5.*pool"):
        load_pairs(_write(tmp_path / "b.jsonl", quartet + bad))


# -- evaluation split by knowledge -----------------------------------------------------------------
def _scores(item, knowledge, correct):
    return [{"item_id": item, "condition": c, "gold": "1", "correct": bool(ok), "parse_ok": True, "knowledge": knowledge}
            for c, ok in zip(CONDS, correct)]


def test_metrics_split_by_knowledge_and_headline():
    scores = (_scores("a", "known", [1, 0, 1, 1]) + _scores("b", "known", [1, 1, 1, 1]) +
              _scores("c", "unknown", [0, 0, 1, 0]) + _scores("d", "unknown", [0, 0, 0, 0]) +
              _scores("e", "uncertain", [1, 0, 1, 1]))
    m = compute_metrics("mist", scores, n_boot=0)
    assert m["by_knowledge"]["known"]["sc2w"] == 0.5 and m["by_knowledge"]["known"]["n_items"] == 2
    assert m["by_knowledge"]["unknown"]["accuracy"]["correct"] == 0.5
    assert m["by_knowledge"]["unknown"]["sc2w"] is None
    assert m["unknown_correct_accuracy"] == 0.5
    assert m["accuracy"]["correct"] == 0.8  # the whole set is unchanged
    assert "by_knowledge" not in compute_metrics("mist", [{k: v for k, v in r.items() if k != "knowledge"}
                                                          for r in scores], n_boot=0)


def test_attach_knowledge_needs_every_item(tmp_path):
    path = _write(tmp_path / "k.jsonl", [{"item_id": "a", "knowledge": "known"}])
    rows = [{"item_id": "a", "condition": "clean"}, {"item_id": "b", "condition": "clean"}]
    with pytest.raises(DataError, match="no knowledge label"):
        attach_knowledge(rows, path)
    assert attach_knowledge(rows[:1], path)[0]["knowledge"] == "known"
    with pytest.raises(DataError, match="line 1.*knowledge"):
        attach_knowledge(rows, _write(tmp_path / "bad.jsonl", [{"item_id": "a", "knowledge": "maybe"}]))


# -- the DPO recipe and its epoch-end evaluation -------------------------------------------------------
def test_knowledge_aware_dpo_logs_per_pool_reports_mass_and_splits_the_epoch_eval(tmp_path):
    import dist_helpers as dh
    from recipe_utils import read_metrics, run_recipe

    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 6)
    unknown = [{"pair_id": f"u{i}", "item_id": f"u{i}", "condition": "correct", "pool": "unknown_correct",
                "prompt": f"note: u{i}={i}. key u{i}?", "chosen": str(i), "rejected": str((i + 1) % 10)}
               for i in range(4)]
    with open(pairs, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in unknown))
    mist = []
    for i, know in enumerate(("known", "unknown")):
        mist += [{"item_id": f"i{i}", "condition": c, "prompt": f"{c} k{i}?", "answer_type": "numeric", "gold": "1",
                  "wrong_value": "2"} for c in CONDS]
    labels = [{"item_id": "i0", "knowledge": "known"}, {"item_id": "i1", "knowledge": "unknown"}]
    common = [f"data.train_path={pairs}", "algo=scope_knowledge_aware", "trainer.max_steps=2", "trainer.progress=false",
              f"eval.path={_write(tmp_path / 'mist.jsonl', mist)}", "eval.max_new_tokens=2",
              f"eval.knowledge_path={_write(tmp_path / 'k.jsonl', labels)}"]
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [*common, f"trainer.run_dir={run_dir}"])
    stats = json.loads((run_dir / "data_stats.json").read_text())
    assert stats["per_pool"]["unknown_correct"] == 4 and stats["sampling_mass"]["unknown_correct"] == pytest.approx(0.1)
    keys = {k for line in read_metrics(run_dir) for k in line}
    assert "rewards/accuracies/unknown_correct" in keys and "rewards/margins/unknown_correct" in keys
    final = json.loads((run_dir / "eval" / "final" / "metrics.json").read_text())
    assert final["by_knowledge"]["unknown"]["n_items"] == 1 and "unknown_correct_accuracy" in final
    # mass on a pool the file does not have: refused before any model loads (no run dir content)
    plain = dh.write_pairs(tmp_path / "plain.jsonl", 6)
    with pytest.raises(DataError, match="unknown_correct"):
        run_recipe("dpo", "dpo", [*common, f"data.train_path={plain}", f"trainer.run_dir={tmp_path / 'r2'}"])
    assert not (tmp_path / "r2" / "data_stats.json").exists()


def test_evaluate_recipe_estimates_the_models_knowledge_and_splits_by_it(tmp_path):
    from recipe_utils import ROOT, compose

    items = ROOT / "tests" / "data" / "eval" / "mist_small.jsonl"
    out = tmp_path / "ev"
    cfg = compose("evaluate", [f"eval.path={items}", "eval.family=mist", f"out_dir={out}", "eval.max_new_tokens=4",
                               "eval.max_rows=null", "knowledge.enabled=true", "knowledge.k=3"])
    metrics = load_recipe("evaluate").run(cfg)
    est = [json.loads(line) for line in (out / "knowledge.jsonl").read_text().splitlines()]
    assert est and all(e["k"] == 3 and len(e["samples"]) == 3 for e in est)
    counts = Counter(e["knowledge"] for e in est)
    assert {k: v["n_items"] for k, v in metrics["by_knowledge"].items()} == dict(counts)
    assert (metrics["unknown_correct_accuracy"] is None) == ("unknown" not in counts)
    # the same estimate given as a file (how a trained model is split by its base's knowledge)
    again = load_recipe("evaluate").run(compose("evaluate", [
        f"eval.path={items}", "eval.family=mist", f"out_dir={tmp_path / 'ev2'}", "eval.max_new_tokens=4",
        "eval.max_rows=null", f"eval.knowledge_path={out / 'knowledge.jsonl'}"]))
    assert again["by_knowledge"] == metrics["by_knowledge"]
    with pytest.raises(ConfigError, match="knowledge.enabled"):
        load_recipe("evaluate").run(compose("evaluate", [
            f"eval.path={items}", f"out_dir={tmp_path / 'ev3'}", "knowledge.enabled=true",
            f"eval.knowledge_path={out / 'knowledge.jsonl'}"]))
