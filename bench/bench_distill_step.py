"""Stage-1 distillation step time over an SFT step on the same tokens (docs/taste.md#distillation-trainer).

    python bench/bench_distill_step.py [--preset tiny-3m] [--views 8] [--reasoning 128] [--steps 5] [--threads 1]

Both sides train the same LoRA (r16) on the same student prompts and the same teacher-written reasoning:

- *sft*: NLL of the reasoning + answer tokens after the student's prompt (``sequence_logprobs`` +
  ``masked_nll_loss``), forward + backward;
- *distill (cache)*: ``DistillSteps.kl_step`` with ``algo.topk_support=teacher`` and the teacher's top-K
  computed once before timing (``algo.teacher_cache=true``): the student's forward at the aligned
  positions, the top-K KL with its remainder bucket and the choice KL, backward;
- *distill (no cache)*: the same with the teacher's forward (adapter disabled) in every step.

Prints the median time of each and the ratios distill/sft (target with the cache: <= 1.2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cfg(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="distill", overrides=overrides)


def main(argv=None) -> dict:
    import torch

    from eval_hooks.builders.taste_toy import make_taste_toy
    from eval_hooks.io import write_jsonl_atomic
    from eval_hooks.models import ensure_tiny_model
    from eval_hooks.prompts import PromptSettings
    from trainer.algos.sft import masked_nll_loss
    from trainer.distill import choice_token_ids, load_fork_views
    from trainer.distill_steps import DistillSteps
    from trainer.logprobs import sequence_logprobs
    from trainer.model import Reference, build_policy

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny-3m")
    ap.add_argument("--views", type=int, default=8)
    ap.add_argument("--reasoning", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--topk", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    path = tmp / "items.jsonl"
    write_jsonl_atomic(path, make_taste_toy(0, n_tasks=max(1, args.views // 8) + 1).items)
    cfg = _cfg(["recipe=taste_tiny", f"model.path={ensure_tiny_model(args.preset)}", "algo.topk_support=teacher",
                f"algo.topk={args.topk}", "algo.teacher_cache=true", "algo.max_positions=0"])
    views = load_fork_views(path, style="compact", demonstration="")[:args.views]
    model, tok = build_policy(cfg.model, seed=0)
    g = torch.Generator().manual_seed(0)
    for v in views:  # stand-in teacher reasoning of exactly --reasoning tokens
        v.reasoning = torch.randint(40, 120, (args.reasoning,), generator=g).tolist()
    answer_ids = list(tok(cfg.algo.answer_prefix, add_special_tokens=False)["input_ids"])
    steps = DistillSteps(cfg, model=model, tokenizer=tok, prompt=PromptSettings.from_config(cfg.prompt),
                         reference=Reference(model, lora=True), answer_ids=answer_ids,
                         choice_ids=choice_token_ids(tok, cfg.algo.choice_tokens), device="cpu")
    mb = {"views": views, "epoch": 0}
    from trainer.distill import build_batch

    def sft_step():
        batch = build_batch([steps.prompt_ids(v, False) for v in views],
                            [v.reasoning + answer_ids for v in views], tok.pad_token_id)
        lp = batch["prompt_width"]
        cm = batch["attention_mask"].clone()
        cm[:, :lp] = 0
        _, tlp, _ = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], cm)
        loss, _ = masked_nll_loss(tlp, None, cm, aggregation="token_mean")
        return loss

    def timed(fn) -> float:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = fn()
        loss.backward()
        return time.perf_counter() - t0

    kl = lambda: steps.kl_step(model, mb)[0]  # noqa: E731
    no_cache = []
    for _ in range(args.steps + 1):
        no_cache.append(timed(kl))
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


if __name__ == "__main__":
    main()
