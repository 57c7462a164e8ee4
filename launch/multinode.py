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
``[node<R>]``, forwards SIGINT/SIGTERM/SIGUSR1 to every node (the trainers checkpoint and exit). A rank's one-line
``error: ...`` is printed once, on stderr, without torch elastic's ``ChildFailedError`` report, and the launcher exits
2 when a rank refused its input, else with the first non-zero exit code of a node (0 when all succeeded). When a
node fails, the others get ``--stop-after`` seconds to end by themselves (a rank that lost its peer says so in one
line), then SIGTERM, then SIGKILL.

Bad arguments (node counts, ranks, ports out of range, a port in use, a recipe or config that does not exist) are
one line ``error: ...``, exit 2, before anything starts, in every mode (launch/README.md#several-nodes). This module
does not import torch.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

LAUNCH = Path(__file__).resolve().parent
CONFIGS = {False: "launch/multinode.yaml", True: "launch/multinode_zero2.yaml"}
NODE = "{node}"  # in a recipe argument: the node's rank (a node-local run dir per node on one machine)
ACCELERATE = ("accelerate", "launch")
INPUT_EXIT = 2  # selectrust.core.errors.INPUT_EXIT (not imported: this script runs from a checkout as it is)
MAX_NODES = 1024          # --nodes of command and sbatch
MAX_LOCAL_NODES = 16      # --nodes of local: each node is an accelerate launch (an agent and its ranks) on this machine
MAX_PROCS_PER_NODE = 64   # --procs-per-node: ranks (GPUs) per node


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


# What torch elastic's agent (inside ``accelerate launch``) prints when a rank fails or the agent is stopped: its
# log lines, and a traceback of the launcher's own code ending in ChildFailedError (with a boxed summary) or
# SignalException. The rank's own output (its ``error: ...`` line, or a bug's traceback) says it better.
_ELASTIC_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/elastic/\S+\]")
_CHILD_FAILED = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"
_SIGNALLED = "torch.distributed.elastic.multiprocessing.api.SignalException"
_BOX_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")  # torchrun --tee's prefix of a rank's lines
ERROR_PREFIX = "error: "  # the error contract's one line (selectrust/core/errors.py, eval_hooks/cli_contract.py)


class NodeOutput:
    """One node's merged output, line by line: passes the ranks' lines on, keeps back the contract's ``error: ...``
    lines (the launcher prints each once at the end) and drops the agent's own failure report, reading from it
    the ranks' exit codes. A traceback is held until its last line shows whose it is (a rank's is passed on)."""

    def __init__(self) -> None:
        self.errors: list[str] = []      # the ranks' one-line errors, in order
        self.rank_codes: list[int] = []  # the failed ranks' exit codes, from the agent's report
        self._traceback: Optional[list[str]] = None
        self._box = -1                   # inside ChildFailedError's box: the number of ==== lines seen

    def feed(self, line: str) -> list[str]:
        """The lines to print for ``line`` (without newlines; none while a traceback is held or dropped)."""
        text = line.rstrip("\n")
        if self._box >= 0:
            m = _BOX_EXITCODE.match(text)
            if m:
                self.rank_codes.append(int(m.group(1)))
            if text.startswith("====="):
                self._box += 1
                if self._box == 2:
                    self._box = -1
            return []
        if self._traceback is not None:
            if not text or text[0].isspace():
                self._traceback.append(text)
                return []
            held, self._traceback = self._traceback, None
            if text.startswith(_CHILD_FAILED):
                self._box = 0
                return []
            if text.startswith(_SIGNALLED):
                return []
            return [*held, *self.feed(text)]
        if _ELASTIC_LOG.match(text):
            return []
        if text.startswith("Traceback (most recent call last):"):
            self._traceback = [text]
            return []
        core = _RANK_PREFIX.sub("", text)
        if core.startswith(ERROR_PREFIX):
            if core not in self.errors:
                self.errors.append(core)
            return []
        return [text]

    def close(self) -> list[str]:
        """What is still held at the end of the output (a traceback cut short)."""
        held, self._traceback = self._traceback or [], None
        return held

    def code(self, returncode: int) -> int:
        """The node's exit code as the error contract sees it: 2 when one of its ranks refused its input (exited 2:
        the agent itself exits 1 for any failed rank), else the agent's."""
        return INPUT_EXIT if returncode != 0 and INPUT_EXIT in self.rank_codes else returncode


def _pump(proc: subprocess.Popen, prefix: str, node: NodeOutput) -> None:
    for line in proc.stdout:
        for out in node.feed(line):
            sys.stdout.write(prefix + out + "\n")
        sys.stdout.flush()
    for out in node.close():
        sys.stdout.write(prefix + out + "\n")
    sys.stdout.flush()


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the agent starts its ranks in sessions of their own: the node's process group
    alone misses them)."""
    try:
        import psutil
    except ImportError:
        return [pid]
    try:
        root = psutil.Process(pid)
        return [pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return [pid]


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


STOP_AFTER_S = 10.0  # default of --stop-after: how long the other nodes get to end by themselves after one failed
KILL_AFTER_S = 45.0  # then SIGTERM; after this much longer, SIGKILL (torch elastic's own shutdown timeout is 30 s)


def run_local(spec: Spec, script_args: Sequence[str], *, stop_after: float = STOP_AFTER_S) -> int:
    """Run every node of ``spec`` on this machine until all have exited. When a node fails, the others get
    ``stop_after`` seconds to end by themselves (a rank notices a lost peer at its next collective), then SIGTERM,
    and :data:`KILL_AFTER_S` later SIGKILL: no node waits for a dead one. (A SIGINT/SIGTERM/SIGUSR1 to the launcher
    is passed on as SIGTERM and never escalated: the trainers checkpoint and exit.) Prints the ranks' one-line
    errors once each, on stderr (those of ranks that refused their input when there are such), and returns 2 when
    a rank refused its input, else the first non-zero exit code of a node, else 0."""
    procs: list[subprocess.Popen] = []
    outputs: list[NodeOutput] = []
    state = {"terminated": None, "stopping": False}

    def terminate(reason: str, *, escalate: bool) -> None:
        alive = [r for r, p in enumerate(procs) if p.poll() is None]
        if alive:
            print(f"[multinode] {reason}: passing SIGTERM to node{'s' if len(alive) > 1 else ''} "
                  f"{', '.join(map(str, alive))}", flush=True)
        for r in alive:
            try:
                os.killpg(procs[r].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if escalate:  # a stop asked for with a signal is the trainers' to finish (a checkpoint save), never killed
            state["terminated"] = time.monotonic()

    def forward(signum, frame):
        terminate(signal.Signals(signum).name, escalate=False)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        pumps = []
        for r in range(spec.nodes):
            print(f"[multinode] node {r}: {shlex.join(node_command(spec, r, script_args))}", flush=True)
            p = start_node(spec, r, script_args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(p)
            outputs.append(NodeOutput())
            pumps.append(threading.Thread(target=_pump, args=(p, f"[node{r}] ", outputs[-1]), daemon=True))
            pumps[-1].start()
        failed_at, killed = None, False
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if failed_at is None:
                failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
                if failed:
                    failed_at = now
                    print(f"[multinode] node {failed[0][0]} failed (its launcher exited {failed[0][1]}); stopping the "
                          f"other nodes unless they end within {stop_after:g} s", flush=True)
            elif not state["stopping"] and now - failed_at >= stop_after:
                state["stopping"] = True
                terminate(f"node {next(r for r, p in enumerate(procs) if p.returncode not in (None, 0))} failed",
                          escalate=True)
            if state["terminated"] is not None and not killed and now - state["terminated"] >= KILL_AFTER_S:
                alive = [r for r, p in enumerate(procs) if p.poll() is None]
                print(f"[multinode] nodes {alive} still running {KILL_AFTER_S:g} s after SIGTERM: SIGKILL",
                      flush=True)
                for r in alive:
                    _signal(_tree(procs[r].pid), signal.SIGKILL)
                killed = True
            time.sleep(0.1)
        for t in pumps:
            t.join(timeout=5)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    codes = [out.code(p.returncode) for out, p in zip(outputs, procs)]
    print(f"[multinode] exit codes by node: {codes}", flush=True)
    refused = [out for out, c in zip(outputs, codes) if c == INPUT_EXIT]
    lines: list[str] = []
    for out in refused or outputs:
        lines += [e for e in out.errors if e not in lines]
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return INPUT_EXIT if refused else next((c for c in codes if c != 0), 0)


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
        p.add_argument("--nodes", type=int, default=2,
                       help=f"1 to {MAX_LOCAL_NODES if mode == 'local' else MAX_NODES} (default 2)")
        p.add_argument("--procs-per-node", type=int, default=1,
                       help=f"ranks per node (GPUs per node on GPUs), 1 to {MAX_PROCS_PER_NODE}")
        p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto" if mode == "local" else "gpu")
        p.add_argument("--deepspeed", action="store_true", help="DeepSpeed ZeRO-2 (launch/multinode_zero2.yaml)")
        p.add_argument("--config", help="another accelerate config file")
        p.add_argument("--port", type=int, default=None,
                       help="node 0's port, 1 to 65535 (local: a free one, and one in use is refused; else 29500)")
        if mode == "local":
            p.add_argument("--dry-run", action="store_true", help="print the commands, start nothing")
            p.add_argument("--stop-after", type=float, default=STOP_AFTER_S, metavar="S",
                           help="when a node fails, the seconds the others get to end by themselves before SIGTERM "
                                f"(default {STOP_AFTER_S:g})")
        if mode == "command":
            p.add_argument("--node-rank", required=True,
                           help="0 to --nodes minus 1, or a shell variable ($SLURM_NODEID)")
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


_SHELL_VARIABLE = re.compile(r"^\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)$")


def port_in_use(port: int) -> Optional[str]:
    """Why ``port`` cannot be node 0's on this machine (a process listens on it, or binding it is not allowed), or
    ``None``. Binds 0.0.0.0 with SO_REUSEADDR, as the rendezvous store does: that fails for any listener on the port,
    on any address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError as e:
            return f"is in use on this machine ({e.strerror})" if e.errno == errno.EADDRINUSE else \
                f"cannot be bound on this machine ({e.strerror})"
    return None


def refusal(args: argparse.Namespace, script: Sequence[str]) -> Optional[str]:
    """The one line (without ``error: ``) that refuses these arguments before anything starts, or ``None``."""
    local = args.mode == "local"
    top = MAX_LOCAL_NODES if local else MAX_NODES
    if not 1 <= args.nodes <= top:
        more = (" for local (the nodes all run on this machine; for a cluster write the script with sbatch, or each "
                "node's command with command)") if local else ""
        return f"--nodes must be between 1 and {top}{more} (got {args.nodes})"
    if not 1 <= args.procs_per_node <= MAX_PROCS_PER_NODE:
        return (f"--procs-per-node must be between 1 and {MAX_PROCS_PER_NODE} (ranks per node; "
                f"got {args.procs_per_node})")
    if args.port is not None and not 1 <= args.port <= 65535:
        hint = "; leave it out for a free one" if local else ""
        return f"--port must be between 1 and 65535 (got {args.port}){hint}"
    if args.mode == "command":
        rank = str(args.node_rank)
        try:
            ok = 0 <= int(rank) < args.nodes
        except ValueError:
            ok = bool(_SHELL_VARIABLE.match(rank))
        if not ok:
            return (f"--node-rank must be between 0 and {args.nodes - 1} (--nodes {args.nodes} minus 1), or a shell "
                    f"variable such as $SLURM_NODEID (got {rank!r})")
    if local and not (math.isfinite(args.stop_after) and args.stop_after >= 0):
        return f"--stop-after must be a number of seconds, 0 or more (got {args.stop_after})"
    if args.config is not None and not Path(args.config).is_file():
        return f"--config {args.config}: no such file (in {os.getcwd()})"
    recipe = script[0]
    if not Path(recipe).is_file():
        what = "is a directory, not a recipe script" if Path(recipe).is_dir() else "does not exist"
        return (f"the recipe {recipe} {what} (in {os.getcwd()}); give the recipe script and its overrides after --, "
                f"e.g. -- recipes/dpo.py trainer.run_dir=runs/x")
    if local and not args.dry_run and args.port is not None:
        why = port_in_use(args.port)
        if why:
            return f"--port {args.port} {why}; leave --port out for a free one, or choose another"
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    script = list(args.script[1:] if args.script[:1] == ["--"] else args.script)
    if not script:
        print("error: give the recipe and its overrides after --, e.g. -- recipes/dpo.py trainer.run_dir=runs/x",
              file=sys.stderr)
        return INPUT_EXIT
    why = refusal(args, script)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return INPUT_EXIT
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
    return run_local(spec, script, stop_after=args.stop_after)


if __name__ == "__main__":
    raise SystemExit(main())
