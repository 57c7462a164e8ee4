"""One length policy (trainer.data.train_data.truncation_policy) behind both the pair and the SFT data paths."""

import pytest

from eval_hooks.io import DataError
from eval_hooks.prompts import PromptSettings
from trainer.data.train_data import PairSet, apply_length_policy, truncation_policy
from trainer.data.sft_data import apply_sft_length_policy


def _measure(n):  # rows are lengths; over 4 is too long
    return n, (f"row {n} is too long", "len") if n > 4 else None


@pytest.mark.parametrize("policy, kept, dropped", [
    ("keep_end", [1, 5, 2, 7], 0), ("keep_start", [1, 5, 2, 7], 0), ("drop", [1, 2], 2)])
def test_policy_by_hand(policy, kept, dropped):
    assert truncation_policy([1, 5, 2, 7], _measure, truncation=policy, what="row") == (kept, dropped)


def test_error_names_the_first_overlong_row_and_no_row_left_is_an_error():
    with pytest.raises(DataError, match="row 5 is too long") as e:
        truncation_policy([1, 5, 2, 7], _measure, truncation="error", what="row", path="f.jsonl")
    assert e.value.field == "len" and "f.jsonl" in str(e.value)
    with pytest.raises(DataError, match="every row exceeds the length limits"):
        truncation_policy([5, 7], _measure, truncation="drop", what="row")


def test_pairs_and_sft_examples_go_through_it(tiny_tokenizer):
    plain = PromptSettings(use_chat_template=False)
    rows = [{"pair_id": f"p{i}", "condition": "clean", "prompt": "word " * n, "chosen": "1", "rejected": "2"}
            for i, n in enumerate((2, 40, 3))]
    out = apply_length_policy(PairSet(rows=rows, stats={}), tiny_tokenizer, max_prompt_len=16, max_completion_len=8,
                              truncation="drop", prompt_settings=plain)
    assert [r["pair_id"] for r in out.rows] == ["p0", "p2"]
    assert out.stats["truncated"] == {"prompts_over_max": 1, "completions_over_max": 0, "policy": "drop", "dropped": 1}
    examples = [{"item_id": f"e{i}", "messages": [{"role": "user", "content": "word " * n},
                                                 {"role": "assistant", "content": "ok"}]} for i, n in enumerate((2, 40, 3))]
    kept, stats = apply_sft_length_policy(examples, tiny_tokenizer, multi_turn=False, max_prompt_len=16,
                                          max_completion_len=8, truncation="keep_end", prompt_settings=plain)
    assert [e["item_id"] for e in kept] == ["e0", "e1", "e2"] and all(e["num_tokens"] > 0 for e in kept)
    assert stats == {"examples": 3, "over_max_length": 1, "dropped": 0, "policy": "keep_end"}
    with pytest.raises(DataError, match="example 'e1' has .* prompt and .* target tokens"):
        apply_sft_length_policy(examples, tiny_tokenizer, multi_turn=False, max_prompt_len=16, max_completion_len=8,
                                truncation="error", prompt_settings=plain)
