"""Stage-1 distillation step time over an SFT step on the same tokens, and the step's peak memory (docs/taste.md#distillation-trainer).

    python bench/bench_distill_step.py [--preset tiny-3m] [--views 8] [--reasoning 128] [--steps 5] [--threads 1]
    python bench/bench_distill_step.py --memory [--vocab 32768] [--support teacher] [--threads 1]

Time (default): both sides train the same LoRA (r16) on the same student prompts and the same
teacher-written reasoning:

- *sft*: NLL of the reasoning + answer tokens after the student's prompt (``sequence_logprobs`` +
  ``masked_nll_loss``), forward + backward;
- *distill (cache)*: ``DistillSteps.kl_step`` with ``algo.topk_support=teacher`` and the teacher's top-K
  computed once before timing (``algo.teacher_cache=true``): the student's hidden states at the aligned
  positions projected ``model.logprob_chunk`` at a time onto the cached support, the top-K KL with its
  remainder bucket and the choice KL, backward;
- *distill (no cache)*: the same with the teacher's forward (adapter disabled) in every step.

Prints the median time of each and the ratios distill/sft (target with the cache: <= 1.2).

Memory (``--memory``): the preset with its vocabulary enlarged to ``--vocab`` (the LM head and embedding
resized; prompts and reasoning keep the byte tokenizer's ids), one stage-1 step (forward + backward, no
cache, ``--support``) in a fresh subprocess per path: *dense*, the step as it was before the gathered
helper (both models' ``(B, P, V)`` logits at the aligned positions, ``topk_forward_kl``, ``choice_kl``;
written out below as the comparison), and *gathered*, ``DistillSteps.kl_step``. Peak = ``VmHWM`` (reset
through ``/proc/self/clear_refs`` after setup) minus ``VmRSS`` before the step, glibc's mmap threshold at
64 KiB (as ``bench/bench_logprob_memory.py``). The last line is JSON with ``peak_ratio`` (gathered / dense).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def _cfg(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="distill", overrides=overrides)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-3m")
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--reasoning", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--topk", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--memory", action="store_true", help="peak memory of one step: dense vs gathered")
    ap.add_argument("--vocab", type=int, default=32768, help="--memory: the model's vocabulary size")
    ap.add_argument("--support", default="teacher", help="--memory: algo.topk_support")
    ap.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)  # set by --memory for its children
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # dense | gathered
    ap.add_argument("--smoke", action="store_true", help="seconds: the 'tiny' preset, 2 views, 8 reasoning tokens, "
                    "2 steps, top-K 4 (--memory: vocabulary 1024)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.preset, args.views, args.reasoning, args.steps, args.topk = "tiny", 2, 8, 2, 4
        args.vocab = min(args.vocab, 1024)
    return args


def setup(args, model_path, overrides=()):
    """Model (LoRA), tokenizer, views with stand-in teacher reasoning of exactly ``--reasoning`` tokens, steps."""
    import torch

    from eval_hooks.builders.taste_toy import make_taste_toy
    from selectrust.core.io import write_jsonl_atomic
    from selectrust.generation.prompts import PromptSettings
    from trainer.distill.views import choice_token_ids, load_fork_views
    from trainer.distill.steps import DistillSteps
    from selectrust.model import Reference, load_policy

    if args.threads:
        torch.set_num_threads(args.threads)
    path = Path(tempfile.mkdtemp()) / "items.jsonl"
    write_jsonl_atomic(path, make_taste_toy(0, n_tasks=max(1, args.views // 8) + 1).items)
    cfg = _cfg(["recipe=taste_tiny", f"model.path={model_path}", f"algo.topk={args.topk}", "algo.max_positions=0",
                *overrides])
    views = load_fork_views(path, style="compact", demonstration="")[:args.views]
    model, tok = load_policy(cfg.model, seed=0)
    g = torch.Generator().manual_seed(0)
    for v in views:
        v.reasoning = torch.randint(40, 120, (args.reasoning,), generator=g).tolist()
    answer_ids = list(tok(cfg.algo.answer_prefix, add_special_tokens=False)["input_ids"])
    steps = DistillSteps(cfg, model=model, tokenizer=tok, prompt=PromptSettings.from_config(cfg.prompt),
                         reference=Reference(model, lora=True), answer_ids=answer_ids,
                         choice_ids=choice_token_ids(tok, cfg.algo.choice_tokens), device="cpu")
    return model, tok, views, steps


def timing(args) -> dict:
    from selectrust.model import ensure_tiny_model
    from trainer.algos.sft import masked_nll_loss
    from trainer.distill.aligned import build_batch
    from trainer.logprobs.logprobs import sequence_logprobs

    model, tok, views, steps = setup(args, ensure_tiny_model(args.preset),
                                     ["algo.topk_support=teacher", "algo.teacher_cache=true"])
    mb = {"views": views, "epoch": 0}

    def sft_step():
        batch = build_batch([steps.prompt_ids(v, False) for v in views],
                            [v.reasoning + steps.answer_ids for v in views], tok.pad_token_id)
        cm = batch["attention_mask"].clone()
        cm[:, :batch["prompt_width"]] = 0
        _, tlp, _ = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], cm)
        return masked_nll_loss(tlp, None, cm, aggregation="token_mean")[0]

    def timed(fn) -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        fn().backward()
        return time.perf_counter() - t0

    kl = lambda: steps.kl_step(model, mb)[0]  # noqa: E731
    no_cache = [timed(kl) for _ in range(args.steps + 1)]
    steps.fill_teacher_cache(views)
    sft, cache = [], []
    for i in range(args.steps + 1):
        pair = [(sft, sft_step), (cache, kl)] if i % 2 else [(cache, kl), (sft, sft_step)]
        for store, fn in pair:
            store.append(timed(fn))
    med = {k: statistics.median(v[1:]) for k, v in (("sft", sft), ("distill_cache", cache), ("distill_no_cache", no_cache))}
    out = {**{f"{k}_s": round(v, 4) for k, v in med.items()},
           "ratio_cache": round(med["distill_cache"] / med["sft"], 3),
           "ratio_no_cache": round(med["distill_no_cache"] / med["sft"], 3)}
    print(f"preset={args.preset} views={args.views} reasoning={args.reasoning} topk={args.topk}: {out}", flush=True)
    return out


def dense_kl_step(steps, model, mb):
    """The stage-1 loss as computed before the gathered helper: both models' (B, P, V) logits (the comparison)."""
    import torch

    from trainer.algos.distill import choice_kl, topk_forward_kl
    from trainer.distill.aligned import aligned_logits

    a, views, pad = steps.a, mb["views"], steps.tokenizer.pad_token_id
    completions = [list(v.reasoning) + steps.answer_ids for v in views]
    positions = [list(range(len(v.reasoning))) + [len(c)] for v, c in zip(views, completions)]
    with steps.teacher_model() as m:
        teacher, _ = aligned_logits(m, [steps.prompt_ids(v, True) for v in views], completions, positions, pad, "cpu")
    student, mask = aligned_logits(model, [steps.prompt_ids(v, False) for v in views], completions, positions, pad,
                                   "cpu")
    rows, last = torch.arange(len(views)), torch.tensor([len(p) - 1 for p in positions])
    mask[rows, last] = 0.0
    tok_loss, _ = topk_forward_kl(teacher, student, mask, k=a.topk, support=a.topk_support,
                                  temperature=a.kl_temperature)
    ch_loss, _ = choice_kl(teacher[rows, last][:, steps.choice_ids], student[rows, last][:, steps.choice_ids],
                           temperature=a.kl_temperature)
    return a.token_kl_weight * tok_loss + a.choice_kl_weight * ch_loss


def memory_child(args) -> dict:
    from bench.bench_logprob_memory import _proc_kib

    model, _, views, steps = setup(args, args.model_dir, [f"algo.topk_support={args.support}"])
    mb = {"views": views, "epoch": 0}
    fn = (lambda: dense_kl_step(steps, model, mb)) if args.child == "dense" else (lambda: steps.kl_step(model, mb)[0])
    before = _proc_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    t0 = time.perf_counter()
    loss = fn()
    loss.backward()
    return {"path": args.child, "peak_bytes": _proc_kib("VmHWM") - before, "loss": float(loss),
            "step_s": time.perf_counter() - t0}


def memory(args) -> dict:
    """Both paths in fresh subprocesses on a copy of the preset with ``--vocab`` tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selectrust.model import ensure_tiny_model

    src = ensure_tiny_model(args.preset)
    model_dir = Path(tempfile.mkdtemp()) / f"{args.preset}-v{args.vocab}"
    model = AutoModelForCausalLM.from_pretrained(src)
    model.resize_token_embeddings(args.vocab)
    model.save_pretrained(model_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(model_dir)
    results = {}
    for path in ("dense", "gathered"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", path, "--model-dir", str(model_dir)]
        for k in ("preset", "views", "reasoning", "topk", "threads", "support"):
            if getattr(args, k) is not None:
                cmd += [f"--{k}", str(getattr(args, k))]
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "PYTHONPATH": str(ROOT)}
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), env=env)
        line = [x for x in out.stdout.splitlines() if x.startswith("CHILD_RESULT ")]
        if not line:
            raise RuntimeError(f"{path} subprocess failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
        results[path] = json.loads(line[-1][len("CHILD_RESULT "):])
        r = results[path]
        print(f"{path:9s} peak {r['peak_bytes'] / 2**20:9.1f} MiB   step {r['step_s']:6.3f} s   loss {r['loss']:.6f}",
              flush=True)
    summary = {"vocab": args.vocab, "support": args.support, "positions": args.views * (args.reasoning + 1),
               "peak_dense_mib": round(results["dense"]["peak_bytes"] / 2**20, 1),
               "peak_gathered_mib": round(results["gathered"]["peak_bytes"] / 2**20, 1),
               "peak_ratio": round(results["gathered"]["peak_bytes"] / results["dense"]["peak_bytes"], 3),
               "loss_dense": results["dense"]["loss"], "loss_gathered": results["gathered"]["loss"]}
    print(json.dumps(summary), flush=True)
    return summary


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    if args.child:
        print("CHILD_RESULT " + json.dumps(memory_child(args)), flush=True)
        return None
    return memory(args) if args.memory else timing(args)


if __name__ == "__main__":
    main()
