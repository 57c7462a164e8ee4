"""Log-prob utilities and the (prompt, completion) batch builder.

The tiny tokenizer is byte-level with no merges, so one ASCII character is one token: lengths below
are counted by hand.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from selectrust.generation.prompts import PromptSettings
from trainer.logprobs.logprobs import build_pair_batch, build_preference_batch, sequence_logprobs, token_logprobs


# ---------------------------------------------------------------------------------------------------------------------
# token_logprobs
# ---------------------------------------------------------------------------------------------------------------------


def test_token_logprobs_hand_values():
    """logits (0, log 3): log p = (log 0.25, log 0.75) = (-1.3862944, -0.2876821); temperature 2 on logits
    (0, 2 log 3) gives the same; label -100 and mask 0 give 0."""
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    labels = torch.tensor([[0, 1, -100]])
    out = token_logprobs(logits, labels)
    assert_close(out, torch.tensor([[-1.3862944, -0.2876821, 0.0]]), rtol=1e-6, atol=1e-7)
    out_t = token_logprobs(2 * logits, labels, torch.tensor([[1, 0, 1]]), temperature=2.0)
    assert_close(out_t, torch.tensor([[-1.3862944, 0.0, 0.0]]), rtol=1e-6, atol=1e-7)


def test_token_logprobs_equals_log_softmax_gather_in_chunks_and_half_precision():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 6, 17, generator=g) * 4
    labels = torch.randint(0, 17, (5, 6), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert_close(token_logprobs(logits, labels), expected)
    assert_close(token_logprobs(logits, labels, chunk_rows=2), expected)
    bf = token_logprobs(logits.bfloat16(), labels)
    assert bf.dtype == torch.float32
    assert_close(bf, torch.log_softmax(logits.bfloat16().float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1))


# ---------------------------------------------------------------------------------------------------------------------
# sequence_logprobs
# ---------------------------------------------------------------------------------------------------------------------


def _unpadded_loop(model, batch):
    out = []
    for i in range(batch.input_ids.shape[0]):
        n = int(batch.attention_mask[i].sum())
        ids = batch.input_ids[i, :n]
        logp = torch.log_softmax(model(ids[None]).logits[0, :-1].double(), -1)
        lp = logp.gather(-1, ids[1:, None])[:, 0] * batch.completion_mask[i, 1:n]
        out.append(lp.sum())
    return torch.stack(out)


def _to_left_padding(batch, pad_id):
    T = batch.input_ids.shape[1]
    ids = torch.full_like(batch.input_ids, pad_id)
    am, cm = torch.zeros_like(ids), torch.zeros_like(ids)
    for i in range(ids.shape[0]):
        n = int(batch.attention_mask[i].sum())
        ids[i, T - n:] = batch.input_ids[i, :n]
        am[i, T - n:] = 1
        cm[i, T - n:] = batch.completion_mask[i, :n]
    return ids, am, cm


def test_sequence_logprobs_equal_unpadded_loop_for_right_and_left_padding(tiny_model, tiny_tokenizer):
    batch = build_pair_batch(tiny_tokenizer, ["What is 2+2?", "A much longer prompt, padded less."],
                             ["4", "Hello there, friend."], max_prompt_len=128, max_completion_len=64)
    with torch.no_grad():
        expected = _unpadded_loop(tiny_model, batch)
        seq, tok, ent = sequence_logprobs(tiny_model, batch.input_ids, batch.attention_mask, batch.completion_mask,
                                          return_entropy=True)
        seq_full, tok_full, _ = sequence_logprobs(tiny_model, batch.input_ids, batch.attention_mask,
                                                  batch.completion_mask, trim_prompt_logits=False)
        left = _to_left_padding(batch, tiny_tokenizer.pad_token_id)
        seq_left, _, _ = sequence_logprobs(tiny_model, *left)
    assert_close(seq.double(), expected, rtol=1e-5, atol=1e-5)
    assert_close(seq_full, seq)
    assert_close(tok_full, tok)
    assert_close(seq_left.double(), expected, rtol=1e-5, atol=1e-5)
    # token log-probs are aligned with input_ids and zero outside the completion
    assert tok.shape == batch.input_ids.shape
    assert torch.all(tok[batch.completion_mask == 0] == 0) and torch.all(tok[batch.completion_mask == 1] < 0)
    assert torch.all(ent[batch.completion_mask == 0] == 0) and torch.all(ent[batch.completion_mask == 1] > 0)
    assert_close(tok.sum(1), seq)


def test_sequence_logprobs_gradient_flows(tiny_model, tiny_tokenizer):
    batch = build_pair_batch(tiny_tokenizer, ["hi"], ["there"], max_prompt_len=32, max_completion_len=32)
    seq, _, _ = sequence_logprobs(tiny_model, batch.input_ids, batch.attention_mask, batch.completion_mask)
    seq.sum().backward()
    assert tiny_model.lm_head.weight.grad is not None and tiny_model.lm_head.weight.grad.abs().sum() > 0


def test_sequence_logprobs_rejects_bad_masks(tiny_model):
    ids = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="column 0"):
        sequence_logprobs(tiny_model, ids, torch.ones(1, 4), torch.tensor([[1, 1, 0, 0]]))
    with pytest.raises(ValueError, match="padding"):
        sequence_logprobs(tiny_model, ids, torch.tensor([[1, 1, 1, 0]]), torch.tensor([[0, 0, 1, 1]]))


# ---------------------------------------------------------------------------------------------------------------------
# build_pair_batch
# ---------------------------------------------------------------------------------------------------------------------


def test_chat_template_prompt_and_eos_terminated_completion(tiny_tokenizer):
    """Prompt "ab" renders as <|user|> \\n a b <|end|> \\n <|assistant|> \\n = 8 tokens; completion "xyz" + EOS = 4."""
    b = build_pair_batch(tiny_tokenizer, ["ab"], ["xyz"], max_prompt_len=64, max_completion_len=64)
    assert b.prompt_lengths == [8] and b.completion_lengths == [4]
    ids = b.input_ids[0]
    assert tiny_tokenizer.decode(ids[:8]) == "<|user|>\nab<|end|>\n<|assistant|>\n"
    assert tiny_tokenizer.decode(ids[8:11]) == "xyz" and ids[11].item() == tiny_tokenizer.eos_token_id
    assert b.completion_mask[0].tolist() == [0] * 8 + [1] * 4
    # chat messages give the same rendering as a plain string prompt
    b2 = build_pair_batch(tiny_tokenizer, [[{"role": "user", "content": "ab"}]], ["xyz"], max_prompt_len=64,
                          max_completion_len=64)
    assert torch.equal(b2.input_ids, b.input_ids)
    # an EOS already present is not doubled
    b3 = build_pair_batch(tiny_tokenizer, ["ab"], ["xyz" + tiny_tokenizer.eos_token], max_prompt_len=64,
                          max_completion_len=64)
    assert torch.equal(b3.input_ids, b.input_ids)


def test_truncation_policies_and_stats(tiny_tokenizer):
    """Plain prompts "abcdefgh" and "ab", rendered without a template as text + "\n" (9 and 3 tokens);
    max_prompt_len 5, max_completion_len 3. keep_end keeps "efgh\n", keep_start keeps "abcde";
    completion "uvwxy" + EOS (6) is cut to "uvw" (no EOS);
    completion "z" + EOS (2) is untouched. Right padding with <pad>."""
    kw = dict(max_prompt_len=5, max_completion_len=3, prompt_settings=PromptSettings(use_chat_template=False))
    prompts, completions = ["abcdefgh", "ab"], ["uvwxy", "z"]
    end = build_pair_batch(tiny_tokenizer, prompts, completions, truncation="keep_end", **kw)
    start = build_pair_batch(tiny_tokenizer, prompts, completions, truncation="keep_start", **kw)
    dec = tiny_tokenizer.decode
    assert dec(end.input_ids[0]) == "efgh\nuvw" and dec(start.input_ids[0]) == "abcdeuvw"
    assert end.input_ids[1, 4].item() == tiny_tokenizer.eos_token_id
    assert end.input_ids[1, 5:].tolist() == [tiny_tokenizer.pad_token_id] * 3
    assert end.attention_mask[1].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert end.completion_mask.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0]]
    assert end.prompt_truncated.tolist() == [True, False]
    assert end.completion_truncated.tolist() == [True, False]
    assert end.stats == {"num_rows": 2, "num_prompts_truncated": 1, "num_completions_truncated": 1, "max_length": 8}
    with pytest.raises(ValueError, match="row 0: prompt has 9 tokens"):
        build_pair_batch(tiny_tokenizer, prompts, completions, truncation="error", **kw)
    with pytest.raises(ValueError, match="truncation must be one of"):
        build_pair_batch(tiny_tokenizer, prompts, completions, truncation="left", **kw)


def test_preference_batch_layout_is_chosen_then_rejected(tiny_tokenizer):
    b = build_preference_batch(tiny_tokenizer, ["p1", "p2"], ["c1", "c2"], ["r1", "r2"], max_prompt_len=32,
                               max_completion_len=32, prompt_settings=PromptSettings(use_chat_template=False))
    dec = [tiny_tokenizer.decode(row[m.bool()]) for row, m in zip(b.input_ids, b.attention_mask)]
    eos = tiny_tokenizer.eos_token
    assert dec == [f"p1\nc1{eos}", f"p2\nc2{eos}", f"p1\nr1{eos}", f"p2\nr2{eos}"]
    with pytest.raises(ValueError, match="equal lengths"):
        build_preference_batch(tiny_tokenizer, ["p"], ["c"], [], max_prompt_len=8, max_completion_len=8)
