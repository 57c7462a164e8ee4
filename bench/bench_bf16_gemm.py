"""bf16 against fp32 GEMMs on this CPU, at SmolLM2-135M-Instruct's linear shapes: what ``mixed_precision=auto``
decides on (``selectrust/model/precision.py``: bf16 only with AMX-BF16). Prints one line per shape and, last, one JSON
object: the CPU's bf16 flags, the threads and ``bf16_over_fp32`` (bf16 GFLOPS / fp32 GFLOPS, median over the shapes;
> 1: bf16 faster).

    python bench/bench_bf16_gemm.py            # about 10 s
    python bench/bench_bf16_gemm.py --reps 30

Not a unit test: timings on a shared machine are noisy (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

# (rows, in, out): a prefill batch (64 prompts x 45 tokens) and a decoding step (64 rows) through the attention
# projection (576 -> 576) and the MLP (576 -> 1536, 1536 -> 576) of SmolLM2-135M
SHAPES = [(2880, 576, 1536), (2880, 1536, 576), (2880, 576, 576), (64, 576, 1536), (64, 1536, 576)]


def gflops(rows: int, d_in: int, d_out: int, dtype, reps: int) -> float:
    import torch

    x, w = torch.randn(rows, d_in, dtype=dtype), torch.randn(d_out, d_in, dtype=dtype)
    for _ in range(2):
        torch.nn.functional.linear(x, w)
    t = time.perf_counter()
    for _ in range(reps):
        torch.nn.functional.linear(x, w)
    return 2 * rows * d_in * d_out * reps / (time.perf_counter() - t) / 1e9


def main(argv: list[str] | None = None) -> None:
    import torch

    from selectrust.model import cpu_has_amx_bf16, cpu_supports_bf16, resolve_mixed_precision

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="seconds: 1 rep, the 64-row decoding shapes only")
    args = ap.parse_args(argv)
    if args.smoke:
        args.reps = 1
    ratios = []
    for shape in [s for s in SHAPES if s[0] == 64] if args.smoke else SHAPES:
        f32, b16 = gflops(*shape, torch.float32, args.reps), gflops(*shape, torch.bfloat16, args.reps)
        ratios.append(b16 / f32)
        print(f"{'x'.join(map(str, shape)):>16}: fp32 {f32:7.1f} GFLOPS, bf16 {b16:7.1f} GFLOPS, ratio {b16 / f32:.2f}")
    print(json.dumps({"amx_bf16": cpu_has_amx_bf16(), "avx512_bf16_or_amx": cpu_supports_bf16(),
                      "auto_resolves_to": resolve_mixed_precision("auto", cpu=True),
                      "threads": torch.get_num_threads(), "loadavg": round(os.getloadavg()[0], 2),
                      "bf16_over_fp32": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    main()
