"""Two nodes on this machine (slow): `launch/multinode.py`'s per-node commands (`accelerate launch --num_machines 2
--machine_rank R --main_process_ip 127.0.0.1`, gloo), 2 nodes x 1 process against 1 process with the same global
batch, within the one-node DDP tests' tolerance (tests/trainer/runtime/test_distributed.py: 1e-5 on the logged values, 1e-4 on
the adapter). Each test combines several scenarios into as few runs as it can:

- DPO (SCOPE's balanced loss), node-local run dirs (each node its own ``trainer.run_dir``): node 1 hangs inside
  the save of step 4, after its rename and before its ``COMPLETE`` marker (node 0 has finished its own step_4);
  node 0 gives up after ``trainer.dist_timeout_s`` with one line; node 1 is then killed mid-save. Restarted with
  the same commands, the nodes agree on step_2 (the newest complete on both) and the run ends equal to one process.
- GRPO (drop-and-refill, shared-prompt packing on), one shared run dir: node 1 is killed (SIGKILL to its whole
  process group, agent and rank) during step 4; node 0 exits within seconds with one line; the same command for
  both nodes, through `python launch/multinode.py local`, resumes from step_2 and ends equal to one process.
- DeepSpeed ZeRO-2 (`--deepspeed`), DPO, one shared run dir: 3 steps equal to one process (the one-node ZeRO-2
  test's tolerance: 1e-5, adapter 1e-4); skipped when deepspeed is not installed.

    python -m pytest tests/launch/test_multinode_runs.py -m slow -q -s    # -s prints the measured numbers
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dist_helpers as dh
from launch import multinode as mn
from recipe_utils import run_recipe
from trainer.runtime.checkpoint import MARKER, complete_checkpoints

pytestmark = pytest.mark.slow
psutil = pytest.importorskip("psutil")

COMMON = ["eval=none", "trainer.progress=false", "trainer.log_every=1"]
TIMEOUT_S = 30  # trainer.dist_timeout_s of the DPO run: a hung node is given up after this long
LOST = "error: lost contact with another rank"


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def _spec() -> mn.Spec:
    return mn.Spec(nodes=2, procs_per_node=1, master_port=mn.free_port(), device="cpu")


def _start(spec, rank, args, log: Path, **extra_env) -> subprocess.Popen:
    with open(log, "a") as out:
        return mn.start_node(spec, rank, args, env=dh.env(**extra_env), stdout=out, stderr=subprocess.STDOUT,
                             cwd=dh.REPO)


def _kill_node(proc: subprocess.Popen) -> None:
    """SIGKILL the node's launcher, agent and ranks at once, as when the machine dies (the agent starts its
    ranks in sessions of their own, so the launcher's process group alone would leave them running)."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)
    psutil.wait_procs(tree, timeout=30)


def _wait_for(what, predicate, procs, timeout=240.0) -> float:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return time.time()
        if any(p.poll() is not None for p in procs):
            raise AssertionError(f"a node exited ({[p.poll() for p in procs]}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


def _report_times(proc: subprocess.Popen, log: Path, since: float, timeout: float) -> tuple[float, float]:
    """Seconds from ``since`` until node 0's rank printed its line about the lost node, and until its launcher
    (the torchrun agent) exited."""
    deadline, said = time.time() + timeout, None
    while proc.poll() is None and time.time() < deadline:
        if said is None and LOST in log.read_text():
            said = time.time()
        time.sleep(0.05)
    proc.wait(timeout=max(1.0, deadline - time.time()))
    ended = time.time()
    return (said or ended) - since, ended - since


def _one_error_line(log: Path) -> str:
    """Node 0's own report of the lost node: exactly one line of ours, no traceback of ours (the launcher then
    prints its own summary of the failed rank)."""
    text = log.read_text()
    ours = [line for line in text.splitlines() if line.startswith(LOST)]
    assert len(ours) == 1, text[-4000:]
    assert "[rank0]: Traceback" not in text and "File \"" + str(dh.REPO) not in text, text[-4000:]
    return ours[0]


def _finish(procs, logs, timeout=300) -> None:
    for p, log in zip(procs, logs):
        try:
            rc = p.wait(timeout=timeout)
        finally:
            if p.poll() is None:
                _kill_node(p)
        assert rc == 0, log.read_text()[-5000:]


def _single(tmp_path, recipe, overrides):
    run_dir = tmp_path / "single"
    run_recipe(recipe, recipe, [*COMMON, f"trainer.run_dir={run_dir}", *overrides])
    return run_dir


def test_dpo_node_local_dirs_hung_node_timeout_kill_during_save_and_resume(tmp_path):
    over = ["trainer.max_steps=6", "optim.grad_accum=2", "trainer.save_every=2", "trainer.keep_last=2"]
    args = ["recipes/dpo.py", *COMMON, *over, "optim.batch_size=2", f"trainer.dist_timeout_s={TIMEOUT_S}",
            f"trainer.run_dir={tmp_path / 'node{node}'}"]
    node_dirs = [tmp_path / "node0", tmp_path / "node1"]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    spec = _spec()
    procs = [_start(spec, 0, args, logs[0]),
             _start(spec, 1, args, logs[1], SELECTRUST_TEST_SLEEP_IN_SAVE="before_marker:4")]
    try:
        paused = _wait_for("pause in node 1's save", lambda: "SELECTRUST_SAVE_PAUSE before_marker 4" in
                           logs[1].read_text(), procs)
        said, detected = _report_times(procs[0], logs[0], paused, TIMEOUT_S + 90)
        rc0 = procs[0].returncode
        _kill_node(procs[1])                          # killed during its checkpoint save
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_node(p)
    assert rc0 == 1, logs[0].read_text()[-4000:]
    line = _one_error_line(logs[0])
    assert "Timed out" in line, line
    print(f"\n[dpo] node 1 hung in its save: node 0's rank said so after {said:.1f} s, its launcher exited after "
          f"{detected:.1f} s (trainer.dist_timeout_s={TIMEOUT_S})")
    assert TIMEOUT_S - 5 <= said <= detected <= TIMEOUT_S + 45
    # node 0 finished its step_4; node 1's is renamed but unmarked: the newest step complete on both is 2
    assert [p.name for p in complete_checkpoints(node_dirs[0] / "checkpoints")] == ["step_2", "step_4"]
    assert [p.name for p in complete_checkpoints(node_dirs[1] / "checkpoints")] == ["step_2"]
    assert (node_dirs[1] / "checkpoints" / "step_4").is_dir()
    assert not (node_dirs[1] / "checkpoints" / "step_4" / MARKER).exists()

    # both restarted with the same command: exact resume from step_2, each node from its own copy
    procs = [_start(spec, r, args, logs[r]) for r in (0, 1)]
    _finish(procs, logs)
    assert f"resumed from {node_dirs[0] / 'checkpoints' / 'step_2'} at step 2" in logs[0].read_text()
    single = _single(tmp_path, "dpo", ["optim.batch_size=4", *over])
    a, b = dh.step_rows(node_dirs[0]), dh.step_rows(single)
    assert [l["step"] for l in a] == list(range(1, 7))  # steps 3-4 of the first start logged once
    dh.assert_same_steps(a, b, tol=1e-5)
    dh.safetensors_equal(node_dirs[0] / "final" / "adapter_model.safetensors",
                         single / "final" / "adapter_model.safetensors", atol=1e-4)
    print(f"[dpo] 2 nodes (node-local dirs, resumed) vs 1 process: max |loss diff| "
          f"{max(abs(x['loss'] - y['loss']) for x, y in zip(a, b)):.2e}, max |grad_norm diff| "
          f"{max(abs(x['grad_norm'] - y['grad_norm']) for x, y in zip(a, b)):.2e}")
    # rank roles: global rank 0 wrote the run's records on node 0; node 1 holds its checkpoints only
    meta = json.loads((node_dirs[0] / "meta.json").read_text())
    assert (meta["world_size"], meta["nodes"], meta["run_dir_layout"]) == (2, 2, "node_local")
    for name in ("config.yaml", "metrics.jsonl", "final", "run_complete.json", "data_hashes.json"):
        assert (node_dirs[0] / name).exists() and not (node_dirs[1] / name).exists(), name
    for d in node_dirs:
        ck = complete_checkpoints(d / "checkpoints")
        assert [p.name for p in ck] == ["step_4", "step_6"] and not list((d / "checkpoints").glob(".tmp-*"))
    # each node's copy is the whole run's checkpoint (every rank's RNG state too): the same files, byte for byte
    # (adapter_config.json aside: PEFT writes target_modules from a set, in an order of each process's own, so
    # it and the marker's checksum of it are compared by content)
    copies = [{p.relative_to(d / "checkpoints/step_6").as_posix(): p.read_bytes()
               for p in (d / "checkpoints/step_6").rglob("*") if p.is_file()} for d in node_dirs]
    configs = [json.loads(c.pop("adapter/adapter_config.json")) for c in copies]
    for c in configs:
        c["target_modules"] = sorted(c["target_modules"])
    assert configs[0] == configs[1]
    markers = [json.loads(c.pop(MARKER))["files"] for c in copies]
    assert markers[0].keys() == markers[1].keys()
    assert copies[0] == copies[1] and {"rng_rank0.json", "rng_rank1.json", "optimizer.pt"} <= set(copies[0])


def test_grpo_shared_dir_node_killed_during_a_step_and_resumed(tmp_path):
    over = ["trainer.max_steps=4", "optim.grad_accum=2", "trainer.save_every=2", "algo.max_new_tokens=6",
            "algo.max_refill_rounds=2", "algo.reward=tests.dist_helpers:hash_reward", "algo.aggregation=token_mean",
            "algo.std_scaling=batch", "algo.shared_prompt=true"]
    run_dir = tmp_path / "run"
    args = ["recipes/grpo.py", *COMMON, *over, "optim.batch_size=4", f"trainer.run_dir={run_dir}"]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    spec = _spec()
    procs = [_start(spec, r, args, logs[r]) for r in (0, 1)]
    try:
        _wait_for("step 3", lambda: (run_dir / "metrics.jsonl").exists() and len(dh.step_rows(run_dir)) >= 3, procs)
        killed = time.time()
        _kill_node(procs[1])                          # during step 4 (its rollout or its update)
        said, detected = _report_times(procs[0], logs[0], killed, 120)
        rc0 = procs[0].returncode
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_node(p)
    assert rc0 == 1, logs[0].read_text()[-4000:]
    line = _one_error_line(logs[0])
    print(f"\n[grpo] node 1 killed during step 4: node 0's rank said so after {said:.1f} s, its launcher exited "
          f"after {detected:.1f} s ({line[:200]}...)")
    assert said <= detected <= 30
    assert [p.name for p in complete_checkpoints(run_dir / "checkpoints")] == ["step_2"]
    assert len(dh.step_rows(run_dir)) == 3

    # the same command for both nodes, as a user types it: python launch/multinode.py local -- <recipe> ...
    r = subprocess.run([sys.executable, str(dh.LAUNCH / "multinode.py"), "local", "--device", "cpu", "--", *args],
                       env=dh.env(), cwd=dh.REPO, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert f"[node0] [selectrust] resumed from {run_dir / 'checkpoints' / 'step_2'} at step 2" in r.stdout
    assert "[multinode] exit codes by node: [0, 0]" in r.stdout
    single = _single(tmp_path, "grpo", ["optim.batch_size=8", *over])
    a, b = dh.step_rows(run_dir), dh.step_rows(single)
    assert [l["step"] for l in a] == [1, 2, 3, 4]
    dh.assert_same_steps(a, b, tol=1e-5, keys=("loss", "grad_norm", "lr", "policy_loss", "entropy",
                                               "advantage_abs_mean"))
    counts = ("groups_generated", "groups_dropped", "groups_refilled", "refill_rounds", "reward_mean",
              "completion_len_mean", "tokens_per_step_shared")
    for x, y in zip(a, b):
        assert {k: x.get(k) for k in counts} == {k: y.get(k) for k in counts}, f"step {x['step']}"
    assert sum(l.get("groups_dropped", 0) for l in b) > 0 and sum(l.get("groups_refilled", 0) for l in b) > 0
    assert all("tokens_per_step_shared" in l for l in b)           # the shared-prompt packing ran
    dh.safetensors_equal(run_dir / "final" / "adapter_model.safetensors",
                         single / "final" / "adapter_model.safetensors", atol=1e-4)
    print(f"[grpo] 2 nodes (shared dir, resumed) vs 1 process: max |loss diff| "
          f"{max(abs(x['loss'] - y['loss']) for x, y in zip(a, b)):.2e}, max |grad_norm diff| "
          f"{max(abs(x['grad_norm'] - y['grad_norm']) for x, y in zip(a, b)):.2e}")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert (meta["world_size"], meta["nodes"], meta["run_dir_layout"]) == (2, 2, "shared")
    ck = complete_checkpoints(run_dir / "checkpoints")[-1]
    assert sorted(p.name for p in ck.glob("rng_rank*.json")) == ["rng_rank0.json", "rng_rank1.json"]


def test_dpo_deepspeed_zero2_two_nodes_equals_single_process(tmp_path):
    """ZeRO-2 on 2 nodes x 1 process (`multinode.py --deepspeed`: launch/multinode_zero2.yaml, DS_ACCELERATOR=cpu,
    gloo), one shared run dir: the losses, gradient norms (clipping active) and adapter equal one process with the
    same global batch, within the one-node ZeRO-2 test's tolerance (tests/trainer/runtime/test_distributed.py)."""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -c constraints.txt deepspeed==0.19.8)")
    over = ["trainer.max_steps=3", "optim.grad_accum=2", "trainer.save_every=0", "optim.max_grad_norm=0.05"]
    run_dir = tmp_path / "run"
    args = ["recipes/dpo.py", *COMMON, *over, "optim.batch_size=2", "trainer.device=auto", f"trainer.run_dir={run_dir}"]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    spec = mn.Spec(nodes=2, procs_per_node=1, master_port=mn.free_port(), device="cpu", deepspeed=True)
    _finish([_start(spec, r, args, logs[r]) for r in (0, 1)], logs, timeout=400)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert (meta["world_size"], meta["nodes"], meta["distributed_type"], meta["run_dir_layout"]) == \
        (2, 2, "DistributedType.DEEPSPEED", "shared")
    # the optimizer state is sharded over the two nodes' ranks: one ZeRO shard per rank in the one checkpoint
    shards = complete_checkpoints(run_dir / "checkpoints")[-1] / "accelerate_state" / "pytorch_model"
    assert sorted(p.name for p in shards.glob("zero_pp_rank_*_optim_states.pt")) == \
        ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    single = _single(tmp_path, "dpo", ["optim.batch_size=4", *over])
    a, b = dh.step_rows(run_dir), dh.step_rows(single)
    assert [l["step"] for l in a] == [1, 2, 3]
    assert max(l["grad_norm"] for l in b) > 0.05               # DeepSpeed clipped, as the trainer does alone
    dh.assert_same_steps(a, b, tol=1e-5)
    dh.safetensors_equal(run_dir / "final" / "adapter_model.safetensors",
                         single / "final" / "adapter_model.safetensors", atol=1e-4)
    print(f"\n[zero2] 2 nodes (shared dir) vs 1 process: max |loss diff| "
          f"{max(abs(x['loss'] - y['loss']) for x, y in zip(a, b)):.2e}, max |grad_norm diff| "
          f"{max(abs(x['grad_norm'] - y['grad_norm']) for x, y in zip(a, b)):.2e}")
