"""Shared-prompt GRPO (``algo.shared_prompt``, trainer/logprobs/group_packing.py): one packed row per group
against the unshared rollout micro-batch, in float32, on the tiny model with LoRA: the GRPO step's loss
(clipped surrogate with stored old log-probs, the k3 KL to the adapter-disabled reference and the
truncated IS weights of a ``generation=vllm_server`` rollout), its metrics, the per-token log-probs and
every LoRA gradient agree within 1e-5, for G in {2, 4, 8} with ragged completions, an empty one (its EOS
only), one cut at the token budget and one masked out (``algo.mask_truncated``); full-logits and chunked
heads. Multi-turn episodes share their first turn; a group that cannot share is reported (a log line)."""

import logging
import random
from functools import partial

import pytest
import torch
from torch.testing import assert_close

from selectrust.model.policy import Reference
from trainer.rl.step import grpo_step
from trainer.config import GRPOAlgoConfig
from trainer.logprobs.group_packing import (group_fallbacks, group_sequence_logprobs, pack_groups, packed_token_counts,
                                         report_unshared_groups, shared_prefix_runs)
from trainer.logprobs.logprobs import right_pad, sequence_logprobs

TOL = dict(rtol=1e-5, atol=1e-5)
BUDGET = 6  # the rollouts' max_new_tokens


def _lora(model):
    peft = pytest.importorskip("peft")
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                                      init_lora_weights=False))


def _microbatch(group_size: int, *, seed: int = 0, vocab: int = 200, eos: int = 2) -> dict:
    """Two groups of ``group_size`` samples (prompts of 9 and 5 tokens), completions of ragged lengths: in
    the first group one empty completion (its EOS only), one cut at the budget (no EOS, kept in the loss)
    and one cut at the budget and masked out (all-zero completion mask)."""
    rng = random.Random(seed)
    rows, masks, items = [], [], []
    for g, p_len in enumerate((9, 5)):
        prompt = [rng.randrange(3, vocab) for _ in range(p_len)]
        for j in range(group_size):
            n = rng.randrange(1, BUDGET)
            comp = [rng.randrange(3, vocab) for _ in range(n - 1)] + [eos]
            mask = [1] * len(comp)
            if g == 0 and j == 0:
                comp, mask = [eos], [1]
            elif g == 0 and j == 1:
                comp, mask = [rng.randrange(3, vocab) for _ in range(BUDGET)], [1] * BUDGET
            elif g == 0 and j == group_size - 1:
                comp, mask = [rng.randrange(3, vocab) for _ in range(BUDGET)], [0] * BUDGET
            rows.append(prompt + comp)
            masks.append([0] * p_len + mask)
            items.append(f"item{g}")
    ids, att, cm = right_pad(rows, masks, 0)
    B, T = ids.shape
    gen = torch.Generator().manual_seed(seed)
    rollout = -torch.rand(B, T, generator=gen) * 3 * cm
    return {"input_ids": ids, "attention_mask": att, "completion_mask": cm,
            "advantages": torch.randn(B, generator=gen), "rollout_logps": rollout, "old_logps": None,
            "num_tokens": float(cm.sum()) * 0.75, "item_ids": items}


def _step(model, mb, logprobs, *, aggregation: str):
    """The GRPO step's loss, metrics, per-token log-probs and LoRA gradients under ``logprobs``."""
    model.zero_grad(set_to_none=True)
    algo = GRPOAlgoConfig(kl_beta=0.05, is_correction="token", aggregation=aggregation)
    seen = []

    def spy(*args, **kwargs):
        out = logprobs(*args, **kwargs)
        seen.append(out[1].detach())
        return out

    loss, metrics = grpo_step(model, mb, algo=algo, reference=Reference(model, lora=True), policy=model,
                              device="cpu", logprobs=spy)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), {k: torch.as_tensor(v).detach() for k, v in metrics.items()}, seen, grads


@pytest.mark.parametrize("group_size", [2, 4, 8])
@pytest.mark.parametrize("chunk", [0, 3])
def test_grpo_step_shared_prompt_equals_unshared(tiny_model, group_size, chunk):
    model = _lora(tiny_model)
    mb = _microbatch(group_size, seed=group_size)
    # stored old log-probs (num_iterations > 1): a policy that differs from the current one
    mb["old_logps"] = sequence_logprobs(model, mb["input_ids"], mb["attention_mask"], mb["completion_mask"])[1].detach() * 0.97
    aggregation = "token_mean" if chunk else "sequence_mean"
    two = _step(model, mb, partial(sequence_logprobs, logprob_chunk=chunk), aggregation=aggregation)
    one = _step(model, mb, partial(group_sequence_logprobs, logprob_chunk=chunk), aggregation=aggregation)
    assert_close(one[0], two[0], **TOL)
    assert one[1].keys() == two[1].keys() and {"kl", "entropy", "policy_loss"} <= set(two[1])
    for k in two[1]:
        assert_close(one[1][k], two[1][k], **TOL, msg=lambda m, k=k: f"{k}: {m}")
    assert len(one[2]) == len(two[2]) == 2  # the policy's and the reference's forward
    for a, b in zip(one[2], two[2]):
        assert_close(a, b, **TOL)
        assert float(b.abs().sum()) > 0
    assert two[3] and one[3].keys() == two[3].keys() and all("lora_" in n for n in two[3])
    for name, g in two[3].items():
        assert_close(one[3][name], g, **TOL, msg=lambda m, n=name: f"{n}: {m}")
    assert any(float(g.abs().sum()) > 0 for g in two[3].values())


def test_packing_runs_each_group_prompt_once():
    mb = _microbatch(4)
    pk = pack_groups(mb["input_ids"], mb["attention_mask"], mb["completion_mask"])
    assert pk.input_ids.shape[0] == 2  # one packed row per group
    real = int(mb["attention_mask"].sum())
    assert pk.unshared_tokens == real and pk.num_tokens == real - 3 * 9 - 3 * 5  # each prompt once, not 4 times
    rows = [r[:int(a.sum())].tolist() for r, a in zip(mb["input_ids"], mb["attention_mask"])]
    masks = [m[:int(a.sum())].tolist() for m, a in zip(mb["completion_mask"], mb["attention_mask"])]
    assert packed_token_counts(rows, masks) == (pk.num_tokens, real)
    assert [(a, b) for a, b, _ in shared_prefix_runs(rows, masks)] == [(0, 4), (4, 8)]
    assert group_fallbacks(rows, masks, mb["item_ids"]) == []


def test_a_completion_never_sees_another(tiny_model):
    """Changing one sample's completion leaves every other sample's log-probs unchanged (the block mask),
    while it changes that sample's later log-probs (the test can fail)."""
    mb = _microbatch(4)
    ids = mb["input_ids"].clone()
    ids[2, 10] = (ids[2, 10] + 1) % 200  # sample 2 of the first group: a completion token (prompt is 9 long)
    with torch.no_grad():
        a = group_sequence_logprobs(tiny_model, mb["input_ids"], mb["attention_mask"], mb["completion_mask"])[1]
        b = group_sequence_logprobs(tiny_model, ids, mb["attention_mask"], mb["completion_mask"])[1]
    others = [k for k in range(ids.shape[0]) if k != 2]
    assert_close(a[others], b[others], **TOL)
    assert float((a[2] - b[2]).abs().max()) > 1e-4


def test_multi_turn_episodes_share_their_first_turn(tiny_model):
    """An episode row: prompt, assistant turn (targets), an environment turn (context, no targets), a second
    assistant turn. The group shares the first turn (before the first assistant token) and matches the
    unshared log-probs; the second turns stay per row."""
    first = [5, 6, 7, 8, 9, 10]
    rows = [first + [20, 21, 2, 30, 31, 40, 2], first + [22, 2, 30, 32, 33, 41, 42, 2], first + [23, 24, 25, 2]]
    masks = [[0] * 6 + [1, 1, 1, 0, 0, 1, 1], [0] * 6 + [1, 1, 0, 0, 0, 1, 1, 1], [0] * 6 + [1, 1, 1, 1]]
    ids, att, cm = right_pad(rows, masks, 0)
    assert shared_prefix_runs(rows, masks) == [(0, 3, 6)]
    with torch.no_grad():
        one = group_sequence_logprobs(tiny_model, ids, att, cm, return_entropy=True)
        two = sequence_logprobs(tiny_model, ids, att, cm, return_entropy=True)
    for x, y in zip(one, two):
        assert_close(x, y, **TOL)


def test_a_group_that_cannot_share_runs_unshared_and_is_reported(tiny_model, caplog):
    """Rows of one group whose first turns differ (a template that renders the first turn per episode)
    run unshared (still exact), and the rollout source names the group in a log line."""
    rows = [[5, 6, 7, 20, 2], [5, 6, 8, 21, 2], [5, 6, 7, 22, 23, 2]]
    masks = [[0, 0, 0, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]]
    assert [(a, b) for a, b, _ in shared_prefix_runs(rows, masks)] == [(0, 1), (1, 2), (2, 3)]
    ids, att, cm = right_pad(rows, masks, 0)
    with torch.no_grad():
        assert_close(group_sequence_logprobs(tiny_model, ids, att, cm)[1], sequence_logprobs(tiny_model, ids, att, cm)[1],
                     **TOL)
    with caplog.at_level(logging.WARNING):
        assert report_unshared_groups(rows, masks, ["ep7"] * 3) == 1
    assert "ep7" in caplog.text and "algo.shared_prompt" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert report_unshared_groups([rows[0], rows[2]], [masks[0], masks[2]], ["ep7"] * 2) == 0
    assert caplog.text == ""


def test_pack_refuses_left_padding():
    ids, att, cm = torch.tensor([[0, 5, 6]]), torch.tensor([[0, 1, 1]]), torch.tensor([[0, 0, 1]])
    with pytest.raises(ValueError, match="right-padded"):
        pack_groups(ids, att, cm)


def test_algo_shared_prompt_is_on_by_default_and_falls_back_visibly(caplog):
    """``algo.shared_prompt`` defaults to true; under a flash-attention kernel (which ignores the block mask) the
    recipe runs unshared and says so in the log; ``algo.oversample_cap`` below 1 is a config error."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from trainer.rl.step import use_shared_prompt
    from trainer.config import register_schemas, validate_grpo
    from selectrust.core.errors import ConfigError

    register_schemas()
    with initialize_config_dir(str(Path(__file__).resolve().parents[3] / "conf"), version_base=None):
        cfg = compose(config_name="grpo", overrides=["recipe=grpo_tiny"])
        assert cfg.algo.shared_prompt is True and cfg.algo.oversample_cap == 2.0
        with caplog.at_level(logging.WARNING):
            assert use_shared_prompt(cfg)
            assert not use_shared_prompt(compose(config_name="grpo", overrides=["recipe=grpo_tiny",
                                                                                  "algo.shared_prompt=false"]))
        assert caplog.text == ""
        flash = compose(config_name="grpo", overrides=["recipe=grpo_tiny", "model.attn_implementation=flash_attention_2"])
        with caplog.at_level(logging.WARNING):
            assert not use_shared_prompt(flash)
        assert "algo.shared_prompt falls back" in caplog.text and "flash_attention_2" in caplog.text
        with pytest.raises(ConfigError, match="algo.oversample_cap must be >= 1"):
            validate_grpo(compose(config_name="grpo", overrides=["recipe=grpo_tiny", "algo.oversample_cap=0.5"]))
