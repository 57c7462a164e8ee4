"""One DPO epoch on a realistic length mix: length-grouped windows (``data.group_by_length``) vs TRL's
``DPOTrainer`` with its default collator (and, where it runs, ``padding_free``).

Data: the prompts of the GSM8K quartet builder's output (all four conditions of each item, rendered with
the chat template), with chosen / rejected completions of random words drawn uniformly from 30-400
tokens (the byte tokenizer: one character is one token). ``--pairs`` (256) pairs = ``--pairs / 4``
whole quartets. Build the input once with

    python -m eval_hooks build-gsm8k --data <gsm8k_test.jsonl> --out mist_gsm8k.jsonl --seed 0
    python bench/bench_dpo_lengths.py --data mist_gsm8k.jsonl            # minutes on CPU
    python bench/bench_dpo_lengths.py --data mist_gsm8k.jsonl --smoke    # seconds

Both sides: the ``tiny-3m`` Llama (random init, fp32, CPU), LoRA r16 on all block projections from the
same initial adapter, 4 pairs per micro-batch, grad_accum 1, so the same number of optimizer steps
(``pairs / 4``). Ours is ``bench_dpo_step.OurStep`` (``trainer/dpo/step.py``'s ``dpo_step``) fed by the recipe's
``ConditionSampler`` in ``mode="loss"`` with equal mass per condition: one epoch is every pair exactly once,
as in TRL's epoch, so the per-condition mass is the same (asserted), and length-grouped windows of 16
micro-batches. TRL is ``bench_dpo_step.TrlStep`` over its own ``get_train_dataloader()`` (random sampler,
``DataCollatorForPreference``). Padded fraction = padding tokens / all tokens of the padded micro-batches.
The last printed line is JSON with ``time_ratio`` (ours / TRL epoch wall time; target <= 0.8),
``padded_fraction_ours``, ``padded_fraction_trl`` and, when TRL's ``padding_free`` ran, ``time_ratio_padding_free``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench.bench_dpo_step import CONDITIONS, OurStep, TrlStep, _random_text, build_our_policy, quiet, set_threads  # noqa: E501

BLOCKS_PER_WINDOW = 16


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="output of `python -m eval_hooks build-gsm8k` (MIST quartet rows)")
    ap.add_argument("--pairs", type=int, default=256, help="pairs in the epoch (a multiple of 4: whole quartets)")
    ap.add_argument("--batch", type=int, default=4, help="pairs per micro-batch (= per optimizer step)")
    ap.add_argument("--preset", default="tiny-3m", help="tiny model preset")
    ap.add_argument("--min-completion", type=int, default=30)
    ap.add_argument("--max-completion", type=int, default=400)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--no-padding-free", action="store_true", help="skip the TRL padding_free comparison")
    ap.add_argument("--smoke", action="store_true", help="seconds: tiny preset, 8 pairs (2 steps), "
                    "completions of 30-60 tokens, no padding_free run")
    args = ap.parse_args(argv)
    if args.data is None:
        ap.error("--data PATH is required: the GSM8K quartet builder's output; make it with\n"
                 "  python -m eval_hooks build-gsm8k --data <gsm8k_test.jsonl> --out mist_gsm8k.jsonl --seed 0")
    if not Path(args.data).exists():
        ap.error(f"--data {args.data}: no such file (build it with `python -m eval_hooks build-gsm8k`)")
    if args.smoke:
        args.preset, args.pairs, args.max_completion, args.no_padding_free = "tiny", 8, 60, True
    if args.pairs % 4 or args.pairs % args.batch:
        ap.error("--pairs must be a multiple of 4 (whole quartets) and of --batch")
    return args


def load_pairs(path: str, *, pairs: int, lo: int, hi: int, seed: int = 0) -> list[dict]:
    """``pairs / 4`` whole quartets of builder rows (first items in file order), each row given random
    chosen/rejected completions of ``lo``-``hi`` tokens."""
    from selectrust.core.io import DataError, read_records

    items: dict[str, dict[str, str]] = defaultdict(dict)
    for line, rec in read_records(path):
        if "prompt" not in rec or rec.get("condition") not in CONDITIONS or "item_id" not in rec:
            raise DataError("expected a GSM8K quartet builder row with item_id, condition and prompt", path=path,
                            line=line, field="prompt")
        items[rec["item_id"]][rec["condition"]] = rec["prompt"]
    quartets = [(item_id, q) for item_id, q in items.items() if len(q) == 4][:pairs // 4]
    if len(quartets) * 4 < pairs:
        raise DataError(f"only {len(quartets)} complete quartets for {pairs} pairs", path=path)
    rng = random.Random(seed)
    rows = []
    for item_id, q in quartets:
        for cond in CONDITIONS:
            chosen = _random_text(rng, rng.randint(lo, hi) - 1)  # the batch builder appends EOS
            rows.append({"pair_id": item_id, "item_id": item_id, "condition": cond, "prompt": q[cond], "chosen": chosen,
                         "rejected": _random_text(rng, rng.randint(lo, hi) - 1)})
    return rows


def padded_fraction(masks) -> float:
    real = sum(int(m.sum()) for m in masks)
    total = sum(m.numel() for m in masks)
    return 1.0 - real / total


def run_ours(rows, tokenizer, model, args) -> dict:
    from trainer.data.train_data import ConditionSampler, condition_mass
    from trainer.dpo.data import PairSet, apply_length_policy

    rows = apply_length_policy(PairSet(rows), tokenizer, max_prompt_len=1024, max_completion_len=1024,
                               truncation="error").rows  # as recipes/dpo.py (default prompt settings): num_tokens
    lengths = [r["num_tokens"] for r in rows]
    mass = condition_mass(lambda_m=0.25, lambda_c=0.25, lambda_p=0.5, rho=0.5)
    sampler = ConditionSampler([r["condition"] for r in rows], mass, seed=0, mode="loss", lengths=lengths,
                               block=args.batch, blocks_per_chunk=BLOCKS_PER_WINDOW)
    step = OurStep(model, tokenizer, [], [], [], reference=_reference(model), seq_len=2048)
    step(([r["prompt"] for r in rows[:args.batch]], [r["chosen"] for r in rows[:args.batch]],
          [r["rejected"] for r in rows[:args.batch]], [r["condition"] for r in rows[:args.batch]]))  # warm-up
    masks, seen, losses = [], Counter(), []
    t0 = time.perf_counter()
    for _ in range(len(rows) // args.batch):
        draws = sampler.draw(args.batch)
        picked = [rows[i] for i, _ in draws]
        seen.update(r["condition"] for r in picked)
        losses.append(step(([r["prompt"] for r in picked], [r["chosen"] for r in picked],
                            [r["rejected"] for r in picked], [r["condition"] for r in picked])))
        masks.append(step.last_batch.attention_mask)
    return {"seconds": time.perf_counter() - t0, "padded_fraction": padded_fraction(masks), "steps": len(masks),
            "per_condition": dict(seen), "epoch_done": sampler.epoch == 1 and sampler.position == 0}


def _reference(model):
    from selectrust.model import Reference

    return Reference(model, lora=True)


def run_trl(rows, tokenizer, our_model, args, *, padding_free: bool) -> dict:
    prompts = [r["prompt"] for r in rows]
    with tempfile.TemporaryDirectory() as work:
        from selectrust.model import ensure_tiny_model

        step = TrlStep(str(ensure_tiny_model(args.preset)), tokenizer, prompts, [r["chosen"] for r in rows],
                       [r["rejected"] for r in rows], rank=16, seq_len=2048, pairs=len(rows), our_model=our_model,
                       workdir=work, batch_size=args.batch, padding_free=padding_free)
        if padding_free and not getattr(step.trainer, "padding_free", True):
            raise RuntimeError(f"TRL {__import__('trl').__version__} DPOTrainer disables padding_free and falls back "
                               "to padding (its warning: 'temporarily unavailable after a refactor')")
        loader = step.trainer.get_train_dataloader()
        step(next(iter(loader)))  # warm-up (untimed), as on our side
        masks, n = [], 0
        t0 = time.perf_counter()
        for batch in loader:
            step(batch)
            n += 1
            masks.append(batch["attention_mask"] if "attention_mask" in batch else batch["input_ids"].ne(-1))
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "padded_fraction": padded_fraction(masks), "steps": n}


def main(argv=None) -> dict:
    import copy

    args = parse_args(argv)
    quiet()
    threads = set_threads(args.threads)
    from selectrust.model import ensure_tiny_model, load_tokenizer

    path = str(ensure_tiny_model(args.preset))
    tokenizer = load_tokenizer(path)
    rows = load_pairs(args.data, pairs=args.pairs, lo=args.min_completion, hi=args.max_completion)
    _, model = build_our_policy(path, rank=16)
    init = copy.deepcopy(model)  # TRL starts from the same adapter weights as ours
    print(f"{len(rows)} pairs ({Counter(r['condition'] for r in rows)}), preset {args.preset}, {args.batch} pairs "
          f"per step, completions {args.min_completion}-{args.max_completion} tokens, threads {threads}", flush=True)
    trl = run_trl(rows, tokenizer, init, args, padding_free=False)
    print(f"TRL default collator: {trl['seconds']:.1f} s for {trl['steps']} steps, padded fraction "
          f"{trl['padded_fraction']:.3f}", flush=True)
    ours = run_ours(rows, tokenizer, model, args)
    print(f"ours (group_by_length): {ours['seconds']:.1f} s for {ours['steps']} steps, padded fraction "
          f"{ours['padded_fraction']:.3f}, per condition {ours['per_condition']}", flush=True)
    if ours["steps"] != trl["steps"] or not ours["epoch_done"] or set(ours["per_condition"].values()) != {len(rows) // 4}:
        raise RuntimeError(f"not the same epoch: ours {ours}, TRL {trl}")
    summary = {"time_ratio": round(ours["seconds"] / trl["seconds"], 4),
               "padded_fraction_ours": round(ours["padded_fraction"], 4),
               "padded_fraction_trl": round(trl["padded_fraction"], 4),
               "epoch_s_ours": round(ours["seconds"], 2), "epoch_s_trl": round(trl["seconds"], 2),
               "steps": ours["steps"], "pairs": len(rows), "preset": args.preset}
    if not args.no_padding_free:
        try:
            free = run_trl(rows, tokenizer, init, args, padding_free=True)
            summary["time_ratio_padding_free"] = round(ours["seconds"] / free["seconds"], 4)
            summary["epoch_s_trl_padding_free"] = round(free["seconds"], 2)
            print(f"TRL padding_free: {free['seconds']:.1f} s for {free['steps']} steps", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported, not fatal: TRL may not run padding_free here
            summary["padding_free_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            print(f"TRL padding_free did not run here: {summary['padding_free_error']}", flush=True)
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
