"""launch/*.yaml accelerate configs; slow: real 2-rank gloo DDP and DeepSpeed ZeRO-2 runs on CPU.

The multi-process tests train an nn.Linear for two optimizer steps with a global batch of 8 split over
2 ranks (4 each) and compare the logged losses and final weights with a single-process run over the
same 8 rows, computed here in the test: averaging the two ranks' gradients equals the gradient of
the mean loss over the 8 rows, so the runs must agree to float rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch"


def _load(name):
    from accelerate.commands.config.config_args import load_config_from_file
    return load_config_from_file(str(LAUNCH / name))


@pytest.mark.parametrize("name, dist, nproc, precision", [
    ("single_gpu.yaml", "NO", 1, "bf16"),
    ("ddp.yaml", "MULTI_GPU", 2, "bf16"),
    ("zero2.yaml", "DEEPSPEED", 2, "bf16"),
    ("zero3_lora.yaml", "DEEPSPEED", 2, "bf16"),
    ("multinode.yaml", "MULTI_GPU", 16, "bf16"),
    ("multinode_zero2.yaml", "DEEPSPEED", 16, "bf16"),
    ("cpu_ddp.yaml", "MULTI_GPU", 2, "no"),
    ("cpu_zero2.yaml", "DEEPSPEED", 2, "no"),
])
def test_configs_load_with_accelerate(name, dist, nproc, precision):
    cfg = _load(name)
    assert str(cfg.distributed_type).split(".")[-1] == dist
    assert cfg.num_processes == nproc and cfg.mixed_precision == precision
    text = (LAUNCH / name).read_text()
    assert "accelerate launch" in text                   # each file documents its launch line
    # Accumulation and clipping must come from the trainer ("auto"); a number here would disagree with
    # the recipe, and the string "auto" breaks Accelerator() (it int()s ACCELERATE_GRADIENT_ACCUMULATION_STEPS).
    import yaml
    raw = yaml.safe_load(text)
    for d in (raw, raw.get("deepspeed_config") or {}):
        assert "gradient_accumulation_steps" not in d and "gradient_clipping" not in d


def test_deepspeed_stages():
    z2, z3, c2 = _load("zero2.yaml"), _load("zero3_lora.yaml"), _load("cpu_zero2.yaml")
    assert z2.deepspeed_config["zero_stage"] == 2 and c2.deepspeed_config["zero_stage"] == 2
    assert z3.deepspeed_config["zero_stage"] == 3
    assert z3.deepspeed_config["zero3_save_16bit_model"] is True
    assert z3.deepspeed_config["zero3_init_flag"] is False
    assert _load("cpu_ddp.yaml").use_cpu is True and c2.use_cpu is False


def test_readme_documents_every_config():
    readme = (LAUNCH / "README.md").read_text()
    for p in sorted(LAUNCH.glob("*.yaml")):
        assert f"launch/{p.name}" in readme, p.name
    for phrase in ("trainer.resume=auto", "SIGUSR1", "SIGTERM", "ACCELERATE_USE_CPU=true", "sweep.py"):
        assert phrase in readme, phrase


# ---------------------------------------------------------------------------------------------- slow

TRAIN_SCRIPT = textwrap.dedent('''
    import json, os, sys, torch
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs
    mode = sys.argv[1]          # "ddp-env" | "ddp-cpu-flag" | "deepspeed"
    if mode == "ddp-cpu-flag":
        acc = Accelerator(cpu=True)
    elif mode == "deepspeed":
        # no CUDA: accelerate would otherwise see world size 1 while DeepSpeed sees 2
        acc = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")])
        acc.state.deepspeed_plugin.deepspeed_config["gradient_clipping"] = 0.0
    else:
        acc = Accelerator()
    out = {"rank": acc.process_index, "world": acc.num_processes, "type": str(acc.distributed_type),
           "env_world": int(os.environ.get("WORLD_SIZE", "1"))}
    out["allreduce"] = acc.reduce(torch.tensor([float(acc.process_index + 1)]), reduction="sum").item()
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4, shuffle=False)
    model, opt, dl = acc.prepare(model, opt, dl)
    out["engine"] = type(model).__name__
    losses = []
    for xb, yb in dl:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(acc.reduce(loss.detach(), reduction="mean").item())
    out["losses"] = losses
    m = acc.unwrap_model(model)
    out["weight"] = m.weight.detach().flatten().tolist() + m.bias.detach().flatten().tolist()
    # one file per rank: two ranks printing to one pipe can interleave their lines
    with open(f"result_rank{os.environ.get('RANK', '0')}.json", "w") as f:  # the launcher's rank
        json.dump(out, f)
    acc.wait_for_everyone()
    acc.end_training()   # destroy the gloo group: without it a rank sometimes aborts at exit
''')


def _reference():
    """Single process, same seed and rows: two AdamW steps on batches of 8 (rows 0-7, then 8-15)."""
    import torch
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    losses = []
    for i in (0, 8):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 8]), y[i:i + 8])
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, model.weight.detach().flatten().tolist() + model.bias.detach().flatten().tolist()


def _launch(tmp_path, config, mode, extra_env, timeout=300):
    script = tmp_path / "train_probe.py"
    script.write_text(TRAIN_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **extra_env}
    for k in ("ACCELERATE_USE_CPU",):
        if k not in extra_env:
            env.pop(k, None)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(LAUNCH / config),
           str(script), mode]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("result_rank*.json"))]
    return r, sorted(results, key=lambda d: d["rank"])


def _check_two_ranks(r, results, engine):
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert [d["rank"] for d in results] == [0, 1]
    assert all(d["world"] == 2 and d["env_world"] == 2 for d in results)
    assert all(d["allreduce"] == 3.0 for d in results)       # 1 + 2
    assert all(d["engine"] == engine for d in results)
    ref_losses, ref_weight = _reference()
    for d in results:
        assert d["losses"] == pytest.approx(ref_losses, abs=1e-5)
        assert d["weight"] == pytest.approx(ref_weight, abs=1e-5)


@pytest.mark.slow
def test_cpu_ddp_two_ranks_with_env(tmp_path):
    """ACCELERATE_USE_CPU=true accelerate launch --config_file launch/cpu_ddp.yaml script.py"""
    r, results = _launch(tmp_path, "cpu_ddp.yaml", "ddp-env", {"ACCELERATE_USE_CPU": "true"})
    _check_two_ranks(r, results, "DistributedDataParallel")
    assert all(d["type"] == "DistributedType.MULTI_CPU" for d in results)


@pytest.mark.slow
def test_cpu_ddp_two_ranks_with_cpu_flag(tmp_path):
    """accelerate launch --config_file launch/cpu_ddp.yaml script.py, the script using Accelerator(cpu=True)."""
    r, results = _launch(tmp_path, "cpu_ddp.yaml", "ddp-cpu-flag", {})
    _check_two_ranks(r, results, "DistributedDataParallel")


@pytest.mark.slow
def test_cpu_ddp_without_forcing_cpu_is_two_separate_runs(tmp_path):
    """The trap the configs document: without CPU forced each rank is an independent world-size-1 run."""
    r, results = _launch(tmp_path, "cpu_ddp.yaml", "ddp-env", {})
    assert r.returncode == 0
    assert len(results) == 2 and all(d["world"] == 1 and d["env_world"] == 2 for d in results)


@pytest.mark.slow
def test_cpu_deepspeed_zero2_two_ranks(tmp_path):
    """DS_ACCELERATOR=cpu accelerate launch --config_file launch/cpu_zero2.yaml script.py"""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -c constraints.txt deepspeed==0.19.8)")
    r, results = _launch(tmp_path, "cpu_zero2.yaml", "deepspeed", {"DS_ACCELERATOR": "cpu"})
    _check_two_ranks(r, results, "DeepSpeedEngine")
    assert all(d["type"] == "DistributedType.DEEPSPEED" for d in results)
