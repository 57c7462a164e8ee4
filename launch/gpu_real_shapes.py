"""Step time, tokens/s, peak memory and MFU at real model shapes, on one GPU (issue 17 §3). Not part of CI.

    python launch/gpu_real_shapes.py                    # one GPU, bf16, both models, both log-prob paths (< 8 min on an H200)
    python launch/gpu_real_shapes.py --smoke            # CPU, scaled-down configs, 1 step each (checks the code path)
    python launch/gpu_real_shapes.py --models qwen3_4b --chunk 4096 --peak-tflops 989

Random-init models built from the configs of Qwen3-4B and Llama-3.2-3B written below (nothing is
downloaded), bf16 weights, sdpa attention, LoRA r16 / alpha 32 on every linear layer of the blocks
(the LM head, tied to the embedding in both models, stays frozen). For each model and for both
``model.logprob_chunk`` settings (0 = today's full-logits path, and ``--chunk``):

- DPO: ``--dpo-steps`` (10) steps of 2 pairs = 4 rows x 2,048 tokens (512 prompt + 1,536 completion):
  policy ``sequence_logprobs`` with gradients, the reference with the adapter disabled under ``no_grad``,
  ``sigmoid_dpo_loss``, backward, AdamW step (the calls of ``recipes/dpo.py``);
- SFT: ``--sft-steps`` (10) steps of the same 4 rows, ``masked_nll_loss`` (token mean);
- GRPO: ``--grpo-steps`` (3) steps: HF ``generate`` of 2 prompts x 8 samples (256 prompt + 256 new tokens,
  sampling), random rewards -> ``group_advantages``, old log-probs under ``no_grad``, then
  ``clipped_policy_loss`` with gradients and an AdamW step.

Printed per phase: mean step time over the steps after the first (warm-up), tokens/s (rows x row
length / step time), peak ``torch.cuda.max_memory_allocated``, and MFU = model FLOPs / step time /
the GPU's dense bf16 peak (``--peak-tflops``, else looked up by device name: H100/H200 989, A100 312).
Model FLOPs (stated, as in the output): N = weights of every ``nn.Linear`` of the base model incl.
the LM head (the input embedding is a lookup and not counted; LoRA factors are not counted). Per
token: forward 2N; backward 2N (activation gradients only, the base is frozen); per row and layer,
causal attention forward 2 T^2 d_attn (QK^T and AV over the lower triangle), backward twice that.
DPO = policy forward + backward + reference forward; SFT = forward + backward; GRPO = old-log-prob
forward + forward + backward (generation time and tokens/s are printed separately, not in MFU).
Re-computation inside the chunked path is not counted (MFU counts model FLOPs). The last printed
line is a JSON list of all rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0}


def model_configs(smoke: bool) -> dict:
    """The published configs of Qwen3-4B and Llama-3.2-3B (``--smoke``: the same vocabularies, tiny blocks)."""
    from transformers import LlamaConfig, Qwen3Config

    qwen = dict(vocab_size=151_936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960,
                rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
    llama = dict(vocab_size=128_256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                 num_attention_heads=24, num_key_value_heads=8, head_dim=128, max_position_embeddings=131_072,
                 rope_theta=500_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                 rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    if smoke:
        small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16)
        qwen, llama = {**qwen, **small}, {**llama, **small}
    return {"qwen3_4b": Qwen3Config(**qwen), "llama32_3b": LlamaConfig(**llama)}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3_4b,llama32_3b")
    ap.add_argument("--chunk", type=int, default=2048, help="model.logprob_chunk of the chunked path")
    ap.add_argument("--dpo-steps", type=int, default=10)
    ap.add_argument("--sft-steps", type=int, default=10)
    ap.add_argument("--grpo-steps", type=int, default=3)
    ap.add_argument("--row-len", type=int, default=2048, help="tokens per DPO/SFT row")
    ap.add_argument("--prompt-len", type=int, default=512, help="prompt tokens of a DPO/SFT row")
    ap.add_argument("--grpo-prompt-len", type=int, default=256)
    ap.add_argument("--grpo-new-tokens", type=int, default=256)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak of the GPU (default: by name)")
    ap.add_argument("--smoke", action="store_true", help="CPU, fp32, tiny blocks, short rows, 2 steps per phase")
    args = ap.parse_args(argv)
    if args.smoke:
        args.dpo_steps = args.sft_steps = args.grpo_steps = 2
        args.row_len, args.prompt_len, args.grpo_prompt_len, args.grpo_new_tokens, args.chunk = 64, 16, 8, 8, 32
    return args


def build(cfg, device, dtype, args):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        base = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    n_linear = sum(m.weight.numel() for m in base.modules() if isinstance(m, torch.nn.Linear))
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                            task_type="CAUSAL_LM"))
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    return model, opt, n_linear


def attn_flops(cfg, rows: int, length: int) -> float:
    """Causal attention forward FLOPs of ``rows`` rows of ``length`` tokens: 2 T^2 d_attn per row and layer."""
    d_attn = cfg.num_attention_heads * cfg.head_dim
    return 2.0 * rows * length ** 2 * d_attn * cfg.num_hidden_layers


def phase(name, step, steps, *, tokens, flops, peak, device):
    import torch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, extra = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        info = step() or {}
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        extra.append(info)
    timed = times[1:] or times
    t = statistics.mean(timed)
    row = {"phase": name, "step_s": round(t, 4), "tokens_per_s": round(tokens / t, 1),
           "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
           "model_tflops_per_step": round(flops / 1e12, 3), "mfu": round(flops / t / peak, 4) if peak else None,
           "steps": steps}
    gen = [e["generate_s"] for e in extra[1:] or extra if "generate_s" in e]
    if gen:
        row["generate_s"] = round(statistics.mean(gen), 3)
        row["train_s"] = round(t - row["generate_s"], 3)
        row["mfu"] = round(flops / row["train_s"] / peak, 4) if peak else None
        row["generate_tokens_per_s"] = round(extra[-1]["generated"] / row["generate_s"], 1)
    return row


def run_model(name, cfg, args, device, dtype, peak) -> list[dict]:
    import torch

    from trainer.algos.dpo import sigmoid_dpo_loss
    from trainer.algos.grpo import clipped_policy_loss, group_advantages
    from trainer.algos.sft import masked_nll_loss
    from trainer.logprobs.logprobs import sequence_logprobs

    model, opt, n = build(cfg, device, dtype, args)
    rows, T = 4, args.row_len
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, cfg.vocab_size, (rows, T), generator=g).to(device)
    att = torch.ones_like(ids)
    comp = torch.zeros_like(ids)
    comp[:, args.prompt_len:] = 1
    comp_t = comp.to(device)
    out = []
    print(f"== {name}: {n / 1e9:.3f}B linear weights (N), vocab {cfg.vocab_size}, {device} {dtype}", flush=True)
    for chunk in (0, args.chunk):
        lp = lambda *a, **k: sequence_logprobs(*a, logprob_chunk=chunk, **k)  # noqa: E731

        def dpo_step():
            seq, _, _ = lp(model, ids, att, comp_t)
            with torch.no_grad(), model.disable_adapter():
                ref, _, _ = lp(model, ids, att, comp_t)
            (pc, pr), (rc, rr) = seq.chunk(2), ref.chunk(2)
            loss, _ = sigmoid_dpo_loss(pc, pr, rc, rr, beta=0.1)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        def sft_step():
            _, tok, _ = lp(model, ids, att, comp_t)
            loss, _ = masked_nll_loss(tok, None, comp_t, aggregation="token_mean")
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        group, prompts = 8, 2
        p_ids = torch.randint(10, cfg.vocab_size, (prompts, args.grpo_prompt_len), generator=g).to(device)

        def grpo_step():
            t0 = time.perf_counter()
            with torch.no_grad():
                seqs = model.generate(input_ids=p_ids, attention_mask=torch.ones_like(p_ids), do_sample=True,
                                      num_return_sequences=group, max_new_tokens=args.grpo_new_tokens,
                                      min_new_tokens=args.grpo_new_tokens, pad_token_id=0)
            if device == "cuda":
                torch.cuda.synchronize()
            gen_s = time.perf_counter() - t0
            g_att = torch.ones_like(seqs)
            g_comp = torch.zeros_like(seqs)
            g_comp[:, p_ids.shape[1]:] = 1
            adv, _ = group_advantages(torch.rand(seqs.shape[0], device=device), group)
            with torch.no_grad():
                old = lp(model, seqs, g_att, g_comp)[1]
            _, logps, _ = lp(model, seqs, g_att, g_comp, return_entropy=True)
            loss, _ = clipped_policy_loss(logps, old, adv, g_comp, eps_low=0.2, eps_high=0.28)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return {"generate_s": gen_s, "generated": int(g_comp.sum())}

        lin, tag = 2.0 * n * rows * T, f"logprob_chunk={chunk}"
        a = attn_flops(cfg, rows, T)
        out.append({"model": name, "path": tag, **phase("dpo", dpo_step, args.dpo_steps, tokens=rows * T,
                                                       flops=3 * lin + 4 * a, peak=peak, device=device)})
        out.append({"model": name, "path": tag, **phase("sft", sft_step, args.sft_steps, tokens=rows * T,
                                                       flops=2 * lin + 3 * a, peak=peak, device=device)})
        g_rows, g_len = prompts * group, args.grpo_prompt_len + args.grpo_new_tokens
        g_lin, g_a = 2.0 * n * g_rows * g_len, attn_flops(cfg, g_rows, g_len)
        out.append({"model": name, "path": tag, **phase("grpo", grpo_step, args.grpo_steps, tokens=g_rows * g_len,
                                                       flops=3 * g_lin + 4 * g_a, peak=peak, device=device)})
        for r in out[-3:]:
            print(json.dumps(r), flush=True)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv=None) -> list[dict]:
    import torch

    args = parse_args(argv)
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible; use --smoke for the CPU code-path check")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    peak = None
    if device == "cuda":
        name = torch.cuda.get_device_name()
        tflops = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
        print(f"GPU {name}; bf16 dense peak {tflops} TFLOP/s" + ("" if tflops else " (unknown: pass --peak-tflops)"))
        peak = tflops * 1e12 if tflops else None
    print("FLOPs: N = base nn.Linear weights incl. LM head; per token fwd 2N, bwd 2N (activation grads only); "
          "attention fwd 2*T^2*d_attn per row and layer, bwd 2x; DPO = fwd+bwd+ref fwd, SFT = fwd+bwd, "
          "GRPO = old fwd + fwd + bwd (generation excluded)", flush=True)
    t0 = time.perf_counter()
    cfgs = model_configs(args.smoke)
    rows = []
    for name in args.models.split(","):
        rows += run_model(name, cfgs[name], args, device, dtype, peak)
    print(f"total {time.perf_counter() - t0:.1f} s", flush=True)
    print(json.dumps(rows), flush=True)
    return rows


if __name__ == "__main__":
    main()
