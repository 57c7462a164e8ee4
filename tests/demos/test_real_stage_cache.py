"""Issue 60, Deliver 2: the seed-independent stages computed once. On the fixed split the base's evaluations (with
its knowledge estimate) and mining take a fixed seed (Stage.seed), so their records are the same in every seed's
run; ``real.stage_cache`` copies them across runs, and the stage runner checks a copy like its own before reuse."""

from __future__ import annotations

import json

from test_demo_out_dir import Fakes, _clean_checkout, _runner  # noqa: F401 (the autouse fixture: a clean commit)
from test_real_demo import _compose


def _plan():
    from trainer.runtime.stage import Stage

    fakes = Fakes()
    plan = [Stage("data", call=fakes.data),
            Stage("eval_base", "evaluate", ["model.path=m1"], inputs={"eval.path": "data/items.txt"}, seed=0),
            Stage("eval_scope", "evaluate", ["model.path=m2"], inputs={"eval.path": "data/items.txt"})]
    return fakes, plan


def test_a_stage_s_own_seed_replaces_the_run_s(tmp_path):
    fakes, plan = _plan()
    runner = _runner(tmp_path, fakes)
    runner.seed = 7
    assert runner.compose_stage(plan[1], planned=True).seed == 0  # fixed: the same in every seed's run
    assert runner.compose_stage(plan[2], planned=True).seed == 7  # the run's


def test_the_base_stages_are_seedless_on_the_fixed_split_and_the_arms_are_not(tmp_path):
    from demos.real.pipeline import stages

    by = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "seed=5"]))}
    seedless = {n for n, s in by.items() if s.seed is not None}
    assert seedless == {"eval_base", "transfer_base", "nqswap_base", "mine"}
    assert all(by[n].seed == 0 for n in seedless)
    old = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "seed=5", "real.fixed_split=false",
                                               "real.nq_swap_seed=null"]))}
    assert all(s.seed is None for s in old.values())  # the earlier rule: every stage follows the run's seed


def test_a_second_seed_reuses_the_base_s_stages_from_the_cache_and_reruns_what_changed(tmp_path):
    from demos.real import stage_cache

    cache = tmp_path / "cache"
    cfg = _compose([f"out={tmp_path}/a", "demo=real_full"])
    fakes, plan = _plan()
    first = _runner(tmp_path / "a", fakes)
    first.seed = 1
    res_a = first.run_all(plan)
    assert stage_cache.save(cfg, plan, cache, tmp_path / "a") == ["eval_base"]
    assert stage_cache.save(cfg, plan, cache, tmp_path / "a") == []  # the same record: nothing rewritten

    fakes_b, plan_b = _plan()
    logged = []
    assert stage_cache.restore(cfg, plan_b, cache, tmp_path / "b", log=logged.append) == ["eval_base"]
    second = _runner(tmp_path / "b", fakes_b)
    second.seed = 2
    res_b = second.run_all(plan_b)
    # the base's evaluation reused (checked by the runner: config relocated, inputs and outputs by hash), the arm run
    assert second.records["eval_base"]["status"] == "skipped" and fakes_b.calls == ["eval_scope"]
    assert res_b["eval_base"] == res_a["eval_base"]
    record = json.loads((tmp_path / "b" / "stages" / "eval_base" / "stage_complete.json").read_text())
    assert record["config"]["seed"] == 0 and "copied from the stage cache" in logged[0]

    # another input (the split's items changed): the copy is not believed, the stage runs again
    fakes_c, plan_c = _plan()
    fakes_c.items = "a b c d"
    stage_cache.restore(cfg, plan_c, cache, tmp_path / "c", log=lambda m: None)
    third = _runner(tmp_path / "c", fakes_c)
    assert third.run_all(plan_c)["eval_base"]["n"] == 4 and fakes_c.calls == ["eval_base", "eval_scope"]
    assert (tmp_path / "c" / "stages" / "eval_base.old-1").is_dir()
    # a stage the run already has is never overwritten from the cache
    assert stage_cache.restore(cfg, plan_c, cache, tmp_path / "c", log=lambda m: None) == []


def test_invented_items_change_the_key_of_mining_only(tmp_path):
    """Issue 61: ``real.invented_items`` changes the training file only, so the stage that reads it (``mine``) gets
    another cache entry, and the base's evaluations (the same files) keep theirs; N=0 keeps today's keys."""
    from demos.real import stage_cache
    from demos.real.pipeline import stages

    def keys(*extra):
        cfg = _compose([f"out={tmp_path}", "demo=real_full", *extra])
        return {s.name: stage_cache.key(cfg, s) for s in stage_cache.cached_stages(stages(cfg))}

    none, zero, some = keys(), keys("real.invented_items=0"), keys("real.invented_items=300")
    assert none == zero and set(some) == set(none) >= {"mine", "eval_base", "transfer_base"}
    assert {n for n in none if none[n] != some[n]} == {"mine"}


def test_nq_swap_s_settings_change_the_keys_of_its_own_stages_only(tmp_path):
    """A run with NQ-Swap and one without share the base's other stages (issue 61's test seeds: the seed without it
    recomputed the base's evaluations and mining, six minutes, when every key held the NQ-Swap settings)."""
    from demos.real import stage_cache
    from demos.real.pipeline import stages

    def keys(*extra):
        cfg = _compose([f"out={tmp_path}", "demo=real_full", *extra])
        return {s.name: stage_cache.key(cfg, s) for s in stage_cache.cached_stages(stages(cfg))}

    off, on, other = keys("real.nq_swap_questions=0"), keys("real.nq_swap_questions=300"), keys(
        "real.nq_swap_questions=200")
    assert set(on) == set(off) | {"nqswap_base"} and {"eval_base", "transfer_base", "mine"} <= set(off)
    assert all(on[n] == off[n] for n in off)
    assert on["nqswap_base"] != other["nqswap_base"]


def test_the_key_follows_the_settings_not_the_seed(tmp_path):
    from demos.real import stage_cache

    _, plan = _plan()
    a = stage_cache.key(_compose([f"out={tmp_path}", "demo=real_full", "seed=0"]), plan[1])
    assert a == stage_cache.key(_compose([f"out={tmp_path}/x", "demo=real_full", "seed=9"]), plan[1])
    assert a != stage_cache.key(_compose([f"out={tmp_path}", "demo=real_full", "real.facts_size=small"]), plan[1])
    # an arm's settings do not move the base's key (its own overrides do: they are the stage's)
    arm = "real.stages.knowledge_aware_full=['algo.lambda_u=0.2']"
    assert a == stage_cache.key(_compose([f"out={tmp_path}", "demo=real_full", arm]), plan[1])
    evaluate = "real.stages.evaluate=['generation.batch_size=8']"
    from demos.real.pipeline import stages

    def base_key(over):
        cfg = _compose([f"out={tmp_path}", "demo=real_full", *over])
        return stage_cache.key(cfg, next(s for s in stages(cfg) if s.name == "eval_base"))
    assert base_key([]) == base_key([arm]) != base_key([evaluate])
    # the demo's name is not in it: the main job and the full experiment on the same items share the base's stages
    main_job = _compose([f"out={tmp_path}", "demo=real"])  # its sample: 200 held-out items
    assert base_key(["real.heldout_items=200"]) == stage_cache.key(
        main_job, next(s for s in stages(main_job) if s.name == "eval_base")) != base_key([])


def test_base_only_plans_the_base_s_stages_and_no_arm(tmp_path):
    from demos.real.pipeline import stages

    full = [s.name for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "real.split=test"]))]
    base = [s.name for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "real.base_only=true"]))]
    assert base == [n for n in full if n in base] and base[-1] == "mine"  # a prefix of the full plan, in its order
    assert {"eval_base", "transfer_base", "nqswap_base", "mine"} <= set(base)
    assert not [n for n in base if n.endswith(("_scope", "_knowledge_aware")) or n in ("scope", "grpo_prompts")]
    assert len(full) > len(base)


def test_base_only_summary_and_report_hold_the_base_s_metrics(tmp_path):
    from demos.real import base_only

    cfg = _compose([f"out={tmp_path}", "demo=real_full", "real.base_only=true"])
    m = {"accuracy": {"clean": 0.5, "misleading": 0.25, "correct": 1.0, "irrelevant": 0.5}, "sc2w": 0.5,
         "n_items": 4, "unknown_correct_accuracy": 0.75}
    nq = {"nq_swap": {"em_org_context": 0.6, "em_org_context_strict": 0.1, "p_sub": 0.3, "p_org": 0.4, "n_items": 300,
                      "ci": {"em_org_context": [0.55, 0.65]}}}
    results = {"eval_base": m, "transfer_base": m, "nqswap_base": nq, "nqswap_rows": {"items": 300},
               "mine": {"quartets": 3, "dropped_items": {"x": "y"}}}
    sets = {"real": ("eval", "facts/facts_heldout.jsonl"), "transfer": ("transfer", "facts/facts_transfer.jsonl")}
    s = base_only.summary(cfg, results, sets)
    assert s["base_only"] is True and s["real"]["base"] is m and s["nq_swap"]["base"] is nq
    assert s["mining"] == {"quartets": 3}
    s["wall_seconds"] = 1.0
    base_only.write_report(s, tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "| real | 4 | 50.0% | 25.0% | 100.0% | 50.0% | 50.0% | 75.0% |" in text
    assert "NQ-Swap em_org_context | 300 | 60.0% [55.0, 65.0]" in text and "em_org_context_strict | 300 | 10.0%" in text
