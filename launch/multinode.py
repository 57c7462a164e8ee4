"""Several nodes: the command each node runs, N nodes on this machine over loopback, and a SLURM script.

    # 2 nodes x 1 process on this machine (a first try; the tests): one `accelerate launch` per node
    python launch/multinode.py local -- recipes/dpo.py trainer.run_dir=runs/two_nodes
    # each node its own run dir (as on nodes without a shared file system): {node} becomes the node's rank
    python launch/multinode.py local -- recipes/dpo.py 'trainer.run_dir=runs/two_nodes/node{node}'
    # what node 1 of a cluster runs (print only)
    python launch/multinode.py command --node-rank 1 --master-addr node0 --procs-per-node 8 -- recipes/dpo.py ...
    # a SLURM script: one task per node, the same command with each node's rank (print only; submit it yourself)
    python launch/multinode.py sbatch --nodes 2 --procs-per-node 8 --time 12:00:00 -- recipes/dpo.py ... > job.sbatch

Every node runs ``accelerate launch --config_file launch/multinode.yaml --num_machines N --num_processes N*M
--machine_rank R --main_process_ip A --main_process_port P <recipe> <overrides>`` (``launch/multinode_zero2.yaml``
with ``--deepspeed``): accelerate's torchrun agent on each node starts M ranks, node 0's agent hosts the
rendezvous. The process group is NCCL on GPUs and gloo on CPU: accelerate picks it from the device; on a machine
without GPUs the nodes get ``ACCELERATE_USE_CPU=true`` (without it each rank trains alone, silently) and
``--mixed_precision no``; with ``--deepspeed`` on CPU, ``DS_ACCELERATOR=cpu`` instead (CPU must not be forced
there, see launch/README.md#on-cpu-tests-and-debugging).

``local`` starts the nodes as separate process groups on a free port of 127.0.0.1, prefixes their output with
``[node<R>]``, forwards SIGINT/SIGTERM/SIGUSR1 to every node (the trainers checkpoint and exit) and exits with the
first non-zero exit code of a node (0 when all succeeded). When a node dies, the others stop by themselves with one
line (``trainer.dist_timeout_s``; launch/README.md#several-nodes). This module does not import torch.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

LAUNCH = Path(__file__).resolve().parent
CONFIGS = {False: "launch/multinode.yaml", True: "launch/multinode_zero2.yaml"}
NODE = "{node}"  # in a recipe argument: the node's rank (a node-local run dir per node on one machine)
ACCELERATE = ("accelerate", "launch")


@dataclass
class Spec:
    """One multi-node launch: what every node's command is built from."""

    nodes: int = 2
    procs_per_node: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    device: str = "cpu"          # cpu | gpu (resolve "auto" with resolve_device first)
    deepspeed: bool = False
    config: Optional[str] = None  # accelerate config file; None = launch/multinode(_zero2).yaml
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def config_file(self) -> str:
        return self.config or CONFIGS[self.deepspeed]


def resolve_device(device: str) -> str:
    """``auto``: ``gpu`` when ``nvidia-smi -L`` lists a GPU on this machine, else ``cpu``."""
    if device != "auto":
        return device
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "cpu"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    return "gpu" if "GPU" in out else "cpu"


def node_env(spec: Spec) -> dict[str, str]:
    """The variables every node's command needs besides the inherited environment (device-dependent)."""
    env: dict[str, str] = {}
    if spec.device == "cpu":
        if spec.deepspeed:
            env["DS_ACCELERATOR"] = "cpu"  # and CPU not forced: accelerate would skip DeepSpeed
        else:
            env["ACCELERATE_USE_CPU"] = "true"  # the ranks form one gloo group instead of each training alone
    env.update(spec.extra_env)
    return env


def node_command(spec: Spec, node_rank, script_args: Sequence[str], *,
                 launcher: Sequence[str] = ACCELERATE) -> list[str]:
    """The command node ``node_rank`` runs (``node_rank``, the address and the port may be shell variables such
    as ``$SLURM_NODEID``: the SLURM script passes them through for bash to expand on each node). ``{node}`` in a
    recipe argument becomes ``node_rank``."""
    cmd = [*launcher, "--config_file", spec.config_file, "--num_machines", str(spec.nodes),
           "--num_processes", str(spec.nodes * spec.procs_per_node), "--machine_rank", str(node_rank),
           "--main_process_ip", str(spec.master_addr), "--main_process_port", str(spec.master_port)]
    if spec.device == "cpu":
        cmd += ["--mixed_precision", "no"]
    return cmd + [a.replace(NODE, str(node_rank)) for a in script_args]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- N nodes on this machine ---------------------------------------------------------------------------------
def local_launcher() -> list[str]:
    """``accelerate launch`` of this interpreter (the environment the command runs in)."""
    return [sys.executable, "-m", "accelerate.commands.launch"]


def start_node(spec: Spec, node_rank: int, script_args: Sequence[str], *, env: Optional[dict[str, str]] = None,
               **popen) -> subprocess.Popen:
    """Start node ``node_rank`` of ``spec`` on this machine, in a process group of its own (so it can be stopped,
    or killed as a whole node, apart from the others). ``env``: the environment it starts from (default this
    process's); :func:`node_env` goes on top."""
    cmd = node_command(spec, node_rank, script_args, launcher=local_launcher())
    full_env = {**(os.environ if env is None else env), **node_env(spec)}
    return subprocess.Popen(cmd, env=full_env, start_new_session=True, **popen)


def _pump(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        sys.stdout.write(prefix + line)
        sys.stdout.flush()


def run_local(spec: Spec, script_args: Sequence[str]) -> int:
    """Run every node of ``spec`` on this machine until all have exited; the first non-zero exit code, else 0."""
    procs: list[subprocess.Popen] = []

    def forward(signum, frame):
        print(f"[multinode] {signal.Signals(signum).name}: passing SIGTERM to every node", flush=True)
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        pumps = []
        for r in range(spec.nodes):
            print(f"[multinode] node {r}: {shlex.join(node_command(spec, r, script_args))}", flush=True)
            p = start_node(spec, r, script_args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(p)
            pumps.append(threading.Thread(target=_pump, args=(p, f"[node{r}] "), daemon=True))
            pumps[-1].start()
        codes = [p.wait() for p in procs]
        for t in pumps:
            t.join(timeout=5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    print(f"[multinode] exit codes by node: {codes}", flush=True)
    return next((c for c in codes if c != 0), 0)


# -- SLURM ---------------------------------------------------------------------------------------------------
SLURM_NODE = "$SLURM_NODEID"


def _shell_arg(arg: str) -> str:
    """One argument for the per-node bash: quoted, with ``$SLURM_NODEID`` (and the address/port variables) left
    for that bash to expand."""
    if arg.startswith("$") and arg[1:].replace("_", "").isalnum():
        return f'"{arg}"'
    parts = arg.split(SLURM_NODE)
    return f'"{SLURM_NODE}"'.join(shlex.quote(p) if p else "" for p in parts) or "''"


@dataclass
class SlurmSpec:
    job_name: str = "selectrust"
    time: str = "24:00:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    signal_seconds: int = 120
    output: Optional[str] = None
    setup: list[str] = field(default_factory=list)  # shell lines before the launch (module load, venv)
    workdir: Optional[str] = None


def sbatch_script(spec: Spec, slurm: SlurmSpec, script_args: Sequence[str]) -> str:
    """An sbatch script: one task per node, each running :func:`node_command` with its own ``$SLURM_NODEID``,
    node 0's host as the address and a port from the job id. Written, never submitted."""
    sb = [f"--job-name={slurm.job_name}", f"--nodes={spec.nodes}", "--ntasks-per-node=1", f"--time={slurm.time}",
          "--requeue", f"--signal=USR1@{slurm.signal_seconds}"]
    if spec.device == "gpu":
        sb.append(f"--gpus-per-node={spec.procs_per_node}")
    for flag, val in (("partition", slurm.partition), ("account", slurm.account), ("output", slurm.output)):
        if val is not None:
            sb.append(f"--{flag}={val}")
    per_node = Spec(**{**spec.__dict__, "master_addr": "$MASTER_ADDR", "master_port": "$MASTER_PORT"})
    cmd = node_command(per_node, SLURM_NODE, [a.replace(NODE, SLURM_NODE) for a in script_args])
    inner = 'trap "" USR1; exec ' + " ".join(_shell_arg(a) for a in cmd)
    lines = ["#!/bin/bash",
             f"# {spec.nodes} nodes x {spec.procs_per_node} processes ({spec.device}). Generated by "
             f"launch/multinode.py sbatch;",
             "# one srun task per node runs the same accelerate launch with its own $SLURM_NODEID.",
             *[f"#SBATCH {s}" for s in sb],
             "#",
             "# trainer.run_dir: on a file system every node mounts (the usual case), or each node's own disk;",
             "# the run finds out which at start (trainer.run_dir_layout). --kill-on-bad-exit=1: when one node",
             "# fails, Slurm ends the others at once. SIGUSR1 (--signal) goes to the ranks only (the agents ignore",
             "# it): they checkpoint and exit 0; with --requeue the job restarts and resumes (trainer.resume=auto).",
             "set -euo pipefail",
             f"cd {shlex.quote(slurm.workdir or os.getcwd())}",
             *slurm.setup,
             'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
             "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
             f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${{TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-{slurm.signal_seconds}}}",
             *[f"export {k}={shlex.quote(v)}" for k, v in node_env(spec).items()],
             f"srun --kill-on-bad-exit=1 bash -c {shlex.quote(inner)}"]
    return "\n".join(lines) + "\n"


def _with_env(spec: Spec, cmd: Sequence[str]) -> str:
    """``VAR=value ... command`` as one shell line."""
    return shlex.join(cmd) if not node_env(spec) else \
        " ".join(f"{k}={shlex.quote(v)}" for k, v in node_env(spec).items()) + " " + shlex.join(cmd)


# -- command line --------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="launch/multinode.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode, helptext in (("local", "start every node on this machine over 127.0.0.1 and wait"),
                           ("command", "print the command one node runs"),
                           ("sbatch", "print an sbatch script (one task per node)")):
        p = sub.add_parser(mode, help=helptext)
        p.add_argument("--nodes", type=int, default=2)
        p.add_argument("--procs-per-node", type=int, default=1, help="ranks per node (GPUs per node on GPUs)")
        p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto" if mode == "local" else "gpu")
        p.add_argument("--deepspeed", action="store_true", help="DeepSpeed ZeRO-2 (launch/multinode_zero2.yaml)")
        p.add_argument("--config", help="another accelerate config file")
        p.add_argument("--port", type=int, default=None, help="node 0's port (local: a free one; else 29500)")
        if mode == "local":
            p.add_argument("--dry-run", action="store_true", help="print the commands, start nothing")
        if mode == "command":
            p.add_argument("--node-rank", required=True)
            p.add_argument("--master-addr", required=True)
        if mode == "sbatch":
            p.add_argument("--time", default="24:00:00")
            p.add_argument("--partition")
            p.add_argument("--account")
            p.add_argument("--job-name", default="selectrust")
            p.add_argument("--output", help="#SBATCH --output (e.g. logs/%%j.out)")
            p.add_argument("--setup", action="append", default=[], help="a shell line run first (repeatable)")
        p.add_argument("script", nargs=argparse.REMAINDER, help="-- recipes/<x>.py overrides...")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    script = list(args.script[1:] if args.script[:1] == ["--"] else args.script)
    if not script:
        print("error: give the recipe and its overrides after --, e.g. -- recipes/dpo.py trainer.run_dir=runs/x",
              file=sys.stderr)
        return 2
    port = args.port if args.port is not None else (free_port() if args.mode == "local" else 29500)
    spec = Spec(nodes=args.nodes, procs_per_node=args.procs_per_node, master_port=port,
                master_addr=getattr(args, "master_addr", "127.0.0.1"), device=resolve_device(args.device),
                deepspeed=args.deepspeed, config=args.config)
    if args.mode == "command":
        print(_with_env(spec, node_command(spec, args.node_rank, script)))
        return 0
    if args.mode == "sbatch":
        slurm = SlurmSpec(job_name=args.job_name, time=args.time, partition=args.partition, account=args.account,
                          output=args.output, setup=list(args.setup))
        sys.stdout.write(sbatch_script(spec, slurm, script))
        return 0
    if args.dry_run:
        for r in range(spec.nodes):
            print(f"node {r}: {_with_env(spec, node_command(spec, r, script))}")
        return 0
    return run_local(spec, script)


if __name__ == "__main__":
    raise SystemExit(main())
