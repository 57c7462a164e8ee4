"""One length policy (trainer.data.train_data.truncation_policy) behind both the pair and the SFT data paths."""

import pytest

from selectrust.core.io import DataError
from selectrust.generation.prompts import PromptSettings
from trainer.data.train_data import truncation_policy
from trainer.dpo.data import PairSet, apply_length_policy
from trainer.sft.data import apply_sft_length_policy


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


def test_pairs_identical_once_cut_to_max_completion_len_are_dropped_and_counted(tiny_tokenizer):
    """Chosen and rejected that differ only past data.max_completion_len are the same tokens in training (a DPO
    margin of 0 by construction): dropped and counted by reason, or an error naming the pair with
    data.on_invalid=error; a pair that differs within the limit, or is cut but still differs, is kept."""
    plain = PromptSettings(use_chat_template=False)
    shared = "The answer is 4 because "  # 24 tokens of the tiny (byte-level) tokenizer
    rows = [{"pair_id": "same", "condition": "clean", "prompt": "q?", "chosen": shared + "two plus two",
             "rejected": shared + "of four"},
            {"pair_id": "differs", "condition": "clean", "prompt": "q?", "chosen": "4", "rejected": "5"},
            {"pair_id": "cut", "condition": "clean", "prompt": "q?", "chosen": "4" + shared * 2, "rejected": "5" + shared * 2}]
    pairs = PairSet(rows=rows, stats={"dropped": {"empty_completion": 2}})
    out = apply_length_policy(pairs, tiny_tokenizer, max_prompt_len=16, max_completion_len=16, truncation="keep_end",
                              prompt_settings=plain)
    assert [r["pair_id"] for r in out.rows] == ["differs", "cut"] and out.stats["rows"] == 2
    assert out.stats["dropped"] == {"empty_completion": 2, "identical_after_truncation": 1}
    assert out.stats["truncated"]["completions_over_max"] == 2 and out.stats["truncated"]["dropped"] == 0
    # the same pairs under a limit that reaches past the shared start: nothing identical, nothing dropped
    wide = apply_length_policy(pairs, tiny_tokenizer, max_prompt_len=16, max_completion_len=32, truncation="keep_end",
                               prompt_settings=plain)
    assert len(wide.rows) == 3 and wide.stats["dropped"] == {"empty_completion": 2}
    with pytest.raises(DataError, match=r"pair 'same' \(clean\): chosen and rejected are identical once cut to "
                                        r"data.max_completion_len=16") as e:
        apply_length_policy(pairs, tiny_tokenizer, max_prompt_len=16, max_completion_len=16, truncation="keep_end",
                            prompt_settings=plain, on_invalid="error")
    assert e.value.field == "chosen/rejected"
    with pytest.raises(DataError, match="no usable pairs left"):
        apply_length_policy(PairSet(rows=rows[:1], stats={}), tiny_tokenizer, max_prompt_len=16, max_completion_len=16,
                            truncation="keep_start", prompt_settings=plain)
