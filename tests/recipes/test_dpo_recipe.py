"""recipes/dpo.py end to end on the tiny model: metrics per condition, checkpoints, epoch-end eval."""

import json

import pytest

import dist_helpers as dh
from recipe_utils import read_metrics, run_recipe

CONDS = ("clean", "misleading", "correct", "irrelevant")


def _pairs(tmp_path, n=12):
    return dh.write_pairs(tmp_path / "pairs.jsonl", n)


def _mist(tmp_path, n=3):
    rows = []
    for i in range(n):
        g, w = i % 10, (i + 3) % 10
        for c, p in {"clean": f"key k{i}?", "misleading": f"note: k{i}={w}. key k{i}?",
                     "correct": f"note: k{i}={g}. key k{i}?", "irrelevant": f"note: sky. key k{i}?"}.items():
            rows.append({"item_id": f"i{i}", "condition": c, "prompt": p, "answer_type": "numeric",
                         "gold": str(g), "wrong_value": str(w)})
    path = tmp_path / "mist.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dpo_tiny_run_logs_per_condition_and_evaluates_each_epoch(tmp_path):
    run_dir = tmp_path / "run"
    # 48 rows, 8 per step -> one epoch every 6 steps; 7 steps = one epoch-end eval + the final one.
    res = run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", f"eval.path={_mist(tmp_path)}",
                                    f"trainer.run_dir={run_dir}", "trainer.max_steps=7", "trainer.progress=false",
                                    "eval.max_new_tokens=2"])
    assert res.step == 7
    lines = [l for l in read_metrics(run_dir) if "loss" in l]
    assert [l["step"] for l in lines] == list(range(1, 8))
    for key in ("loss", "rewards/margins", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "lr"):
        assert all(key in l for l in lines), key
    per_condition = {k for l in lines for k in l if k.startswith("rewards/accuracies/")}
    assert per_condition == {f"rewards/accuracies/{c}" for c in CONDS}
    assert lines[0]["loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference at step 1: -log σ(0)
    assert lines[-1]["loss"] < lines[0]["loss"]
    for sub in ("epoch_1", "final"):
        d = run_dir / "eval" / sub
        metrics = json.loads((d / "metrics.json").read_text())
        assert set(metrics["accuracy"]) == set(CONDS) and "sc2w" in metrics
        assert (d / "item_scores.jsonl").exists() and (d / "report.md").exists()
    ck = run_dir / "checkpoints" / "step_7"
    assert (ck / "COMPLETE").exists() and (ck / "adapter" / "adapter_model.safetensors").exists()
    assert {p.name for p in ck.iterdir()} >= {"optimizer.pt", "scheduler.json", "rng_rank0.json", "trainer_state.json"}
    state = json.loads((ck / "trainer_state.json").read_text())
    # 7 steps x 8 draws = 56 = one epoch of 48 + 8: the sampler's whole state is (epoch, position)
    assert state["step"] == 7 and state["source"] == {"epoch": 1, "position": 8} and state["epoch_done"] == 1
    assert (run_dir / "run_complete.json").exists() and (run_dir / "meta.json").exists()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["packages"]["torch"] and meta["command"]


def test_standard_dpo_samples_only_misleading_pairs(tmp_path):
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", "eval=none", "algo=standard_dpo",
                              f"trainer.run_dir={run_dir}", "trainer.max_steps=2", "trainer.progress=false"])
    keys = {k for l in read_metrics(run_dir) for k in l if k.startswith("rewards/accuracies/")}
    assert keys == {"rewards/accuracies/misleading"}


def test_sft_on_chosen_baseline_trains_nll(tmp_path):
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", "eval=none", "algo=sft_on_chosen",
                              f"trainer.run_dir={run_dir}", "trainer.max_steps=3", "trainer.progress=false"])
    lines = read_metrics(run_dir)
    assert lines[0]["loss"] > 1.0 and lines[-1]["loss"] < lines[0]["loss"]


def test_bad_pairs_fail_before_model_load(tmp_path, monkeypatch):
    import selectrust.model as tm

    def boom(*a, **k):
        raise AssertionError("the model must not load before data validation")

    monkeypatch.setattr(tm, "load_policy", boom)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"pair_id": "a", "condition": "clean", "prompt": "q", "chosen": "1"}\n')
    from selectrust.core.io import DataError

    with pytest.raises(DataError, match=r"bad.jsonl, line 1, field 'rejected'"):
        run_recipe("dpo", "dpo", [f"data.train_path={bad}", "eval=none", f"trainer.run_dir={tmp_path / 'r'}"])


def test_overlong_prompts_dropped_and_reported(tmp_path):
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", "eval=none", "data.max_prompt_len=32",
                              "data.truncation=drop", f"trainer.run_dir={run_dir}", "trainer.max_steps=1",
                              "trainer.progress=false"])
    stats = json.loads((run_dir / "data_stats.json").read_text())
    assert stats["truncated"]["dropped"] > 0 and stats["truncated"]["policy"] == "drop"
    assert stats["rows"] == 48 - stats["truncated"]["dropped"]
    with pytest.raises(Exception, match="exceeds data.max_prompt_len=32"):
        run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", "eval=none", "data.max_prompt_len=32",
                                  "data.truncation=error", f"trainer.run_dir={tmp_path / 'r2'}"])


def test_pairs_identical_once_truncated_are_dropped_and_reported(tmp_path):
    """Two quartets whose chosen and rejected differ only past data.max_completion_len: their 8 rows are never
    trained on, and data_stats.json counts them by reason."""
    path = _pairs(tmp_path)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    for r in rows:
        if r["pair_id"] in ("p0", "p1"):
            r["chosen"], r["rejected"] = "7 because " * 3 + "yes", "7 because " * 3 + "no"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [f"data.train_path={path}", "eval=none", "data.max_completion_len=8",
                              f"trainer.run_dir={run_dir}", "trainer.max_steps=1", "trainer.progress=false"])
    stats = json.loads((run_dir / "data_stats.json").read_text())
    assert stats["dropped"] == {"identical_after_truncation": 8} and stats["rows"] == 40
    assert stats["per_condition"] == {c: 10 for c in CONDS}


def test_precomputed_reference_gives_the_same_run(tmp_path):
    """Reference log-probs computed once up front equal those computed every step (dropout 0, fp32)."""
    common = [f"data.train_path={_pairs(tmp_path)}", "eval=none", "trainer.max_steps=3", "trainer.progress=false"]
    run_recipe("dpo", "dpo", [*common, f"trainer.run_dir={tmp_path / 'a'}"])
    run_recipe("dpo", "dpo", [*common, f"trainer.run_dir={tmp_path / 'b'}", "algo.reference=precomputed"])
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
        for k in ("loss", "rewards/margins", "grad_norm"):
            assert abs(x[k] - y[k]) < 1e-5, (x["step"], k, x[k], y[k])


def test_dpo_chunked_logprobs_and_length_grouping_match_the_default_path(tmp_path):
    """model.logprob_chunk and data.group_by_length end to end: with grouping on both runs draw the same pairs,
    so the chunked run's losses and margins equal the full-logits run's (float32) step by step."""
    runs = {}
    for chunk in (0, 5):
        run_dir = tmp_path / f"run{chunk}"
        run_recipe("dpo", "dpo", [f"data.train_path={_pairs(tmp_path)}", "eval.path=null", f"trainer.run_dir={run_dir}",
                                  "trainer.max_steps=3", "trainer.progress=false", "data.group_by_length=true",
                                  "optim.lr=1e-2", "optim.warmup_ratio=0.0", f"model.logprob_chunk={chunk}"])
        runs[chunk] = [l for l in read_metrics(run_dir) if "loss" in l]
    assert [l["step"] for l in runs[5]] == [1, 2, 3]
    assert abs(runs[0][-1]["rewards/margins"]) > 1e-3  # the policy moved: step 3 depends on steps 1-2's gradients
    for a, b in zip(runs[0], runs[5]):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
        assert b["rewards/margins"] == pytest.approx(a["rewards/margins"], abs=1e-5)


def test_shared_prompt_gives_the_same_run(tmp_path):
    """data.shared_prompt (the default: one packed prompt+chosen+rejected row per pair) against two sequences per
    pair, three LoRA steps in float32: the same losses, margins and gradient norms."""
    common = [f"data.train_path={_pairs(tmp_path)}", "eval=none", "trainer.max_steps=3", "trainer.progress=false"]
    run_recipe("dpo", "dpo", [*common, f"trainer.run_dir={tmp_path / 'a'}"])
    run_recipe("dpo", "dpo", [*common, f"trainer.run_dir={tmp_path / 'b'}", "data.shared_prompt=false"])
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert len(a) == len(b) == 3
    for x, y in zip(a, b):
        for k in ("loss", "rewards/margins", "grad_norm"):
            assert abs(x[k] - y[k]) < 1e-5, (x["step"], k, x[k], y[k])
