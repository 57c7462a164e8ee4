"""Which items and labels the real demo's numbers are on (issue 54, demos/real/items.py): the facts set each demo
builds, the fixed, seeded, relation-stratified sample of the held-out items (``real.heldout_items``), the sampled
knowledge estimate for mining (``real.mine_knowledge``) and what summary.json records of them. Tiny inputs, no
model."""

from __future__ import annotations

import pytest

from test_real_demo import _compose, _facts_rows


def _rows(per_relation: dict[str, int]) -> list[dict]:
    rows = []
    for rel, n in per_relation.items():
        for row in _facts_rows({f"{rel}{i}": f"G{i}" for i in range(n)}):
            rows.append({**row, "relation": rel})
    return rows


def test_the_sample_is_stratified_by_relation_seeded_and_keeps_every_row_of_an_item():
    from demos.real.items import allocate, stratified_sample

    assert allocate({"capital": 30, "country": 60, "currency": 10}, 10) == {"capital": 3, "country": 6, "currency": 1}
    # 7 of (5, 3, 2): quotas 3.5, 2.1, 1.4 -> 3, 2, 1 and the largest remainder (capital's .5) gets the last one
    assert allocate({"capital": 5, "city": 3, "lang": 2}, 7) == {"capital": 4, "city": 2, "lang": 1}
    assert allocate({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}  # a sample larger than the set is the whole set
    rows = _rows({"capital": 30, "country": 60, "currency": 10})
    sample, info = stratified_sample(rows, 10, seed=3)
    assert info == {"from": 100, "items": 10, "per_relation": {"capital": 3, "country": 6, "currency": 1}, "seed": 3}
    items = {r["item_id"] for r in sample}
    assert len(items) == 10 and len(sample) == 40  # the four conditions of every drawn item
    assert [r for r in rows if r["item_id"] in items] == sample  # in file order
    assert stratified_sample(rows, 10, seed=3)[0] == sample  # fixed: the same seed, file and size
    assert {r["item_id"] for r in stratified_sample(rows, 10, seed=4)[0]} != items
    assert {r["item_id"] for r in stratified_sample(list(reversed(rows)), 10, seed=3)[0]} == items  # not by order
    with pytest.raises(ValueError, match="heldout_items must be >= 1"):
        stratified_sample(rows, 0, seed=3)


def test_heldout_items_adds_the_sample_stage_and_every_held_out_evaluation_reads_it(tmp_path):
    from demos.real.pipeline import stages
    from selectrust.core.io import read_records, write_jsonl_atomic

    plain = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full"]))}
    sampled = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "real.heldout_items=6"]))}
    assert list(sampled) == [*list(plain)[:2], "eval_sample", *list(plain)[2:]]
    for name, stage in sampled.items():
        if name.startswith("eval_"):
            assert stage.inputs.get("eval.path", "eval_sample/items.jsonl") == "eval_sample/items.jsonl", name
        if name.startswith("transfer_"):
            assert stage.inputs["eval.path"] == plain[name].inputs["eval.path"] == "facts/facts_transfer.jsonl"
    assert sampled["eval_sample"].inputs == {"rows": "facts/facts_heldout.jsonl"}
    dev = {s.name: s for s in stages(_compose([f"out={tmp_path}", "real.split=dev", "real.heldout_items=6"]))}
    assert dev["dev_eval_sample"].inputs == {"rows": "facts/facts_dev.jsonl"}
    assert dev["dev_eval_base"].inputs["eval.path"] == "dev_eval_sample/items.jsonl"
    every = [s.name for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "real.heldout_items=0"]))]
    assert every == list(plain)  # 0: every held-out item, no sample stage

    src = tmp_path / "facts" / "facts_heldout.jsonl"
    write_jsonl_atomic(src, _rows({"capital": 8, "country": 4}))
    info = sampled["eval_sample"].call(tmp_path / "eval_sample", {"rows": src})
    assert info == {"from": 12, "items": 6, "per_relation": {"capital": 4, "country": 2}, "seed": 0}
    assert len({r["item_id"] for _, r in read_records(tmp_path / "eval_sample" / "items.jsonl")}) == 6


def test_the_sampled_knowledge_estimate_for_mining_is_a_setting_and_its_rule_is_recorded(tmp_path):
    from demos.real.items import knowledge_labels
    from demos.real.pipeline import stages
    from selectrust.core.errors import ConfigError

    greedy = {s.name: s for s in stages(_compose([f"out={tmp_path}"]))}
    assert greedy["mine"].overrides[-2:] == ["knowledge.k=1", "knowledge.enabled=true"]  # off by default
    cfg = _compose([f"out={tmp_path}", "real.mine_knowledge.estimate=sampled"])
    mine = {s.name: s for s in stages(cfg)}["mine"]
    assert mine.overrides[-5:] == ["knowledge.k=4", "knowledge.temperature=0.7", "knowledge.score=accuracy",
                                   "knowledge.known_threshold=0.75", "knowledge.unknown_threshold=0.0"]
    # the evaluations keep the metric's estimate: the same `unknown` for every arm and run
    assert {s.name: s.overrides for s in stages(cfg) if s.name != "mine"} == {
        s.name: s.overrides for s in greedy.values() if s.name != "mine"}
    labels = knowledge_labels(cfg)
    assert labels["mining"]["rule"] == ("known when >= 3 of 4 clean answers sampled at temperature 0.7 are right, "
                                        "unknown when <= 0, else uncertain")
    assert labels["metrics"]["overrides"] == ["knowledge.enabled=true", "knowledge.k=1"]
    # the thresholds are exactly "at least known_min right" and "at most unknown_max right" of the k answers
    from eval_hooks.knowledge import classify

    five = _compose([f"out={tmp_path}", "real.mine_knowledge.estimate=sampled", "real.mine_knowledge.k=5",
                     "real.mine_knowledge.known_min=3", "real.mine_knowledge.unknown_max=1"])
    over = dict(o.split("=", 1) for o in {s.name: s for s in stages(five)}["mine"].overrides[-5:])
    th = {"known_threshold": float(over["knowledge.known_threshold"]),
          "unknown_threshold": float(over["knowledge.unknown_threshold"])}
    assert [classify(right / 5, **th) for right in range(6)] == [
        "unknown", "unknown", "uncertain", "known", "known", "known"]
    for bad, said in ((["real.mine_knowledge.k=2"], "at least 4"),
                      (["real.mine_knowledge.known_min=1", "real.mine_knowledge.unknown_max=1"], "unknown_max < known_min"),
                      (["real.mine_knowledge.known_min=5"], "known_min <= k"),
                      (["real.mine_knowledge.temperature=0"], "must be > 0")):
        with pytest.raises(ConfigError, match=said):
            stages(_compose([f"out={tmp_path}", "real.mine_knowledge.estimate=sampled", *bad]))
