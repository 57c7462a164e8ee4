"""The chunked log-prob path (``model.logprob_chunk``) against today's full-logits path, in float32:
per-token log-probs, entropy and every parameter gradient within 1e-5, on the tiny model (trainable and
frozen head, LoRA, temperature) and on a model with Qwen3's 151,936-token vocabulary."""

import pytest
import torch
from torch.testing import assert_close

from trainer.logprobs.chunked_logprobs import chunked_gather_logprobs, chunked_topk_logprobs, lm_head_of
from trainer.logprobs.logprobs import sequence_logprobs

TOL = dict(rtol=1e-5, atol=1e-5)


def _batch(vocab: int, seed: int = 0):
    """Three right-padded rows with different prompt and completion lengths (and one fully padded tail)."""
    g = torch.Generator().manual_seed(seed)
    lengths = [(3, 6), (5, 2), (2, 4)]  # (prompt, completion)
    width = max(p + c for p, c in lengths) + 1
    ids = torch.randint(3, vocab, (3, width), generator=g)
    att = torch.zeros(3, width, dtype=torch.long)
    comp = torch.zeros(3, width, dtype=torch.long)
    for i, (p, c) in enumerate(lengths):
        att[i, :p + c] = 1
        comp[i, p:p + c] = 1
    ids[att == 0] = 0
    return ids, att, comp


def _grads_and_outputs(model, ids, att, comp, **kw):
    model.zero_grad(set_to_none=True)
    seq, tok, ent = sequence_logprobs(model, ids, att, comp, return_entropy=True, **kw)
    # a loss that weights rows and tokens differently, so every per-token gradient matters
    w = torch.arange(1, tok.numel() + 1, dtype=tok.dtype).reshape(tok.shape) / tok.numel()
    ((tok * w).sum() + 0.3 * seq[0] - 0.7 * seq[-1]).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return tok.detach(), ent, grads


def _assert_equal_paths(model, ids, att, comp, *, chunk: int, temperature: float = 1.0):
    tok0, ent0, g0 = _grads_and_outputs(model, ids, att, comp, temperature=temperature)
    tok1, ent1, g1 = _grads_and_outputs(model, ids, att, comp, temperature=temperature, logprob_chunk=chunk)
    assert float(tok0.abs().sum()) > 0 and (tok0 != 0).sum() == comp.sum()
    assert_close(tok1, tok0, **TOL)
    assert_close(ent1, ent0, **TOL)
    assert g0.keys() == g1.keys() and g0
    for name in g0:
        assert_close(g1[name], g0[name], **TOL, msg=lambda m, n=name: f"{n}: {m}")
    return g0


def test_tiny_model_trainable_head_equal(tiny_model):
    ids, att, comp = _batch(tiny_model.config.vocab_size)
    grads = _assert_equal_paths(tiny_model, ids, att, comp, chunk=4)  # 12 completion positions: 3 chunks
    assert "lm_head.weight" in grads  # the recompute-in-backward branch


def test_tiny_model_frozen_head_temperature_equal(tiny_model):
    tiny_model.lm_head.weight.requires_grad_(False)
    ids, att, comp = _batch(tiny_model.config.vocab_size, seed=1)
    grads = _assert_equal_paths(tiny_model, ids, att, comp, chunk=5, temperature=0.7)
    assert "lm_head.weight" not in grads and "model.embed_tokens.weight" in grads  # the p@W-in-forward branch


def test_tiny_model_lora_equal(tiny_model):
    import peft

    model = peft.get_peft_model(tiny_model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                            init_lora_weights=False))
    ids, att, comp = _batch(tiny_model.config.vocab_size, seed=2)
    grads = _assert_equal_paths(model, ids, att, comp, chunk=1000)
    assert all("lora_" in n for n in grads)
    with torch.no_grad():  # the reference pass: no autograd state at all
        _, tok, _ = sequence_logprobs(model, ids, att, comp, logprob_chunk=3)
    assert not tok.requires_grad


def test_qwen3_vocabulary_equal():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=151_936, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float()
    ids, att, comp = _batch(cfg.vocab_size, seed=3)
    _assert_equal_paths(model, ids, att, comp, chunk=5)


def test_gather_and_topk_match_log_softmax():
    """The distillation gather: full-vocabulary log-probs at K given tokens (and their gradients), and the
    teacher's top-K, against log_softmax of the full logits."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(7, 8, generator=g, requires_grad=True)
    weight = torch.randn(50, 8, generator=g, requires_grad=True)
    index = torch.randint(0, 50, (7, 3), generator=g)
    ref = torch.log_softmax(hidden @ weight.t() / 1.5, -1)
    top_v, top_i = ref.detach().topk(4, dim=-1)
    vals, idx = chunked_topk_logprobs(hidden, weight, 4, temperature=1.5, chunk=3)
    assert torch.equal(idx, top_i) and not vals.requires_grad
    assert_close(vals, top_v, **TOL)
    upstream = torch.randn(7, 3, generator=g)
    expect = ref.gather(-1, index)
    expect_grads = torch.autograd.grad((expect * upstream).sum(), (hidden, weight))
    got = chunked_gather_logprobs(hidden, weight, index, temperature=1.5, chunk=3)[0]
    assert_close(got, expect, **TOL)
    for a, b in zip(torch.autograd.grad((got * upstream).sum(), (hidden, weight)), expect_grads):
        assert_close(a, b, **TOL)
    frozen = weight.detach()  # the frozen-head branch (p @ W kept from the forward)
    got = chunked_gather_logprobs(hidden, frozen, index, temperature=1.5, chunk=2)[0]
    assert_close(torch.autograd.grad((got * upstream).sum(), hidden)[0], expect_grads[0], **TOL)


def test_unsupported_head_is_named(tiny_model):
    tiny_model.lm_head = torch.nn.Linear(tiny_model.config.hidden_size, tiny_model.config.vocab_size, bias=True)
    with pytest.raises(ValueError, match="bias"):
        lm_head_of(tiny_model)
