"""Evaluation generation benchmark: batched ``HFBackend.generate`` vs a plain per-row ``generate`` loop.

The workload is a 400-row MIST matched set (100 GSM8K questions x clean/misleading/correct/irrelevant,
built by ``eval_hooks.builders.gsm8k``), rendered with the chat template, greedy, the same
``max_new_tokens`` on both sides, on the ~3M-parameter tiny Llama (``tiny-3m``, random init, built
locally). Prints both wall times and their ratio (issue 2 target: >= 8x; not a timed unit test).

    python bench/bench_eval_generation.py [--items 100] [--max-new-tokens 32] [--batch-size 32] [--threads 1]

The loop side is what a user would write by hand: one ``model.generate`` per prompt, no padding. The
batched side is the backend every trainer and ``run_matched_eval`` use (length-sorted batches of
``--batch-size``, left padding, per-token log-probs kept). As a correctness check it also reports
how many greedy completions agree between the two (left padding must not change greedy outputs
beyond float-rounding ties).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
GSM8K = ROOT / "eval_hooks" / "data" / "gsm8k_test.jsonl"  # shipped with the package


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(GSM8K), help="GSM8K-style QA JSONL (question, answer '#### N')")
    ap.add_argument("--items", type=int, default=100, help="source questions; rows = 4 x items")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--preset", default="tiny-3m", help="tiny model preset (selectrust.model.TINY_PRESETS)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads for both paths (0 = torch default). 1 by default: on a "
                         "shared, loaded CPU box, 2 OpenMP threads made a 3M-model forward ~20x slower")
    ap.add_argument("--smoke", action="store_true", help="seconds: 2 items (8 rows), 4 new tokens, batch 4, the "
                    "'tiny' preset")
    args = ap.parse_args(argv)
    if args.smoke:
        args.items, args.max_new_tokens, args.batch_size, args.preset = 2, 4, 4, "tiny"

    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)

    from selectrust.generation.backends.hf import HFBackend
    from eval_hooks.builders.gsm8k import build_quartets
    from eval_hooks.evaluate import build_requests
    from selectrust.core.io import read_records
    from selectrust.model import ensure_tiny_model, load_model, load_tokenizer

    rows = build_quartets(read_records(args.data), limit=args.items, seed=0)
    path = ensure_tiny_model(args.preset)
    model, tok = load_model(str(path)), load_tokenizer(str(path))
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    backend = HFBackend(model, tok, batch_size=args.batch_size)
    reqs = build_requests(rows, max_new_tokens=args.max_new_tokens, temperature=0.0)
    prompts = [backend.prompt_ids(r.prompt, r.messages) for r in reqs]  # the token ids both sides generate from
    lengths = [len(p) for p in prompts]
    print(f"model {args.preset}: {n_params / 1e6:.2f}M params; {len(rows)} rows ({args.items} items x 4); "
          f"prompt tokens min/mean/max {min(lengths)}/{sum(lengths) / len(lengths):.0f}/{max(lengths)}; "
          f"max_new_tokens {args.max_new_tokens}; torch threads {torch.get_num_threads()}", flush=True)

    # warm-up both paths on two rows (lazy init, allocator), outside the timings
    backend.generate(reqs[:2])
    pad = tok.pad_token_id

    def loop_generate(prompt_ids: list[int]) -> list[int]:
        enc = {"input_ids": torch.tensor([prompt_ids]),
               "attention_mask": torch.ones(1, len(prompt_ids), dtype=torch.long)}
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=pad)
        return out[0, enc["input_ids"].shape[1]:].tolist()

    loop_generate(prompts[0])

    t0 = time.perf_counter()
    batched = backend.generate(reqs)
    t_batched = time.perf_counter() - t0
    print(f"batched HFBackend.generate (batch {args.batch_size}, left padding): {t_batched:.2f} s", flush=True)

    t0 = time.perf_counter()
    looped = [loop_generate(p) for p in prompts]
    t_loop = time.perf_counter() - t0
    print(f"per-row model.generate loop: {t_loop:.2f} s", flush=True)

    eos = tok.eos_token_id
    same = sum(res.samples[0].token_ids == (ids[:ids.index(eos) + 1] if eos in ids else ids)
               for res, ids in zip(batched, looped))
    print(f"greedy completions identical in both paths: {same}/{len(rows)}")
    ratio = t_loop / t_batched
    print(f"speed-up ratio (loop / batched): {ratio:.2f}x  (target >= 8x)")
    return ratio


if __name__ == "__main__":
    main()
