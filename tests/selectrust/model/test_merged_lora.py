"""selectrust.model.merged_lora: generation with the LoRA layers merged into temporary weights gives the adapter's
function (up to fp32 rounding) and leaves the policy exactly as it was: the same weight tensors, bit for bit, the
same adapter state and trainable flags, gradients still reaching the adapter."""

import pytest
import torch

from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.hf import HFBackend
from selectrust.model.merged_lora import lora_merged


@pytest.fixture
def lora_policy(tiny_model):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(tiny_model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    with torch.no_grad():  # B = 0 at init would make the merge a no-op: give the adapter a real delta
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)
    return model


def _state(model):
    return {n: (p, p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()}


def test_merged_layers_compute_the_adapters_function_and_the_weights_come_back_untouched(lora_policy):
    ids = torch.tensor([[5, 9, 13, 2, 7, 11]])
    before = _state(lora_policy)
    lora_policy.eval()
    with torch.no_grad():
        ref = lora_policy(input_ids=ids).logits
        with lora_merged(lora_policy) as n:
            merged = lora_policy(input_ids=ids).logits
    assert n == 3 * lora_policy.config.num_hidden_layers
    assert torch.allclose(merged, ref, atol=1e-5, rtol=0), (merged - ref).abs().max()
    with lora_policy.disable_adapter(), torch.no_grad():  # the adapter's delta is not negligible: the test can fail
        base = lora_policy(input_ids=ids).logits
    assert (base - ref).abs().max() > 1e-3
    after = _state(lora_policy)
    assert after.keys() == before.keys()
    for name, (p, value, flag) in before.items():
        q, now, flag_now = after[name]
        assert q is p and flag_now == flag and torch.equal(now, value), name
    assert all(not m._disable_adapters for m in lora_policy.modules() if hasattr(m, "lora_A"))


def test_an_error_inside_the_block_restores_the_layers(lora_policy):
    before = _state(lora_policy)
    with pytest.raises(RuntimeError, match="mid-generation"):
        with lora_merged(lora_policy):
            raise RuntimeError("mid-generation")
    for name, (p, value, flag) in before.items():
        assert dict(lora_policy.named_parameters())[name] is p and torch.equal(p.detach(), value)
    assert all(not m._disable_adapters for m in lora_policy.modules() if hasattr(m, "lora_A"))


def test_training_after_a_merged_generation_still_reaches_the_adapter(lora_policy, tiny_tokenizer):
    backend = HFBackend(lora_policy, tiny_tokenizer)
    lora_policy.train()
    backend.generate([GenerationRequest(prompt="key k1 is\n", n=2, max_new_tokens=4, temperature=1.0, seed=3)])
    assert lora_policy.training
    loss = lora_policy(input_ids=torch.tensor([[5, 9, 13, 2]])).logits.pow(2).mean()
    loss.backward()
    grads = [p.grad for n, p in lora_policy.named_parameters() if "lora_" in n]
    assert grads and all(g is not None and bool(g.abs().sum() > 0) for g in grads)
    assert all(p.grad is None for n, p in lora_policy.named_parameters() if "lora_" not in n)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_merged_and_unmerged_agree(lora_policy, tiny_tokenizer, temperature):
    """The same tokens (greedy, and seeded sampling) and log-probs within fp32 rounding, merged or not."""
    reqs = [GenerationRequest(prompt=f"key k{i} is\n", n=3, max_new_tokens=8, temperature=temperature, seed=i)
            for i in range(4)]
    merged = HFBackend(lora_policy, tiny_tokenizer, merge_lora=True).generate(reqs)
    plain = HFBackend(lora_policy, tiny_tokenizer, merge_lora=False).generate(reqs)
    for a, b in zip(merged, plain, strict=True):
        for s, t in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == t.token_ids
            assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(t.logprobs), atol=1e-5, rtol=0)


def test_a_model_without_lora_is_left_alone(tiny_model):
    before = _state(tiny_model)
    with lora_merged(tiny_model) as n:
        assert n == 0
    assert all(dict(tiny_model.named_parameters())[k] is p for k, (p, _, _) in before.items())


@pytest.mark.parametrize("value", [True, False])
def test_the_generation_setting_reaches_the_backend(tiny_model, tiny_tokenizer, value):
    from selectrust.generation.backends.hf import HFSettings, build
    from selectrust.generation.backends import BuildContext

    backend = build(HFSettings(merge_lora=value), BuildContext(model=tiny_model, tokenizer=tiny_tokenizer))
    assert backend.merge_lora is value
