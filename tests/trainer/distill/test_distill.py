"""Distillation trainer pieces: aligned logits, the teacher top-K cache, positions, ECE, views and bad input."""

import json

import pytest
import torch

from eval_hooks.builders.taste_toy import base_sft_mix, compact_prompt, make_taste_toy
from selectrust.core.io import DataError, write_jsonl_atomic
from distill_fixtures import make_steps
from trainer.distill.aligned import aligned_logits, build_batch, sample_positions
from trainer.distill.calibration import expected_calibration_error
from trainer.distill.views import check_task_disjoint, load_fork_views


@pytest.fixture(scope="module")
def tiny():
    from selectrust.model import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_model("tiny", dtype="float32").eval(), load_tokenizer("tiny")


def test_aligned_logits_equal_unpadded_forwards(tiny):
    """Rows with prompts of different lengths (left-padded) give, at completion position j, the logits an
    unpadded forward of that row alone gives at column len(prompt) - 1 + j."""
    model, tok = tiny
    prompts = [tok("a short one", add_special_tokens=False)["input_ids"],
               tok("a much longer prompt than the other", add_special_tokens=False)["input_ids"]]
    completions = [tok("xyz\nANSWER: ", add_special_tokens=False)["input_ids"],
                   tok("q\nANSWER: ", add_special_tokens=False)["input_ids"]]
    positions = [[0, 2, len(completions[0])], [1, len(completions[1])]]
    with torch.no_grad():
        got, mask = aligned_logits(model, prompts, completions, positions, tok.pad_token_id, "cpu")
        for b in range(2):
            full = model(input_ids=torch.tensor([prompts[b] + completions[b]])).logits[0]
            for p, j in enumerate(positions[b]):
                torch.testing.assert_close(got[b, p], full[len(prompts[b]) - 1 + j], rtol=1e-4, atol=1e-5)
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_build_batch_layout():
    b = build_batch([[5, 6], [7]], [[1], [2, 3]], pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 1, 0], [0, 7, 2, 3]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 0], [0, 1, 1, 1]]
    assert b["position_ids"].tolist()[1][1:] == [0, 1, 2] and b["prompt_width"] == 2


def test_sample_positions_seeded_bounded_and_epoch_dependent():
    a = sample_positions(100, 8, seed=3, view_id="x/seeded", epoch=0)
    assert a == sample_positions(100, 8, seed=3, view_id="x/seeded", epoch=0)
    assert len(a) == 8 and a == sorted(a) and len(set(a)) == 8 and all(0 <= i < 100 for i in a)
    assert a != sample_positions(100, 8, seed=3, view_id="x/seeded", epoch=1)
    assert sample_positions(5, 8, seed=3, view_id="x", epoch=0) == [0, 1, 2, 3, 4]
    assert sample_positions(5, 0, seed=3, view_id="x", epoch=0) == [0, 1, 2, 3, 4]


def test_ece_hand_value():
    """Bin (0.9, 1.0]: confidences 0.95, 0.95, accuracy 1/2 -> |0.5 - 0.95| = 0.45, weight 2/4;
    bin (0.5, 0.6]: 0.55, 0.55, accuracy 1/2 -> 0.05, weight 2/4. ECE = 0.225 + 0.025 = 0.25."""
    assert expected_calibration_error([0.95, 0.95, 0.55, 0.55], [True, False, True, False]) == pytest.approx(0.25)
    assert expected_calibration_error([1.0, 1.0], [True, True]) == pytest.approx(0.0)


def test_toy_task_rule_folds_and_views(tmp_path):
    toy = make_taste_toy(0, n_tasks=10)
    assert len(toy.items) == 40 and len(toy.rule) == 12 and len(toy.open_modes) == 4
    for it in toy.items:
        right = it["candidate_a"] if it["label"] == "A" else it["candidate_b"]
        if it["mode"] in toy.rule:
            assert right == toy.rule[it["mode"]]
    path = tmp_path / "items.jsonl"
    write_jsonl_atomic(path, toy.items)
    views = load_fork_views(path, style="compact", demonstration="")
    assert len(views) == 80
    v = views[1]  # the reversed view of the first item
    it = toy.items[0]
    assert v.condition == "reversed" and v.student_prompt == compact_prompt(it["task"], it["candidate_b"], it["candidate_a"])
    right, wrong = (it["candidate_a"], it["candidate_b"])[::1 if it["label"] == "A" else -1]
    assert v.teacher_prompt.startswith(v.student_prompt) and v.teacher_prompt.endswith(f"hint: {v.gold}={right} not {'AB'[v.gold == 'A']}={wrong}")
    assert v.gold == ("B" if it["label"] == "A" else "A")
    taste = load_fork_views(path, style="taste", demonstration="Right: {right} Avoid: {wrong}")
    assert taste[0].student_prompt == taste[0].row["prompt"] and "Right: " in taste[0].teacher_prompt
    mix = base_sft_mix(0, n=50)
    assert all(m["messages"][1]["content"].startswith("need ") for m in mix)


def test_bad_input_names_file_line_field(tmp_path):
    toy = make_taste_toy(1, n_tasks=4)
    items = [dict(it) for it in toy.items]
    del items[2]["task_id"]
    bad = tmp_path / "no_task.jsonl"
    write_jsonl_atomic(bad, items)
    with pytest.raises(DataError, match=r"no_task.jsonl.*line 3.*task_id|line 3.*task_id"):
        load_fork_views(bad, style="compact", demonstration="")
    train_p, test_p = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    write_jsonl_atomic(train_p, toy.items[:8])
    write_jsonl_atomic(test_p, toy.items[8:] + [dict(toy.items[0], item_id="leak")])
    train, test = (load_fork_views(p, style="compact", demonstration="") for p in (train_p, test_p))
    with pytest.raises(DataError, match=r"test.jsonl.*line 9.*task_id|line 9.*task_id"):
        check_task_disjoint(train, test_p, test)


def test_advice_sums_log_odds_over_both_orders(tmp_path):
    """Seeded view log-odds +1.0 (A = candidate_a favoured), reversed -0.4 (there A = candidate_b, so
    candidate_a again): score = 1.0 - (-0.4) = 1.4 -> candidate_a. Second item: +0.2 and +0.5 -> -0.3 ->
    candidate_b (the reversed order's stronger preference for its A wins)."""
    from trainer.distill.advice import advice_from_log_odds

    toy = make_taste_toy(2, n_tasks=1)
    path = tmp_path / "f.jsonl"
    write_jsonl_atomic(path, toy.items[:2])
    views = load_fork_views(path, style="compact", demonstration="")
    i0, i1 = toy.items[0]["item_id"], toy.items[1]["item_id"]
    lo = {f"{i0}/seeded": 1.0, f"{i0}/reversed": -0.4, f"{i1}/seeded": 0.2, f"{i1}/reversed": 0.5}
    rows = advice_from_log_odds(views, lo, {it["item_id"]: it for it in toy.items}, "take {favoured}, not {other} ({score:+.1f})")
    assert [r["favoured"] for r in rows] == ["A", "B"]
    assert rows[0]["score"] == pytest.approx(1.4) and rows[1]["score"] == pytest.approx(-0.3)
    b = toy.items[1]
    assert rows[1]["note"] == f"take {b['candidate_b']}, not {b['candidate_a']} (-0.3)"


def test_advise_command_writes_one_note_per_fork(tmp_path):
    from recipe_utils import run_recipe

    toy = make_taste_toy(3, n_tasks=2)
    path = tmp_path / "forks.jsonl"
    write_jsonl_atomic(path, toy.items)
    rows = run_recipe("advise", "distill", ["recipe=taste_tiny", "model.path=tiny", f"advice.forks_path={path}",
                                            f"advice.out={tmp_path / 'advice.jsonl'}", "algo.max_reasoning_tokens=4"])
    saved = [json.loads(line) for line in (tmp_path / "advice.jsonl").read_text().splitlines()]
    assert saved == rows and len(rows) == len(toy.items)
    assert all(r["favoured"] == ("A" if r["score"] >= 0 else "B") for r in rows)


def test_advise_bad_input_before_model_load(tmp_path):
    from recipe_utils import run_recipe
    from selectrust.core.errors import ConfigError

    with pytest.raises(ConfigError, match="advice.forks_path"):
        run_recipe("advise", "distill", ["recipe=taste_tiny", "model.path=tiny"])
    with pytest.raises(ConfigError, match=r"advice.adapters\[0\]"):
        run_recipe("advise", "distill", ["recipe=taste_tiny", "model.path=tiny", f"advice.forks_path={tmp_path}/x",
                                         f"advice.out={tmp_path}/y", f"advice.adapters=[{tmp_path}/none]"])


def test_teacher_cache_step_equals_uncached_step(tmp_path):
    """With topk_support=teacher, kl_step on the cached teacher top-K gives the loss of a teacher forward."""
    steps, model, views = make_steps(tmp_path, ["algo.topk_support=teacher", "algo.teacher_cache=true"],
                                     reasoning_len=lambda i: 6)
    mb = {"views": views, "epoch": 0}
    plain, m_plain = steps.kl_step(model, mb)
    steps.fill_teacher_cache(views)
    cached, m_cached = steps.kl_step(model, mb)
    assert plain.item() > 0.01
    assert cached.item() == pytest.approx(plain.item(), rel=1e-5)
    assert m_cached["choice_kl"].item() == pytest.approx(m_plain["choice_kl"].item(), rel=1e-5)


def test_teacher_samples_drop_whole_items_and_count_reasons(tmp_path, tiny):
    """A view without the end marker or with too few tokens drops its item (both views), counted by reason."""
    from types import SimpleNamespace

    from trainer.distill.steps import sample_teacher

    _, tok = tiny
    path = tmp_path / "items.jsonl"
    write_jsonl_atomic(path, make_taste_toy(0, n_tasks=1).items[:3])
    views = load_fork_views(path, style="compact", demonstration="")
    ids = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    good, short = ids("need 3\n"), ids("n\n")
    samples = [{"view_id": v.view_id, "reasoning": good, "well_formed": True} for v in views]
    samples[1] = {"view_id": views[1].view_id, "reasoning": ids("need 3"), "well_formed": False}
    samples[4] = {"view_id": views[4].view_id, "reasoning": short, "well_formed": True}
    write_jsonl_atomic(tmp_path / "teacher_samples.jsonl", samples)
    steps = SimpleNamespace(a=SimpleNamespace(min_reasoning_tokens=4, reasoning_end="\n"), tokenizer=tok)
    kept, stats = sample_teacher(steps, views, tmp_path / "teacher_samples.jsonl")
    assert [v.item_id for v in kept] == [views[2].item_id] * 2 and kept[0].reasoning == good
    assert stats == {"items": 3, "views": 6, "views_dropped": {"no_reasoning_end": 1, "too_short": 1},
                     "items_kept": 1, "items_dropped": 2, "views_kept": 2}
