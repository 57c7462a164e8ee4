"""One GRPO optimizer step on the tiny model: selectrust's rollout source + loss vs TRL GRPOTrainer.

    python bench/bench_grpo_step.py [--groups 4] [--group-size 4] [--max-new-tokens 16] [--steps 3] [--shared both]

Same settings on both sides: CPU, fp32, LoRA r=8/alpha=16 (``--lora-r``) on the same modules, G samples for
P prompts per step (one rollout batch per step, no gradient accumulation), temperature 1 (ours: ``HFBackend``'s
decoding loop; TRL: HF ``generate``), the same outcome reward, beta=0 (no reference forward), no gradient
checkpointing, a local tiny model directory and a tiny in-memory dataset. Each side runs ``--steps`` steps; the first is warm-up
and the median of the rest is reported. Prints the ratio ours/TRL (target <= 1.1) and the fraction
of our step spent generating. CPU timings on a shared machine are noisy: run it on an idle one.

``--shared on|off|both`` (default both): our step with ``algo.shared_prompt`` (each group's prompt run once in
the loss's forward, trainer/logprobs/group_packing.py), without it, or both side by side. The last line is one JSON
object: ``grpo_time_ratio`` (ours with the prompts shared, else unshared, over TRL), ``grpo_time_ratio_unshared``
(with ``both``), ``grpo_prompt_token_fraction_saved`` (1 - packed tokens / unshared tokens of the forward),
``tokens_per_step`` and ``tokens_per_step_shared`` (means over the steps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


def reward_fn(completion: str, row: dict) -> float:
    return float(len(set(completion)) % 2)


def prompts(n: int, rows: list[dict] | None = None) -> list[dict]:
    """The first ``n`` prompt rows (``prompt``, ``gold``): ``rows`` when given (e.g. a real-model demo's training
    prompts, bench_real_model.py), else the toy GRPO prompts."""
    if rows is not None:
        return rows[:n]
    from trainer.rl.rollout import load_rl_prompts

    return load_rl_prompts("toy:0/grpo_prompts.jsonl")[:n]


def ours(args, model_dir: str, *, shared_prompt: bool = True) -> tuple[list[float], list[float], dict]:
    """Our steps: their times (s), the fraction of each spent generating, and the mean token counts of the
    loss's forward (``tokens_per_step``, ``tokens_per_step_shared``, ``prompt_token_fraction_saved``)."""
    import torch

    from selectrust.generation.backends.hf import HFBackend
    from selectrust.generation.prompts import PromptSettings
    from trainer.algos.grpo import clipped_policy_loss
    from trainer.config import GRPOAlgoConfig, ModelConfig, OptimConfig
    from trainer.data.train_data import ShuffleSampler
    from trainer.logprobs.group_packing import group_sequence_logprobs
    from trainer.logprobs.logprobs import sequence_logprobs
    from selectrust.model import load_policy
    from trainer.runtime.optim import build_optimizer
    from trainer.rl.rewards import GuardedReward
    from trainer.rl.rollout import RolloutSettings, RolloutSource
    from trainer.rl.rollout_modes import SingleTurnMode

    torch.manual_seed(0)
    mcfg = ModelConfig(path=model_dir)
    mcfg.lora.r, mcfg.lora.alpha = args.lora_r, 2 * args.lora_r
    mcfg.lora.target_modules = list(lora_modules(args))
    model, tok = load_policy(mcfg, seed=0)
    opt = build_optimizer(model, OptimConfig(lr=1e-3))
    rows = prompts(args.groups * args.steps, getattr(args, "rows", None))
    algo = GRPOAlgoConfig(group_size=args.group_size, max_new_tokens=args.max_new_tokens, temperature=1.0,
                          drop_zero_variance=False, shared_prompt=True)  # True: the source counts packed tokens
    logprobs = group_sequence_logprobs if shared_prompt else sequence_logprobs
    s = RolloutSettings.from_config(algo, num_groups=args.groups, grad_accum=1, prompt_settings=PromptSettings(), seed=0)
    src = RolloutSource(rows, ShuffleSampler(len(rows), seed=0), SingleTurnMode(s, tok, GuardedReward(reward_fn)),
                        settings=s,
                        backend_factory=lambda: HFBackend(model, tok, batch_size=args.groups * args.group_size))
    times, gen_fracs, tokens = [], [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        model.train()
        mb = src.next_microbatch()
        _, logps, _ = logprobs(model, mb["input_ids"], mb["attention_mask"], mb["completion_mask"])
        loss, _ = clipped_policy_loss(logps, logps.detach(), mb["advantages"], mb["completion_mask"], eps_low=0.2,
                                      eps_high=0.2, aggregation="token_mean", num_tokens=mb["num_tokens"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        times.append(dt)
        gen_fracs.append(src._gen_time / dt)
        m = src.pop_metrics()
        tokens.append((m["tokens_per_step"], m["tokens_per_step_shared"]))
    whole, packed = (statistics.mean(x) for x in zip(*tokens))
    return times, gen_fracs, {"tokens_per_step": whole, "tokens_per_step_shared": packed,
                              "prompt_token_fraction_saved": 1.0 - packed / whole}


ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_modules(args) -> tuple[str, ...]:
    """The LoRA target modules of both sides: ``args.lora_modules`` (comma-separated), every linear layer when
    unset."""
    names = getattr(args, "lora_modules", None)
    return tuple(n.strip() for n in names.split(",") if n.strip()) if names else ALL_LINEAR


def step_median(times: list[float]) -> float:
    """Median step time after the first (warm-up) step."""
    return statistics.median(times[1:] or times)


def trl(args, model_dir: str, out_dir: str) -> list[float]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from selectrust.model import load_tokenizer

    rows = prompts(args.groups * args.steps, getattr(args, "rows", None))
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "gold": r["gold"]} for r in rows])

    def trl_reward(completions, **kw):
        return [reward_fn(c[0]["content"] if isinstance(c, list) else c, {}) for c in completions]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    n = args.groups * args.group_size
    cfg = GRPOConfig(output_dir=out_dir, per_device_train_batch_size=n, gradient_accumulation_steps=1,
                     num_generations=args.group_size, max_completion_length=args.max_new_tokens, temperature=1.0,
                     learning_rate=1e-3, max_steps=args.steps, use_cpu=True, bf16=False, report_to=[],
                     gradient_checkpointing=False, logging_steps=1, save_strategy="no", beta=0.0,
                     shuffle_dataset=False, seed=0, loss_type="dapo", disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    lora = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=list(lora_modules(args)))
    trainer = GRPOTrainer(model=model, reward_funcs=trl_reward, args=cfg, train_dataset=ds,
                          processing_class=load_tokenizer(model_dir), peft_config=lora, callbacks=[Timer()])
    trainer.train()
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=4, help="prompts per step (P)")
    ap.add_argument("--group-size", type=int, default=4, help="samples per prompt (G)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--lora-r", type=int, default=8, help="LoRA rank on both sides (alpha = 2r)")
    ap.add_argument("--lora-modules", default=",".join(ALL_LINEAR),
                    help="LoRA target modules on both sides, comma-separated (default: every linear layer)")
    ap.add_argument("--steps", type=int, default=3, help="steps per side (the first is warm-up)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--shared", choices=("on", "off", "both"), default="both",
                    help="our step with algo.shared_prompt on, off, or both side by side")
    ap.add_argument("--smoke", action="store_true", help="seconds: 1 prompt x 2 samples, 4 new tokens, 2 steps")
    args = ap.parse_args(argv)
    if args.smoke:
        args.groups, args.group_size, args.max_new_tokens, args.steps = 1, 2, 4, 2
    import tempfile

    import torch

    from selectrust.model import ensure_tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = str(ensure_tiny_model("tiny"))
    runs = {flag: ours(args, model_dir, shared_prompt=flag) for flag in {"on": [True], "off": [False],
                                                                         "both": [False, True]}[args.shared]}
    with tempfile.TemporaryDirectory() as d:
        trl_t = trl(args, model_dir, d)
    t = step_median(trl_t)
    print(f"P={args.groups} G={args.group_size} max_new_tokens={args.max_new_tokens} threads={torch.get_num_threads()}")
    print(f"TRL  step  s: {[round(x, 3) for x in trl_t]}  median(after warm-up) {t:.3f}")
    for flag, (ours_t, fracs, _) in runs.items():
        o = step_median(ours_t)
        print(f"ours step  s (shared_prompt={flag}): {[round(x, 3) for x in ours_t]}  median(after warm-up) {o:.3f}"
              f"  ratio ours/TRL {o / t:.3f} (medians), {min(ours_t[1:] or ours_t) / min(trl_t[1:] or trl_t):.3f} "
              f"(fastest steps)  generation fraction {statistics.median(fracs[1:] or fracs):.3f}")
    main_run = runs.get(True, runs.get(False))
    out = {"grpo_time_ratio": step_median(main_run[0]) / t, "grpo_shared_prompt": True in runs,
           "grpo_prompt_token_fraction_saved": main_run[2]["prompt_token_fraction_saved"],
           "tokens_per_step": main_run[2]["tokens_per_step"],
           "tokens_per_step_shared": main_run[2]["tokens_per_step_shared"]}
    if len(runs) == 2:
        out["grpo_time_ratio_unshared"] = step_median(runs[False][0]) / t
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
