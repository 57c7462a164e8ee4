"""Peak memory and time of one DPO micro-batch forward+backward: chunked log-probs vs the full-logits path.

Setup (issue 17 §1): a random-init Llama with Qwen3's 151,936-token vocabulary, hidden size 512,
2 blocks (8 heads, intermediate 1376), untied LM head, fp32; LoRA r16 / alpha 32 on every block
projection (the head is frozen, as in LoRA DPO); one micro-batch of 2 pairs = 4 rows of a 64-token
prompt + 1,024 completion tokens. One measured step = ``sequence_logprobs`` on the policy (with
gradients) + the same with the adapter disabled under ``no_grad`` (the reference) +
``sigmoid_dpo_loss`` + backward, exactly the calls of ``recipes/dpo.py``'s ``step_fn``; ``--chunk``
is ``model.logprob_chunk`` (0 = today's full-logits path).

    python bench/bench_logprob_memory.py                # both paths, each in a fresh subprocess (~1-2 min on CPU)
    python bench/bench_logprob_memory.py --smoke        # seconds: vocabulary 4096, 64 completion tokens
    python bench/bench_logprob_memory.py --device cuda  # on a GPU (peak = torch.cuda.max_memory_allocated)

Peak memory = the step's high-water mark above the memory in use right before it: on CPU ``VmHWM`` (reset
through ``/proc/self/clear_refs`` after setup) minus ``VmRSS`` before the step, with glibc's mmap threshold
fixed at 64 KiB so freed tensors go back to the OS; on CUDA ``max_memory_allocated`` minus
``memory_allocated``. Time = the median of ``--steps`` steps after one warm-up step. Each path runs in its
own process so neither inherits the other's heap. The last printed line is JSON with ``peak_ratio`` and
``time_ratio`` (chunked / today's; targets <= 0.35 and <= 1.1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from bench.bench_dpo_step import BETA, lora_config, quiet, set_threads


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=1024, help="model.logprob_chunk of the chunked path")
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4, help="rows per micro-batch (2 per pair)")
    ap.add_argument("--completion", type=int, default=1024, help="completion tokens per row")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens per row")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per path (after one warm-up)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--smoke", action="store_true", help="vocabulary 4096, 64 completion tokens, 1 timed step")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # run one path: its chunk
    args = ap.parse_args(argv)
    if args.smoke:
        args.vocab, args.completion, args.prompt, args.steps, args.chunk = 4096, 64, 16, 1, 32
    return args


def _proc_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_child(args) -> dict:
    """Build the model, run warm-up + timed steps with ``logprob_chunk=args.child``; peak over the warm-up step."""
    import torch
    from peft import get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.algos.dpo import sigmoid_dpo_loss
    from trainer.logprobs.logprobs import sequence_logprobs

    quiet()
    set_threads(args.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=1376,
                      num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=8,
                      max_position_embeddings=4096, tie_word_embeddings=False)
    model = get_peft_model(LlamaForCausalLM(cfg), lora_config(16)).to(args.device)
    width = args.prompt + args.completion
    ids = torch.randint(3, args.vocab, (args.rows, width), device=args.device)
    att = torch.ones_like(ids)
    comp = torch.zeros_like(ids)
    comp[:, args.prompt:] = 1
    cuda = args.device.startswith("cuda")

    def step() -> float:
        t0 = time.perf_counter()
        seq, _, _ = sequence_logprobs(model, ids, att, comp, logprob_chunk=args.child)
        with torch.no_grad(), model.disable_adapter():
            ref, _, _ = sequence_logprobs(model, ids, att, comp, logprob_chunk=args.child)
        (pc, pr), (rc, rr) = seq.chunk(2), ref.chunk(2)
        loss, _ = sigmoid_dpo_loss(pc, pr, rc, rr, beta=BETA)
        loss.backward()
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before = _proc_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    step()
    peak = (torch.cuda.max_memory_allocated() if cuda else _proc_kib("VmHWM")) - before
    times = [step() for _ in range(args.steps)]
    return {"chunk": args.child, "peak_bytes": peak, "step_s": statistics.median(times), "times": times,
            "threads": torch.get_num_threads()}


def child_result(args, chunk: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(chunk)]
    for k in ("vocab", "hidden", "layers", "rows", "completion", "prompt", "steps", "threads", "device"):
        cmd += [f"--{k}", str(getattr(args, k))]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), env=env)
    for line in out.stdout.splitlines():
        if line.startswith("CHILD_RESULT "):
            return json.loads(line[len("CHILD_RESULT "):])
    raise RuntimeError(f"logprob_chunk={chunk} subprocess failed (exit {out.returncode}):\n{out.stderr[-3000:]}")


def main(argv=None) -> dict | None:
    args = parse_args(argv)
    if args.child is not None:
        print("CHILD_RESULT " + json.dumps(run_child(args)), flush=True)
        return None
    print(f"one DPO micro-batch fwd+bwd: vocab {args.vocab}, hidden {args.hidden}, {args.layers} blocks, "
          f"{args.rows} rows x ({args.prompt} prompt + {args.completion} completion) tokens, LoRA r16, fp32, "
          f"{args.device}", flush=True)
    full = child_result(args, 0)
    chunked = child_result(args, args.chunk)
    for name, r in (("today (full logits)", full), (f"chunked ({args.chunk})", chunked)):
        print(f"{name:22s} peak {r['peak_bytes'] / 2**30:7.3f} GiB   step {r['step_s']:7.3f} s   "
              f"(times {[round(t, 3) for t in r['times']]}, threads {r['threads']})", flush=True)
    summary = {"peak_ratio": round(chunked["peak_bytes"] / full["peak_bytes"], 4),
               "time_ratio": round(chunked["step_s"] / full["step_s"], 4),
               "peak_gib_full": round(full["peak_bytes"] / 2**30, 3),
               "peak_gib_chunked": round(chunked["peak_bytes"] / 2**30, 3),
               "step_s_full": round(full["step_s"], 3), "step_s_chunked": round(chunked["step_s"], 3),
               "chunk": args.chunk, "vocab": args.vocab, "device": args.device}
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main()
