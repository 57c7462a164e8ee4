"""Several nodes, fast: the commands `launch/multinode.py` builds (two nodes over loopback, one node by hand, the
SLURM script run under a fake srun), the node layout decision (shared or node-local run dirs, the refusals), the
node-local resume agreement, and the one-line report of a lost rank. The real two-node runs are in
tests/launch/test_multinode_runs.py (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launch import multinode as mn
from selectrust.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
RECIPE = ["recipes/dpo.py", "trainer.run_dir=runs/two/node{node}", "algo.beta=0.1"]


def _expected(rank, *, port, addr="127.0.0.1", nodes=2, procs=1, cpu=True, config="launch/multinode.yaml"):
    return ["accelerate", "launch", "--config_file", config, "--num_machines", str(nodes),
            "--num_processes", str(nodes * procs), "--machine_rank", str(rank), "--main_process_ip", addr,
            "--main_process_port", str(port), *(["--mixed_precision", "no"] if cpu else []),
            "recipes/dpo.py", f"trainer.run_dir=runs/two/node{rank}", "algo.beta=0.1"]


def test_node_commands_on_cpu_and_gpu():
    cpu = mn.Spec(nodes=2, procs_per_node=1, master_port=29555, device="cpu")
    assert [mn.node_command(cpu, r, RECIPE) for r in (0, 1)] == [_expected(r, port=29555) for r in (0, 1)]
    assert mn.node_env(cpu) == {"ACCELERATE_USE_CPU": "true"}     # gloo, one group (not N lone ranks)
    gpu = mn.Spec(nodes=4, procs_per_node=8, master_addr="node0", master_port=29500, device="gpu")
    assert mn.node_command(gpu, 3, RECIPE) == _expected(3, port=29500, addr="node0", nodes=4, procs=8, cpu=False)
    assert mn.node_env(gpu) == {}                                   # NCCL: accelerate's choice on CUDA
    ds = mn.Spec(device="cpu", deepspeed=True)
    assert mn.node_env(ds) == {"DS_ACCELERATOR": "cpu"}             # CPU not forced, or DeepSpeed is skipped
    assert mn.node_command(ds, 0, RECIPE)[3] == "launch/multinode_zero2.yaml"


def test_the_configs_the_commands_name_load_with_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    ddp = load_config_from_file(str(REPO / "launch/multinode.yaml"))
    z2 = load_config_from_file(str(REPO / "launch/multinode_zero2.yaml"))
    assert str(ddp.distributed_type).endswith("MULTI_GPU") and str(z2.distributed_type).endswith("DEEPSPEED")
    # zero2.yaml's block, plus torchrun per node: accelerate's default multi-node DeepSpeed launcher (pdsh) runs
    # `deepspeed --hostfile None` on every node, and each node then trains alone (world size 1)
    z2_block = dict(z2.deepspeed_config)
    assert z2_block.pop("deepspeed_multinode_launcher") == "standard"
    assert z2_block == load_config_from_file(str(REPO / "launch/zero2.yaml")).deepspeed_config
    assert z2.deepspeed_config["zero_stage"] == 2
    for cfg in (ddp, z2):
        assert cfg.num_machines == 2 and cfg.rdzv_backend == "static" and cfg.main_process_ip == "RANK0_HOSTNAME"


def test_local_dry_run_prints_each_nodes_command():
    r = subprocess.run([sys.executable, "launch/multinode.py", "local", "--dry-run", "--device", "cpu", "--port",
                        "29777", "--", *RECIPE], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == [f"node {k}: ACCELERATE_USE_CPU=true " + " ".join(_expected(k, port=29777)) for k in (0, 1)]


def test_command_mode_prints_one_nodes_command():
    r = subprocess.run([sys.executable, "launch/multinode.py", "command", "--node-rank", "1", "--master-addr",
                        "node0", "--procs-per-node", "8", "--", *RECIPE], cwd=REPO, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == _expected(1, port=29500, addr="node0", procs=8, cpu=False)


def _fake_bin(tmp_path: Path) -> Path:
    """``srun`` runs its command once per node (SLURM_NODEID=0..N-1), ``scontrol`` names the nodes and
    ``accelerate`` records its arguments: running the sbatch script then shows what each node would run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        "#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\n"
        "for ((i = 0; i < SLURM_NNODES; i++)); do SLURM_NODEID=$i \"$@\" || exit $?; done\n")
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'gpu-a17\\ngpu-a18\\n'\n")
    (bin_dir / "accelerate").write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['CALLS'], 'a') as f:\n"
        "    f.write(json.dumps({'argv': ['accelerate', *sys.argv[1:]], 'cpu': os.environ.get('ACCELERATE_USE_CPU'),\n"
        "                        'cwd': os.getcwd()}) + '\\n')\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_sbatch_script_runs_the_same_command_on_every_node(tmp_path, device):
    spec = mn.Spec(nodes=2, procs_per_node=8 if device == "gpu" else 1, device=device)
    slurm = mn.SlurmSpec(time="02:00:00", partition="gpu", setup=["export FROM_SETUP=1"], workdir=str(tmp_path))
    args = [*RECIPE, "note=it's a \"test\" $HOME"]  # quotes and a dollar sign reach the recipe as typed
    text = mn.sbatch_script(spec, slurm, args)
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --requeue" in text
    assert ("#SBATCH --gpus-per-node=8" in text) == (device == "gpu")
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{_fake_bin(tmp_path)}:{os.environ['PATH']}", "SLURM_NNODES": "2",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu-a[17-18]", "CALLS": str(calls)}
    env.pop("ACCELERATE_USE_CPU", None)
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in calls.read_text().splitlines()]
    want = mn.Spec(nodes=2, procs_per_node=spec.procs_per_node, device=device, master_addr="gpu-a17",
                   master_port=20000 + 4242)
    assert [g["argv"] for g in got] == [mn.node_command(want, k, args) for k in (0, 1)]
    assert [g["argv"][-1] for g in got] == ["note=it's a \"test\" $HOME"] * 2
    assert all(g["cpu"] == ("true" if device == "cpu" else None) and g["cwd"] == str(tmp_path) for g in got)


# -- the node layout -------------------------------------------------------------------------------------------
def test_layout_of_what_each_node_sees():
    from trainer.runtime.nodes import layout_of

    assert layout_of({0: [0, 1], 1: [0, 1]}, [0, 1]) == "shared"
    assert layout_of({0: [0], 1: [1]}, [0, 1]) == "node_local"
    assert layout_of({0: [0, 1], 1: [1]}, [0, 1]) == "mixed"       # a half-mounted file system
    assert layout_of({0: [0], 1: [1], 2: [1, 2]}, [0, 1, 2]) == "mixed"


def test_layout_refusals_name_the_setting():
    from trainer.runtime.nodes import LAYOUT_KEY, layout_refusal

    run = Path("/scratch/run")
    views = {0: [0], 1: [1]}
    for setting in ("auto", "node_local"):
        assert layout_refusal(setting, "node_local", run_dir=run, views=views, deepspeed=False) is None
    for setting in ("auto", "shared"):
        assert layout_refusal(setting, "shared", run_dir=run, views={0: [0, 1], 1: [0, 1]}, deepspeed=False) is None
    lines = [layout_refusal("shared", "node_local", run_dir=run, views=views, deepspeed=False),
             layout_refusal("node_local", "shared", run_dir=run, views={0: [0, 1], 1: [0, 1]}, deepspeed=False),
             layout_refusal("auto", "node_local", run_dir=run, views=views, deepspeed=True),
             layout_refusal("auto", "mixed", run_dir=run, views={0: [0, 1], 1: [1]}, deepspeed=False)]
    for line in lines:
        assert LAYOUT_KEY in line and "trainer.run_dir=/scratch/run" in line and "\n" not in line
    assert "not share" in lines[0] and "overwrite each other" in lines[1] and "DeepSpeed" in lines[2]


def test_node_local_resume_takes_the_newest_step_complete_on_every_node():
    from trainer.runtime.nodes import common_steps, local_checkpoint, no_common_checkpoint

    assert common_steps({0: [2, 4, 6], 1: [2, 4]}) == [4, 2]       # node 1 died while saving step 6
    assert common_steps({0: [4], 1: []}) == []
    line = no_common_checkpoint({0: [4, 6], 1: []}, Path("/local/run"))
    assert "node 0: step_4, step_6; node 1: none" in line and "trainer.run_dir_layout" in line and "\n" not in line
    assert local_checkpoint(Path("/local/run"), "auto", 4) == Path("/local/run/checkpoints/step_4")
    assert local_checkpoint(Path("/x"), "/local/run/checkpoints", 4) == Path("/local/run/checkpoints/step_4")
    assert local_checkpoint(Path("/x"), "/local/run/checkpoints/step_2", 2) == Path("/local/run/checkpoints/step_2")


def test_one_process_needs_no_probe(tmp_path):
    from types import SimpleNamespace

    from trainer.runtime.nodes import Nodes, detect

    assert detect(SimpleNamespace(num_processes=1), tmp_path / "run") == Nodes()
    assert not (tmp_path / "run").exists()


def test_run_dir_layout_is_a_checked_setting():
    from recipe_utils import compose

    assert str(compose("dpo").trainer.run_dir_layout) == "auto"
    with pytest.raises(Exception, match="run_dir_layout"):
        compose("dpo", ["trainer.run_dir_layout=nfs"])


# -- a lost rank: one line, exit 1 -----------------------------------------------------------------------------
def test_a_lost_rank_is_one_line_exit_1():
    import torch.distributed  # noqa: F401 - the contract looks for it among the loaded modules

    from eval_hooks.cli_contract import FAILURE_EXIT, classify, lost_peer

    closed = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                          "[127.0.0.1]:53428. This is typically caused by a remote worker crashing.")
    timed_out = RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                             "30000ms for recv operation to complete")
    for e in (closed, timed_out):
        status, line = classify(e)
        assert status == FAILURE_EXIT and "\n" not in line and "trainer.dist_timeout_s" in line
        assert "restart every node with the same command" in line and str(e)[:60] in line
    assert not lost_peer(RuntimeError("Connection closed by peer"))   # no collective's: a bug keeps its traceback
    assert classify(RuntimeError("shape mismatch")) is None


def test_nodes_reading_different_data_are_refused_on_every_rank(monkeypatch):
    from types import SimpleNamespace

    import trainer.runtime.run_dir as rd

    acc = SimpleNamespace(num_processes=2)
    same = [(None, (0, {"data.train_path": "aa"})), (None, (1, {"data.train_path": "aa"}))]
    monkeypatch.setattr(rd, "all_gather_object", lambda a, obj: same)
    rd._agree_errors(acc, None, node_data=(1, {"data.train_path": "aa"}))
    differ = [(None, (0, {"data.train_path": "aa"})), (None, (1, None)), (None, (1, {"data.train_path": "bb"}))]
    monkeypatch.setattr(rd, "all_gather_object", lambda a, obj: differ)
    with pytest.raises(ConfigError, match=r"different data .*data.train_path: node 1 reads sha256 bb, node 0 aa"):
        rd._agree_errors(acc, None, node_data=(1, None))
    failed = [(("ConfigError", "trainer.resume=none but ..."), (0, {})), (None, (1, {}))]
    monkeypatch.setattr(rd, "all_gather_object", lambda a, obj: failed)
    with pytest.raises(ConfigError, match="trainer.resume=none but"):      # the same line on the rank that did not fail
        rd._agree_errors(acc, None, node_data=(1, {}))


# -- a node's output under the error contract (issue 59; the launches are in test_multinode_contract.py) ----------
AGENT_REPORT = """\
E1206 04:53:55.860000 8398 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: 8736) of binary: /usr/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/accelerate/commands/launch.py", line 1423, in <module>
    main()
  File "/x/torch/distributed/launcher/api.py", line 194, in __call__
    return launch_agent(
           ^^^^^^^^^^^^^
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
recipes/dpo.py FAILED
------------------------------------------------------------
Failures:
[1]:
  exitcode  : 1 (pid: 8737)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 8736) 
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_a_nodes_output_keeps_the_ranks_lines_and_drops_the_agents_report():
    assert mn.INPUT_EXIT == __import__("selectrust.core.errors", fromlist=["INPUT_EXIT"]).INPUT_EXIT
    node = mn.NodeOutput()
    rank = ["[selectrust] step 1 loss 0.69", "error: optim.lr must be a finite number, got nan",
            "Traceback (most recent call last):", '  File "recipes/dpo.py", line 3, in <module>',
            "ValueError: a bug", "[rank1]: error: optim.lr must be a finite number, got nan"]
    shown = [out for line in [*rank, *AGENT_REPORT.splitlines(), "after"] for out in node.feed(line + "\n")]
    assert shown == [rank[0], *rank[2:5], "after"]
    assert node.errors == ["error: optim.lr must be a finite number, got nan"]      # once
    assert node.rank_codes == [1, 2] and node.code(1) == 2 and node.code(0) == 0
    held = mn.NodeOutput()
    assert held.feed("Traceback (most recent call last):\n") == [] and held.close() == ["Traceback (most recent "
                                                                                          "call last):"]
