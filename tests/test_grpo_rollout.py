"""GRPO rollout source: drop/refill rule, advantages, micro-batches, resume state, bad input (fake backend)."""

import json

import pytest
import torch

from eval_hooks.io import DataError
from tests.box2_fakes import ScriptedBackend
from trainer.data import ShuffleSampler
from trainer.rewards import GuardedReward, resolve_reward
from trainer.rollout import (Group, Rollout, RolloutSettings, RolloutSource, check_prompt_lengths, fill_batch,
                             load_rl_prompts, round_seed)


def _groups(reward_lists):
    return [Group(f"g{i}", [Rollout(f"g{i}", [1, 2], [0, 1], r) for r in rs]) for i, rs in enumerate(reward_lists)]


def test_fill_batch_drops_refills_and_pads():
    script = {0: [[1, 0], [1, 1], [0, 0]], 1: [[0, 0], [0, 1]], 2: [[1, 1]]}
    asked = []

    def gen(n, rnd):
        asked.append((n, rnd))
        return _groups(script[rnd])

    groups, stats = fill_batch(gen, num_groups=3, max_refill_rounds=2, drop_zero_variance=True)
    assert asked == [(3, 0), (2, 1), (1, 2)]
    assert [g.rewards for g in groups] == [[1, 0], [0, 1], [1, 1]]  # kept, kept, then the first dropped group
    assert stats == {"groups_generated": 6, "groups_dropped": 4, "groups_refilled": 1, "refill_rounds": 2,
                     "groups_padded_zero_variance": 1, "zero_variance_frac": 2 / 3}


def test_fill_batch_without_refill_or_without_dropping():
    groups, stats = fill_batch(lambda n, r: _groups([[1, 0], [1, 1], [0, 0]]), num_groups=3, max_refill_rounds=0,
                               drop_zero_variance=True)
    assert stats["groups_padded_zero_variance"] == 2 and stats["refill_rounds"] == 0
    groups, stats = fill_batch(lambda n, r: _groups([[1, 1], [1, 0]]), num_groups=2, max_refill_rounds=3,
                               drop_zero_variance=False)
    assert [g.rewards for g in groups] == [[1, 1], [1, 0]] and stats["groups_generated"] == 2
    assert stats["zero_variance_frac"] == 0.5
    with pytest.raises(RuntimeError, match="returned 1 groups, expected 2"):
        fill_batch(lambda n, r: _groups([[1, 0]]), num_groups=2, max_refill_rounds=0, drop_zero_variance=True)


ROWS = [{"item_id": f"i{k}", "prompt": f"key k{k}?", "gold": k, "answer_type": "numeric"} for k in range(6)]


def _script(request, j, seed):
    """gold 0: every sample right (a zero-variance group); otherwise only sample 0 is right."""
    gold = int(request.messages[-1]["content"][5])
    return str(gold) if (gold == 0 or j == 0) else "x"


def _source(tokenizer, *, num_iterations=1, old=None, script=_script, mask_truncated=False, max_new_tokens=4,
            grad_accum=2, seed=0):
    s = RolloutSettings(group_size=4, num_groups=2, grad_accum=grad_accum, num_iterations=num_iterations,
                        max_new_tokens=max_new_tokens, mask_truncated=mask_truncated, max_refill_rounds=2, seed=seed)
    backend = ScriptedBackend(tokenizer, script)
    src = RolloutSource(ROWS, ShuffleSampler(len(ROWS), seed=seed), settings=s, tokenizer=tokenizer,
                        backend_factory=lambda: backend, reward=GuardedReward(resolve_reward("numeric_match")),
                        old_logps_fn=old)
    return src, backend


def test_rollout_batch_advantages_and_microbatches(tiny_tokenizer):
    src, backend = _source(tiny_tokenizer)
    mbs = [src.next_microbatch(), src.next_microbatch()]
    m = src.pop_metrics()
    # rewards [1,0,0,0] per kept group: mean 0.25, unbiased std 0.5 -> A = (0.75, -0.25 x3) / (0.5 + 1e-4)
    want = torch.tensor([0.75, -0.25, -0.25, -0.25]) / 0.5001
    for mb in mbs:
        assert mb["input_ids"].shape[0] == 4 and len(set(mb["item_ids"])) == 1
        torch.testing.assert_close(mb["advantages"], want)
        assert mb["old_logps"] is None
    # the zero-variance group (gold 0), if drawn, was dropped and replaced
    kept = {mbs[0]["item_ids"][0], mbs[1]["item_ids"][0]}
    assert "i0" not in kept
    drawn_zero = any(r.messages[-1]["content"] == "key k0?" for r in backend.requests)
    assert m["groups_dropped"] == float(drawn_zero) and m["groups_padded_zero_variance"] == 0
    # completion tokens: "d"+EOS (2) for sample 0, "x"+EOS (2) for the others -> 8 per micro-batch, 16 total
    assert all(int(mb["completion_mask"].sum()) == 8 for mb in mbs)
    assert mbs[0]["num_tokens"] == 16 / 2
    # every request of round 0 carries the round seed
    assert backend.requests[0].seed == round_seed(0, 0, 0, 0) and backend.requests[0].n == 4
    for key in ("reward_mean", "reward_std", "zero_variance_frac", "completion_len_mean", "time_generation_s",
                "generation_fraction", "reward_errors"):
        assert key in m
    # prompt tokens are masked, completion tokens are not
    row = mbs[0]
    L = int(row["attention_mask"][0].sum())
    assert row["completion_mask"][0, L - 2:L].tolist() == [1, 1] and row["completion_mask"][0, :L - 2].sum() == 0


def test_mask_truncated_excludes_length_finished_samples(tiny_tokenizer):
    long_if_wrong = lambda r, j, s: "1" if j == 0 else "abcdefgh"
    src, _ = _source(tiny_tokenizer, script=long_if_wrong, mask_truncated=True, max_new_tokens=4)
    mb = src.next_microbatch()
    # samples 1..3 hit max_new_tokens: their masks are zero; sample 0 keeps "1"+EOS
    assert mb["completion_mask"].sum(dim=1).tolist()[1:] == [0, 0, 0]
    assert src.pop_metrics()["truncated_frac"] == 0.75


def test_resume_mid_batch_reproduces_microbatches(tiny_tokenizer):
    def old(ids, att, cm):
        return (ids.float() * -0.01) * cm  # deterministic stand-in for the policy's log-probs

    a, _ = _source(tiny_tokenizer, num_iterations=2, old=old)
    first = [a.next_microbatch() for _ in range(3)]  # iteration 1 (2 micro-batches) + 1 of iteration 2
    state = json.loads(json.dumps(a.state_dict()))  # survives the JSON checkpoint
    assert state["batch"] is not None and state["cursor"] == 3
    rest_a = [a.next_microbatch() for _ in range(3)]
    b, backend_b = _source(tiny_tokenizer, num_iterations=2, old=old)
    b.load_state_dict(state)
    rest_b = [b.next_microbatch() for _ in range(3)]
    for x, y in zip(rest_a, rest_b):
        for k in ("input_ids", "completion_mask", "advantages", "old_logps"):
            assert torch.equal(x[k], y[k]), k
    # the replayed micro-batch equals the first pass's (same batch, stored old log-probs)
    assert torch.equal(rest_a[0]["input_ids"], first[1]["input_ids"])
    torch.testing.assert_close(first[0]["old_logps"], old(first[0]["input_ids"], None, first[0]["completion_mask"]))
    # b regenerated only the next batch (1 generation round for it), with the seed of rollout 1
    assert backend_b.requests[0].seed == round_seed(0, 1, 0, 0)


def test_resume_at_batch_boundary_regenerates_identically(tiny_tokenizer):
    a, _ = _source(tiny_tokenizer)
    a.next_microbatch(); a.next_microbatch()
    state = a.state_dict()
    assert state["batch"] is None
    nxt = a.next_microbatch()
    b, _ = _source(tiny_tokenizer)
    b.load_state_dict(state)
    assert torch.equal(b.next_microbatch()["input_ids"], nxt["input_ids"])


def test_bad_input_before_generation(tiny_tokenizer, tmp_path):
    rows = [dict(ROWS[0], prompt="x" * 300, _path="p.jsonl", _line=1)]
    with pytest.raises(DataError, match=r"p.jsonl, line 1, field 'prompt'.*'i0' has \d+ tokens > data.max_prompt_len=64"):
        check_prompt_lengths(rows, tiny_tokenizer, max_prompt_len=64, use_chat_template=True)
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"item_id": "a", "prompt": "q", "answer_type": "numeric"}) + "\n")
    with pytest.raises(DataError, match="line 1, field 'gold'"):
        load_rl_prompts(str(f))
    short = ScriptedBackend(tiny_tokenizer, _script)
    short.generate = lambda reqs, **k: [type("R", (), {"samples": [], "prompt_token_ids": []})() for _ in reqs]
    src, _ = _source(tiny_tokenizer)
    src._backend = short
    with pytest.raises(RuntimeError, match="returned 0 samples .* algo.group_size=4 \\(an empty or short group\\)"):
        src.next_microbatch()


def test_toy_prompts_and_box2_rows_load():
    rows = load_rl_prompts("toy:0/grpo_prompts.jsonl")
    assert rows and {"item_id", "prompt", "gold", "answer_type"} <= set(rows[0])
    bad = load_rl_prompts("toy:0/box2_heldout.jsonl", family="box2", conditions=["bad"])
    assert bad and all(r["condition"] == "bad" for r in bad)
