"""DPO optimizer-step benchmark (issue 3): our SCOPE DPO step vs TRL 1.16 ``DPOTrainer``, FLOP/s, reference memory.

Setup (both sides identical): the ~25M-parameter tiny Llama (``tiny-25m``: hidden 512, 8 layers,
intermediate 1376, 8 heads, byte tokenizer, random init, built locally), LoRA r16 / alpha 32 on all
linear layers of the blocks (q, k, v, o, gate, up, down), fp32, CPU, no gradient checkpointing, one
batch of ``--pairs`` (4) synthetic preference pairs whose rows are exactly ``--seq-len`` (256) tokens:
a chat-rendered prompt of ``seq_len/2`` tokens + a completion of ``seq_len/2`` tokens (EOS included).

    python bench/bench_dpo_step.py                      # full run: timing + FLOP/s + RSS (several minutes)
    python bench/bench_dpo_step.py --quick              # smoke run: fewer steps
    python bench/bench_dpo_step.py --threads 1          # on a shared/loaded 2-core box this can be much faster
    python bench/bench_dpo_step.py --quick --tiny       # seconds: tiny preset, short rows (what the smoke test runs)
    python bench/bench_dpo_step.py --mode rss-copy      # one RSS measurement (what the main run spawns twice)

Measured figures (printed side by side, in one run):

1. **Step time, ours / TRL.** *Ours* is exactly what ``recipes/dpo.py`` does per optimizer step
   (``trainer.runtime.loop.train_loop`` + the recipe's ``step_fn``, grad_accum 1): ``build_preference_batch``
   -> ``sequence_logprobs`` on the policy -> the same under ``torch.no_grad()`` with the LoRA adapter
   disabled (``selectrust.model.Reference``) -> ``sigmoid_dpo_loss`` + per-condition metrics -> backward ->
   grad-norm clip (1.0) -> ``build_optimizer``'s AdamW step -> scheduler step -> ``zero_grad``.
   *TRL* is what ``Trainer._inner_training_loop`` does per step: its ``data_collator`` on the
   pre-tokenised rows -> ``DPOTrainer.training_step`` (fused LM head, reference = adapter disabled, since
   TRL wraps the base model with the ``peft_config`` itself) -> ``_clip_grad_norm`` -> its default
   optimizer (``adamw_torch_fused``) -> scheduler -> ``zero_grad``. Both start from the same adapter
   weights, see the same token ids (asserted) and use the same AdamW hyperparameters, so their losses
   must agree step by step (printed as a check that both do the same work). After warm-up, steps are
   timed alternately (ours, TRL, then TRL, ours, ...) and each pair gives a ratio; the median is the
   headline (target <= 0.9).
2. **FLOP/s as a fraction of the fp32 matmul peak.** FLOPs per step = 6 * N * T: policy forward 2NT,
   backward 2NT (activation gradients only: the base weights are frozen), reference forward 2NT.
   N = the weights of every ``nn.Linear`` of the *base* model, i.e. the 7 projections of the 8 blocks
   plus the LM head (the input embedding is a lookup, not a matmul, and is excluded; RMSNorm weights,
   the LoRA factors and the attention-score matmuls are real work that is *not* counted, so the figure
   is conservative). T = 2 * pairs * seq_len tokens. The peak is a GEMM microbenchmark
   (``--gemm-size`` square fp32 ``torch.mm``, best of 3) run in the same process and thread setting,
   once per timed pair, because the machine's matmul rate drifts; the fraction is reported per pair
   against that pair's GEMM and the median is the headline (target >= 0.6).
3. **Memory the adapter-disabled reference saves.** Two fresh subprocesses (``--mode rss-copy`` /
   ``--mode rss-disabled``) each build the LoRA policy and run ``--rss-steps`` of our step, one with a
   separate frozen ``deepcopy`` of the base model as the reference, one with the adapter disabled; each
   prints its peak RSS: ``VmHWM`` from ``/proc/self/status`` (``getrusage(RUSAGE_SELF).ru_maxrss`` is printed
   too, but Linux carries the *parent's* high-water mark into it across fork + exec, so the main run spawns
   both children first, while it is small). The difference divided by the model's weight bytes should be
   >= 0.9. The children run with ``MALLOC_MMAP_THRESHOLD_=65536`` (see ``rss_subprocess``).

Threads: ``--threads`` defaults to torch's default (one per core). On a shared, loaded 2-core machine
two OpenMP threads can spend their time waiting for each other; ``--threads 1`` can then be much
faster. Whichever is set applies to both sides and to the GEMM. Not a unit test (timings are noisy).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BETA = 0.1
LR = 5e-6
CONDITIONS = [MISLEADING, CLEAN, CORRECT, IRRELEVANT]


# ---------------------------------------------------------------------------------------------------------------------
# Shared setup
# ---------------------------------------------------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["all", "time", "rss-copy", "rss-disabled"], default="all",
                    help="all: timing + FLOP/s + both RSS subprocesses; time: no RSS; rss-*: one RSS measurement")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per side (default 8; --quick 2)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps per side first (default 2; --quick 1)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch intra-op threads (0 = torch's default, one per core). On a shared or loaded "
                         "2-core machine --threads 1 can be much faster")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 warm-up + 2 timed steps per side, 1 RSS step")
    ap.add_argument("--tiny", action="store_true",
                    help="use the ~0.1M 'tiny' preset, 64-token rows and a 256 GEMM (seconds; for the smoke test)")
    ap.add_argument("--preset", default=None, help="tiny model preset (default tiny-25m; 'tiny' with --tiny)")
    ap.add_argument("--pairs", type=int, default=4, help="preference pairs per step")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per row, prompt + completion (default 256)")
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank (alpha = 2 * rank)")
    ap.add_argument("--gemm-size", type=int, default=None, help="square fp32 GEMM size for the peak (default 2048)")
    ap.add_argument("--rss-steps", type=int, default=None, help="steps each RSS subprocess runs (default 2)")
    ap.add_argument("--trl-gradient-checkpointing", action="store_true",
                    help="run TRL with gradient checkpointing, its DPOConfig default (off by default: the issue asks "
                         "for no gradient checkpointing on either side)")
    ap.add_argument("--json", default=None, help="also write the summary as JSON to this path")
    args = ap.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (2 if args.quick else 8)
    args.warmup = args.warmup if args.warmup is not None else 1 if args.quick else 2
    args.preset = args.preset or ("tiny" if args.tiny else "tiny-25m")
    args.seq_len = args.seq_len or (64 if args.tiny else 256)
    args.gemm_size = args.gemm_size or (256 if args.tiny else 2048)
    args.rss_steps = args.rss_steps or (1 if args.quick else 2)
    if args.steps < 1 or args.warmup < 0 or args.pairs < 1 or args.seq_len < 8 or args.seq_len % 2:
        ap.error("--steps >= 1, --warmup >= 0, --pairs >= 1 and an even --seq-len >= 8 are required")
    return args


def quiet() -> None:
    """Silence progress bars and info logs of transformers / datasets so the figures stay readable."""
    import warnings

    warnings.filterwarnings("ignore")
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def set_threads(n: int) -> int:
    import torch

    if n > 0:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def _random_text(rng: random.Random, n: int) -> str:
    words = []
    while sum(len(w) + 1 for w in words) < n + 8:
        words.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))))
    return " ".join(words)[:n]


def synthetic_pairs(tokenizer, *, pairs: int, seq_len: int, seed: int = 0):
    """``pairs`` (prompt, chosen, rejected) strings: the chat-rendered prompt is ``seq_len/2`` tokens and each
    completion ``seq_len/2`` tokens including the EOS the batch builder appends. Checked by tokenising."""
    from trainer.logprobs.logprobs import build_preference_batch

    half = seq_len // 2
    rng = random.Random(seed)
    overhead = len(tokenizer.apply_chat_template([{"role": "user", "content": ""}], add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)["input_ids"])
    prompts = [_random_text(rng, half - overhead) for _ in range(pairs)]
    chosen = [_random_text(rng, half - 1) for _ in range(pairs)]
    rejected = [_random_text(rng, half - 1) for _ in range(pairs)]
    batch = build_preference_batch(tokenizer, prompts, chosen, rejected, max_prompt_len=half,
                                   max_completion_len=half, truncation="error")
    if tuple(batch.input_ids.shape) != (2 * pairs, seq_len) or not bool(batch.attention_mask.all()) \
            or batch.prompt_lengths != [half] * (2 * pairs):
        raise RuntimeError(f"synthetic rows are not {seq_len} tokens ({half} prompt + {half} completion): got "
                           f"shape {tuple(batch.input_ids.shape)}, prompt lengths {batch.prompt_lengths}; this "
                           "script assumes a tokenizer with one token per ASCII character (the tiny byte tokenizer)")
    return prompts, chosen, rejected


def lora_config(rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(LORA_TARGETS),
                      task_type="CAUSAL_LM")


def linear_weight_count(base_model) -> int:
    """N for 6NT: weights of every nn.Linear of the base model (block projections + LM head); LoRA factors, if the
    model is already wrapped, are not counted."""
    import torch

    return sum(m.weight.numel() for name, m in base_model.named_modules()
               if isinstance(m, torch.nn.Linear) and "lora_" not in name)


def weight_bytes(base_model) -> int:
    return sum(p.numel() * p.element_size() for p in base_model.parameters())


class OurStep:
    """One optimizer step of ``recipes/dpo.py`` (train_loop + step_fn, grad_accum 1, fp32, no accelerate wrapping
    needed on one CPU process: ``acc.backward`` is ``loss.backward`` and ``acc.clip_grad_norm_`` is torch's)."""

    def __init__(self, model, tokenizer, prompts, chosen, rejected, *, reference, seq_len: int, ref_model=None):
        from trainer.config import OptimConfig
        from trainer.runtime.optim import build_optimizer, build_scheduler

        self.model, self.tok = model, tokenizer
        self.prompts, self.chosen, self.rejected = prompts, chosen, rejected
        self.conditions = [CONDITIONS[i % len(CONDITIONS)] for i in range(len(prompts))]
        self.reference = reference  # selectrust.model.Reference (adapter disabled) or None with ref_model
        self.ref_model = ref_model  # a separate frozen copy (RSS comparison only)
        self.half = seq_len // 2
        optim_cfg = OptimConfig(lr=LR, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0, scheduler="cosine",
                                warmup_ratio=0.0)
        self.optimizer = build_optimizer(model, optim_cfg)
        self.scheduler = build_scheduler(self.optimizer, optim_cfg, max_steps=1000)

    def _ref_context(self):
        import contextlib

        if self.ref_model is not None:
            return contextlib.nullcontext(self.ref_model)
        return self.reference.context(self.model)

    def __call__(self, rows: tuple[list, list, list, list] | None = None) -> float:
        """One step on the fixed rows, or on ``rows = (prompts, chosen, rejected, conditions)``."""
        import math

        import torch

        from trainer.algos.dpo import dpo_row_metrics, per_group_metrics, sigmoid_dpo_loss
        from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs

        prompts, chosen, rejected, conditions = rows or (self.prompts, self.chosen, self.rejected, self.conditions)
        model = self.model
        model.train()
        batch = build_preference_batch(self.tok, prompts, chosen, rejected, max_prompt_len=self.half,
                                       max_completion_len=self.half, truncation="keep_end")
        self.last_batch = batch
        inputs = (batch.input_ids, batch.attention_mask, batch.completion_mask)
        seq_logps, _, _ = sequence_logprobs(model, *inputs)
        with torch.no_grad(), self._ref_context() as ref_model:
            ref_logps, _, _ = sequence_logprobs(ref_model, *inputs)
        pc, pr = seq_logps.chunk(2)
        rc, rr = ref_logps.chunk(2)
        loss, metrics = sigmoid_dpo_loss(pc, pr, rc, rr, beta=BETA)
        metrics.update(per_group_metrics(dpo_row_metrics(pc, pr, rc, rr, beta=BETA), conditions))
        loss.backward()
        loss_value = float(loss.detach())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
            raise RuntimeError("non-finite loss or gradient in the benchmark step")
        _ = {k: float(v) for k, v in metrics.items()}  # the loop's per-step metric floats
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value


def build_our_policy(path: str, rank: int, seed: int = 0):
    """``(counts, peft_model)``: the base model's parameter counts and weight bytes, and the LoRA policy."""
    import torch
    from peft import get_peft_model

    from selectrust.model import load_model

    base = load_model(path, dtype="float32")
    # Counted before get_peft_model, which inserts the LoRA factors (themselves nn.Linear) into ``base`` in place.
    counts = {"params_total": sum(p.numel() for p in base.parameters()), "n_linear": linear_weight_count(base),
              "weight_bytes": weight_bytes(base), "layers": base.config.num_hidden_layers}
    torch.manual_seed(seed)
    return counts, get_peft_model(base, lora_config(rank))


# ---------------------------------------------------------------------------------------------------------------------
# RSS subprocess
# ---------------------------------------------------------------------------------------------------------------------


def run_rss(args) -> None:
    import resource

    threads = set_threads(args.threads)
    from selectrust.model import Reference, ensure_tiny_model, load_tokenizer

    path = str(ensure_tiny_model(args.preset))
    tok = load_tokenizer(path)
    prompts, chosen, rejected = synthetic_pairs(tok, pairs=args.pairs, seq_len=args.seq_len)
    from selectrust.model import load_model

    base = load_model(path, dtype="float32")
    wbytes = weight_bytes(base)
    frozen = None
    if args.mode == "rss-copy":  # what a non-LoRA reference costs: a second, frozen copy of the weights
        frozen = copy.deepcopy(base).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
    import torch
    from peft import get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(base, lora_config(args.rank))
    step = OurStep(model, tok, prompts, chosen, rejected, reference=Reference(model, lora=True),
                   seq_len=args.seq_len, ref_model=frozen)
    for _ in range(args.rss_steps):
        step()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports kilobytes
    hwm = _vm_hwm_bytes()
    print("RSS_RESULT " + json.dumps({"mode": args.mode, "peak_bytes": hwm if hwm is not None else maxrss,
                                      "vm_hwm_bytes": hwm, "ru_maxrss_bytes": maxrss, "weight_bytes": wbytes,
                                      "threads": threads}), flush=True)


def _vm_hwm_bytes() -> int | None:
    """Peak RSS of this process's own address space (``VmHWM``), or None without /proc.

    Preferred over ``ru_maxrss``: Linux carries the parent's RSS high-water mark into ``ru_maxrss`` across
    fork + exec, so a child spawned by a 2.4 GB parent reports at least 2.4 GB whatever it does itself."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_subprocess(args, mode: str) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--mode", mode, "--preset", args.preset, "--pairs",
           str(args.pairs), "--seq-len", str(args.seq_len), "--rank", str(args.rank), "--threads", str(args.threads),
           "--rss-steps", str(args.rss_steps)]
    # A fixed mmap threshold turns off glibc's dynamic one, under which freed activation buffers stay in the heap
    # and fragment it: peak RSS then grew by hundreds of MB from step to step and swamped the ~100 MB being
    # measured. With it, every large tensor is its own mapping, returned to the OS when freed, so the peak RSS
    # follows the live memory. Both modes run under the same setting.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RSS_RESULT "):
            return json.loads(line[len("RSS_RESULT "):])
    raise RuntimeError(f"{mode} subprocess failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


# ---------------------------------------------------------------------------------------------------------------------
# GEMM peak
# ---------------------------------------------------------------------------------------------------------------------


def gemm_flops(n: int, reps: int = 3) -> float:
    """Best-of-``reps`` fp32 FLOP/s of an ``n x n @ n x n`` ``torch.mm`` (2 n^3 FLOPs), after one warm-up."""
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


# ---------------------------------------------------------------------------------------------------------------------
# TRL side
# ---------------------------------------------------------------------------------------------------------------------


class TrlStep:
    """One optimizer step as ``transformers.Trainer._inner_training_loop`` runs it for ``DPOTrainer`` (grad_accum 1)."""

    def __init__(self, path, tokenizer, prompts, chosen, rejected, *, rank: int, seq_len: int, pairs: int,
                 our_model, workdir: str, gradient_checkpointing: bool = False, batch_size: int | None = None,
                 padding_free: bool = False):
        import warnings

        from datasets import Dataset
        from trl import DPOConfig, DPOTrainer

        from selectrust.model import load_model

        rendered = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                  tokenize=False) for p in prompts]
        ds = Dataset.from_dict({"prompt": rendered, "chosen": list(chosen), "rejected": list(rejected)})
        cfg = DPOConfig(output_dir=workdir, use_cpu=True, bf16=False, fp16=False, beta=BETA, loss_type=["sigmoid"],
                        per_device_train_batch_size=batch_size or pairs, gradient_accumulation_steps=1,
                        activation_checkpointing=gradient_checkpointing,
                        padding_free=padding_free,
                        precompute_ref_log_probs=False, max_length=seq_len, learning_rate=LR,
                        lr_scheduler_type="cosine", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                        report_to=[], logging_steps=10 ** 6, save_strategy="no", dataset_num_proc=None, seed=0,
                        disable_tqdm=True)
        base = load_model(path, dtype="float32")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.trainer = DPOTrainer(model=base, ref_model=None, args=cfg, train_dataset=ds,
                                      processing_class=tokenizer, peft_config=lora_config(rank))
        tr = self.trainer
        # Same adapter initialisation as ours (TRL wrapped the base model itself, so its reference is the base).
        ours = dict(our_model.named_parameters())
        copied = 0
        import torch

        with torch.no_grad():
            for name, p in tr.model.named_parameters():
                if "lora_" in name:
                    p.copy_(ours[name])
                    copied += 1
        if copied != sum("lora_" in n for n in ours):
            raise RuntimeError(f"copied {copied} LoRA tensors into TRL's model; ours has "
                               f"{sum('lora_' in n for n in ours)}")
        if gradient_checkpointing:  # Trainer switches it on inside train(), which a step-level benchmark never calls
            kwargs = dict(cfg.activation_checkpointing_kwargs or {})
            enable = getattr(tr.model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs=kwargs or None)
            else:
                tr.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs or None)
            if not tr.model.is_activation_checkpointing:
                raise RuntimeError("could not enable activation checkpointing on TRL's model")
        self.rows = [tr.train_dataset[i] for i in range(pairs)]
        tr.create_optimizer_and_scheduler(num_training_steps=1000)
        tr.current_gradient_accumulation_steps = 1
        self.optimizer_name = type(tr.optimizer).__name__ + (" (fused)" if tr.optimizer.defaults.get("fused") else "")

    def batch(self):
        return self.trainer.data_collator(self.rows)

    def __call__(self, batch=None) -> float:
        """One step on the fixed rows' collated batch, or on ``batch`` (e.g. from ``get_train_dataloader()``)."""
        tr = self.trainer
        model = tr.model
        loss = tr.training_step(model, self.batch() if batch is None else batch, None)
        tr._clip_grad_norm(model)
        tr.optimizer.step()
        tr.lr_scheduler.step()
        model.zero_grad()
        return float(loss.detach())


# ---------------------------------------------------------------------------------------------------------------------
# Main run
# ---------------------------------------------------------------------------------------------------------------------


def _fmt_gf(x: float) -> str:
    return f"{x / 1e9:8.2f} GFLOP/s"


def run_main(args) -> dict:
    import torch

    threads = set_threads(args.threads)
    from selectrust.model import Reference, ensure_tiny_model, load_tokenizer
    from trainer.logprobs.logprobs import build_preference_batch

    path = str(ensure_tiny_model(args.preset))
    tok = load_tokenizer(path)
    prompts, chosen, rejected = synthetic_pairs(tok, pairs=args.pairs, seq_len=args.seq_len)

    counts, model = build_our_policy(path, args.rank)
    n_linear, n_total, wbytes = counts["n_linear"], counts["params_total"], counts["weight_bytes"]
    n_lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tokens = 2 * args.pairs * args.seq_len
    flops_per_step = 6.0 * n_linear * tokens
    ours = OurStep(model, tok, prompts, chosen, rejected, reference=Reference(model, lora=True), seq_len=args.seq_len)

    with tempfile.TemporaryDirectory(prefix="bench_dpo_trl_") as workdir:
        trl_step = TrlStep(path, tok, prompts, chosen, rejected, rank=args.rank, seq_len=args.seq_len,
                           pairs=args.pairs, our_model=model, workdir=workdir,
                           gradient_checkpointing=args.trl_gradient_checkpointing)
        trl_batch = trl_step.batch()
        our_batch = build_preference_batch(tok, prompts, chosen, rejected, max_prompt_len=args.seq_len // 2,
                                           max_completion_len=args.seq_len // 2)
        for key in ("input_ids", "attention_mask", "completion_mask"):
            if not torch.equal(getattr(our_batch, key), trl_batch[key]):
                raise RuntimeError(f"our batch and TRL's differ in {key}: the comparison would not be like for like")

        print(f"[bench] model {args.preset}: {n_total / 1e6:.2f}M params, N (linear weights) = {n_linear / 1e6:.2f}M, "
              f"LoRA r{args.rank} trainable {n_lora / 1e6:.3f}M; batch {args.pairs} pairs x 2 x {args.seq_len} tokens "
              f"= T {tokens}; 6NT = {flops_per_step / 1e9:.1f} GFLOP/step; threads {threads}; "
              f"TRL optimizer {trl_step.optimizer_name}, TRL gradient checkpointing {args.trl_gradient_checkpointing}",
              flush=True)
        loss_diffs = []
        for i in range(args.warmup):
            lo, lt = ours(), trl_step()
            loss_diffs.append(abs(lo - lt))
            print(f"[bench] warm-up {i + 1}/{args.warmup}: loss ours {lo:.6f} TRL {lt:.6f}", flush=True)

        rows = []
        for i in range(args.steps):
            peak = gemm_flops(args.gemm_size)
            order = [("ours", ours), ("trl", trl_step)] if i % 2 == 0 else [("trl", trl_step), ("ours", ours)]
            times, losses = {}, {}
            for name, fn in order:
                t0 = time.perf_counter()
                losses[name] = fn()
                times[name] = time.perf_counter() - t0
            loss_diffs.append(abs(losses["ours"] - losses["trl"]))
            row = {"pair": i + 1, "first": order[0][0], "ours_s": times["ours"], "trl_s": times["trl"],
                   "ratio": times["ours"] / times["trl"], "gemm_peak": peak, "ours_loss": losses["ours"],
                   "trl_loss": losses["trl"],
                   "ours_frac": flops_per_step / times["ours"] / peak, "trl_frac": flops_per_step / times["trl"] / peak}
            rows.append(row)
            print(f"[bench] pair {i + 1}/{args.steps} ({order[0][0]} first): ours {row['ours_s']:.3f}s  "
                  f"TRL {row['trl_s']:.3f}s  ratio {row['ratio']:.3f}  | GEMM {_fmt_gf(peak)}  "
                  f"frac ours {row['ours_frac']:.3f} TRL {row['trl_frac']:.3f}  | loss ours {losses['ours']:.6f} "
                  f"TRL {losses['trl']:.6f}", flush=True)

    med = statistics.median
    best_peak = max(r["gemm_peak"] for r in rows)
    summary = {
        "preset": args.preset, "threads": threads, "pairs": args.pairs, "seq_len": args.seq_len,
        "tokens_per_step": tokens, "layers": counts["layers"], "params_total": n_total, "n_linear": n_linear, "lora_params": n_lora,
        "flops_per_step": flops_per_step, "steps": args.steps, "warmup": args.warmup,
        "ours_s_median": med([r["ours_s"] for r in rows]), "trl_s_median": med([r["trl_s"] for r in rows]),
        "ratio_median": med([r["ratio"] for r in rows]), "ratios": [r["ratio"] for r in rows],
        "gemm_peak_median": med([r["gemm_peak"] for r in rows]), "gemm_peak_best": best_peak,
        "ours_frac_median": med([r["ours_frac"] for r in rows]), "trl_frac_median": med([r["trl_frac"] for r in rows]),
        "ours_frac_vs_best_peak": flops_per_step / min(r["ours_s"] for r in rows) / best_peak,
        "trl_frac_vs_best_peak": flops_per_step / min(r["trl_s"] for r in rows) / best_peak,
        "max_loss_diff": max(loss_diffs) if loss_diffs else 0.0, "weight_bytes": wbytes,
        "trl_optimizer": trl_step.optimizer_name, "trl_gradient_checkpointing": args.trl_gradient_checkpointing,
        "rows": rows,
        "loadavg": _loadavg(),
    }
    return summary


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def print_summary(s: dict) -> None:
    print("\n=== DPO step benchmark summary ===")
    print(f"setup            : {s['preset']} ({s['params_total'] / 1e6:.2f}M params), LoRA r{s.get('rank', 16)} all "
          f"linear, fp32 CPU, {s['pairs']} pairs x {s['seq_len']} tokens, threads {s['threads']}, "
          f"loadavg {s['loadavg']}")
    print(f"pair ratios      : {' '.join(f'{r:.3f}' for r in s['ratios'])}")
    print(f"step_time_ours_s : {s['ours_s_median']:.3f} (median of {s['steps']})")
    print(f"step_time_trl_s  : {s['trl_s_median']:.3f} (median of {s['steps']}; optimizer {s['trl_optimizer']}; "
          f"gradient checkpointing {s['trl_gradient_checkpointing']})")
    print(f"ratio_ours_trl   : {s['ratio_median']:.3f} (median of per-pair ratios; target <= 0.9) "
          f"{'PASS' if s['ratio_median'] <= 0.9 else 'MISS'}")
    print(f"flops_per_step   : {s['flops_per_step'] / 1e9:.2f} GFLOP = 6 x N {s['n_linear'] / 1e6:.2f}M (all "
          f"nn.Linear weights of the base model: {s['layers']} blocks x 7 projections + LM head; embedding "
          f"excluded) x T "
          f"{s['tokens_per_step']}")
    print(f"gemm_peak        : {s['gemm_peak_median'] / 1e9:.2f} GFLOP/s median, {s['gemm_peak_best'] / 1e9:.2f} best")
    print(f"flop_frac_ours   : {s['ours_frac_median']:.3f} (median per pair; target >= 0.6) "
          f"{'PASS' if s['ours_frac_median'] >= 0.6 else 'MISS'}; vs best peak and fastest step "
          f"{s['ours_frac_vs_best_peak']:.3f}")
    print(f"flop_frac_trl    : {s['trl_frac_median']:.3f} (median per pair); vs best peak and fastest step "
          f"{s['trl_frac_vs_best_peak']:.3f}")
    print(f"loss_check       : max |loss ours - loss TRL| over all steps = {s['max_loss_diff']:.2e}")
    if "rss_copy_bytes" in s:
        print(f"rss_copy_mib     : {s['rss_copy_bytes'] / 2**20:.1f} (peak RSS, separate frozen reference copy)")
        print(f"rss_disabled_mib : {s['rss_disabled_bytes'] / 2**20:.1f} (peak RSS, adapter-disabled reference)")
        print(f"rss_saved_mib    : {s['rss_saved_bytes'] / 2**20:.1f}; weight bytes "
              f"{s['weight_bytes'] / 2**20:.1f} MiB ({s['weight_bytes'] / 1e6:.1f} MB)")
        print(f"rss_saved_ratio  : {s['rss_saved_ratio']:.3f} (saved / weight bytes; target >= 0.9) "
              f"{'PASS' if s['rss_saved_ratio'] >= 0.9 else 'MISS'}")
    print("=== end summary ===", flush=True)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    if args.mode in ("rss-copy", "rss-disabled"):
        run_rss(args)
        return None
    rss = {}
    if args.mode == "all":  # first, while this process is still small
        print("[bench] RSS: two fresh subprocesses ...", flush=True)
        copy_r = rss_subprocess(args, "rss-copy")
        dis_r = rss_subprocess(args, "rss-disabled")
        saved = copy_r["peak_bytes"] - dis_r["peak_bytes"]
        rss = {"rss_copy_bytes": copy_r["peak_bytes"], "rss_disabled_bytes": dis_r["peak_bytes"],
               "rss_copy_ru_maxrss_bytes": copy_r["ru_maxrss_bytes"],
               "rss_disabled_ru_maxrss_bytes": dis_r["ru_maxrss_bytes"],
               "rss_saved_bytes": saved, "rss_saved_ratio": saved / copy_r["weight_bytes"]}
        print(f"[bench] RSS peak (VmHWM): copy {copy_r['peak_bytes'] / 2**20:.1f} MiB, disabled "
              f"{dis_r['peak_bytes'] / 2**20:.1f} MiB; ru_maxrss: copy {copy_r['ru_maxrss_bytes'] / 2**20:.1f} MiB, "
              f"disabled {dis_r['ru_maxrss_bytes'] / 2**20:.1f} MiB", flush=True)
    summary = run_main(args)
    summary["rank"] = args.rank
    summary.update(rss)
    print_summary(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    quiet()
    main()
