"""SFT's home (trainer/sft/): the step's loss on hand-computed log-probs, and the last-turn split of a conversation."""

import pytest
import torch

from trainer.sft.data import split_last_turn
from trainer.sft.step import sft_step


def _fake_logprobs(token_logps):
    """A ``logprobs`` stand-in that returns fixed per-token log-probs (as ``sequence_logprobs`` would)."""
    def logprobs(model, ids, att, cm):
        return None, token_logps, None
    return logprobs


def test_sft_step_is_the_mean_nll_over_completion_tokens_by_hand():
    # two rows; completion tokens: row 0 -> positions 1, 2 (log-probs -1, -3); row 1 -> position 0 (-2)
    token_logps = torch.tensor([[-5.0, -1.0, -3.0], [-2.0, -7.0, -9.0]])
    cm = torch.tensor([[0, 1, 1], [1, 0, 0]])
    mb = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long),
          "completion_mask": cm, "num_items": 3}
    loss, _ = sft_step(None, mb, aggregation="token_mean", device="cpu", logprobs=_fake_logprobs(token_logps))
    assert loss.item() == pytest.approx((1.0 + 3.0 + 2.0) / 3)  # summed NLL over the window's 3 completion tokens
    # num_items is the accumulation window's token count (TRL's num_items_in_batch): 6 tokens in the window
    loss, _ = sft_step(None, {**mb, "num_items": 6}, aggregation="token_mean", device="cpu",
                       logprobs=_fake_logprobs(token_logps))
    assert loss.item() == pytest.approx(6.0 / 6)


def test_split_last_turn_keeps_the_history_and_returns_the_last_assistant_turn():
    msgs = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    history, target = split_last_turn(msgs)
    assert target == "a2" and history == msgs[:3]
