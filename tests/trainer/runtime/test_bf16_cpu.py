"""bf16 mixed precision on CPU (``trainer.mixed_precision=bf16`` or ``auto``): the hardware check, and a LoRA
DPO step under ``torch.autocast("cpu", bfloat16)`` against fp32.

Stated tolerance (tiny model, LoRA on every linear layer): summed log-probs within 2% of their fp32 values
(bf16 has an 8-bit mantissa: about 0.4% per product), the DPO loss within 0.01, and every LoRA gradient
with a cosine similarity above 0.99 to its fp32 gradient. LoRA parameters, their gradients and the
log-probs stay fp32."""

import pytest
import torch

from trainer.algos.dpo import sigmoid_dpo_loss
from trainer.logprobs.logprobs import build_preference_batch
from trainer.runtime.run import cpu_supports_bf16, resolve_mixed_precision
from trainer.logprobs.shared_prompt import pack_preference_batch, shared_prompt_logprobs

AMX = "processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_fp16\n"  # bf16, but slower than fp32
OLD = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n"


def test_cpu_bf16_detection_and_auto_resolution(capsys):
    assert cpu_supports_bf16(AMX) and cpu_supports_bf16("flags : avx512_bf16\n") and not cpu_supports_bf16(OLD)
    assert resolve_mixed_precision("auto", cpu=True, cpuinfo=AMX) == "bf16"
    assert resolve_mixed_precision("auto", cpu=True, cpuinfo=OLD) == "no"
    assert "no AMX-BF16 (no bf16 support)" in capsys.readouterr().out
    # AVX512-BF16 alone: bf16 GEMMs ran at half fp32's speed (selectrust/model/precision.py), so auto stays fp32 there
    assert cpu_supports_bf16(AVX512_BF16) and resolve_mixed_precision("auto", cpu=True, cpuinfo=AVX512_BF16) == "no"
    assert "slower than fp32 without AMX" in capsys.readouterr().out
    assert resolve_mixed_precision("bf16", cpu=True, cpuinfo=AVX512_BF16) == "bf16"  # asked for: kept
    assert resolve_mixed_precision("no", cpu=True, cpuinfo=AMX) == "no"  # an explicit value is kept
    assert resolve_mixed_precision("bf16", cpu=True, cpuinfo=OLD) == "bf16"


def _step(model, packed, *, bf16: bool):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        seq = shared_prompt_logprobs(model, packed)
        pc, pr = seq.chunk(2)
        loss, _ = sigmoid_dpo_loss(pc, pr, pc.detach() * 1.05, pr.detach() * 0.95, beta=0.1)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return seq.detach(), loss.detach(), grads


def test_bf16_autocast_lora_dpo_step_matches_fp32(tiny_model, tiny_tokenizer):
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                            init_lora_weights=False))
    batch = build_preference_batch(tiny_tokenizer, ["key k1 is", "what is k22", "k3 now"], ["v1", "value 22", "v3"],
                                   ["w", "no no", "v33 x"], max_prompt_len=32, max_completion_len=16)
    packed = pack_preference_batch(batch)
    s32, l32, g32 = _step(model, packed, bf16=False)
    s16, l16, g16 = _step(model, packed, bf16=True)
    assert s16.dtype == torch.float32 and l16.dtype == torch.float32
    assert torch.allclose(s16, s32, rtol=0.02, atol=0.0)
    assert abs(float(l16 - l32)) < 0.01
    assert g16.keys() == g32.keys() and all("lora_" in n for n in g32)
    for name, g in g32.items():
        assert g16[name].dtype == torch.float32
        cos = torch.nn.functional.cosine_similarity(g16[name].flatten(), g.flatten(), dim=0)
        assert cos > 0.99, (name, float(cos))
    assert any(not torch.equal(g16[n], g32[n]) for n in g32)  # bf16 really ran
