"""Expand a Hydra-syntax sweep into jobs; run them one after another, or write a SLURM array script.

    python launch/sweep.py --recipe recipes/dpo.py --name beta_lam \\
        algo.beta=0.05,0.1 algo.lambda_m=0.25,0.5 trainer.max_steps=300
    python launch/sweep.py ... --accelerate-config launch/ddp.yaml --accelerate-args "--num_processes 8"
    python launch/sweep.py ... --launcher slurm --slurm-gpus 8 --slurm-time 12:00:00   # writes, never submits
    python launch/sweep.py ... --summarize-only       # rebuild summary.md/csv from what is on disk

Sweep syntax is Hydra's own (parsed with Hydra's override parser): ``k=a,b,c``, ``k=range(0,10,2)``,
``k=choice(a,b)``, quoted values keep their commas (``k='x, y',z``). Overrides without a sweep are
passed to every job unchanged. Each job gets ``trainer.run_dir=<out>/<name>/<job>``, where ``<job>`` is
built from the swept values only (``beta-0.05__lambda_m-0.25``), so extending a sweep later keeps the
names, and therefore the finished runs, of the jobs already there.

A job is *done* when its run directory holds ``run_complete.json`` (written by the trainer at the end
of a successful run); re-running a sweep skips done jobs, and unfinished jobs resume from their newest
complete checkpoint (``trainer.resume=auto`` is the trainers' default). The local launcher streams each
job's output to ``<run_dir>/launch.log``, keeps going past failures, and finally writes
``<out>/<name>/summary.md`` and ``summary.csv`` (one row per job: swept values, status
done/failed/missing, and the final metrics from ``run_complete.json``).

This is the command line; the parts are in ``launch/sweeper/`` (the grid, job names, the local and SLURM
launchers, the summary). The sweep does not import torch; it only needs hydra-core for the override grammar.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

from launch.sweeper.grid import build_jobs
from launch.sweeper.jobs import LOG_FILE, SweepError, read_complete
from launch.sweeper.local import run_local
from launch.sweeper.slurm import SlurmOptions, write_slurm
from launch.sweeper.summary import write_summary


def _tail(path: Path, n: int = 8) -> str:
    """The last ``n`` lines of a job's log, indented for the sweep's failure message."""
    from selectrust.core.io import tail_file

    return "\n".join("    " + ln for ln in tail_file(path, n).splitlines())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch/sweep.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Overrides use Hydra syntax: k=a,b | k=range(0,4) | k=choice(x,y) | k='v, with commas'.")
    p.add_argument("--recipe", required=True, help="recipe entry point, e.g. recipes/dpo.py")
    p.add_argument("--name", required=True, help="sweep name (directory under --out)")
    p.add_argument("--out", default="sweeps", help="parent directory of sweeps (default: sweeps)")
    p.add_argument("--launcher", choices=("local", "slurm"), default="local")
    p.add_argument("--accelerate-config", default=None,
                   help="run each job with `accelerate launch --config_file <this>` (default: plain python)")
    p.add_argument("--accelerate-args", default="",
                   help="extra `accelerate launch` arguments as one string; write it with = because it starts with --: --accelerate-args=\"--num_processes 8\"")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment variable for every job (repeatable), e.g. ACCELERATE_USE_CPU=true")
    p.add_argument("--dry-run", action="store_true", help="print the commands (and skips); run and write nothing")
    p.add_argument("--tee", action="store_true", help="local: also echo each job's output to this terminal")
    p.add_argument("--metrics", default=None,
                   help="comma-separated metrics for the summary.md table (default: all; summary.csv has all)")
    p.add_argument("--summarize-only", action="store_true",
                   help="run nothing; (re)write summary.md/csv from the run directories (e.g. after a SLURM sweep)")
    s = p.add_argument_group("slurm (--launcher slurm)")
    s.add_argument("--slurm-partition")
    s.add_argument("--slurm-account")
    s.add_argument("--slurm-qos")
    s.add_argument("--slurm-time", default="24:00:00")
    s.add_argument("--slurm-nodes", type=int, default=1)
    s.add_argument("--slurm-gpus", type=int, default=1, help="GPUs per node")
    s.add_argument("--slurm-cpus", type=int, default=None, help="--cpus-per-task")
    s.add_argument("--slurm-mem", default=None)
    s.add_argument("--slurm-max-parallel", type=int, default=None, help="array throttle (%%N)")
    s.add_argument("--slurm-signal-seconds", type=int, default=120,
                   help="send SIGUSR1 this many seconds before the time limit (default 120)")
    s.add_argument("--slurm-setup", action="append", default=[], metavar="LINE",
                   help="shell line run before each job (repeatable), e.g. 'source .venv/bin/activate'")
    s.add_argument("--slurm-extra", action="append", default=[], metavar="OPTION",
                   help="extra #SBATCH option (repeatable), e.g. --constraint=h100")
    p.add_argument("overrides", nargs="*", help="Hydra overrides; comma lists / range() / choice() are swept")
    return p


def _parse_env(items: Sequence[str]) -> dict[str, str]:
    env = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise SweepError(f"--env {item!r}: expected KEY=VALUE with KEY a shell variable name")
        env[k] = v
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        env = _parse_env(args.env)
        slurm = args.launcher == "slurm"
        accelerate_cmd = ["accelerate", "launch"] if slurm else None
        python = "python" if slurm else sys.executable
        jobs = build_jobs(args.recipe, args.name, args.out, args.overrides,
                          accelerate_config=args.accelerate_config,
                          accelerate_args=args.accelerate_args,
                          python=python, accelerate_cmd=accelerate_cmd)
    except SweepError as e:
        print(f"sweep: error: {e}", file=sys.stderr)
        return 2
    sweep_dir = Path(args.out).expanduser().resolve() / args.name
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    print(f"[sweep] {args.name}: {len(jobs)} job(s) under {sweep_dir}", flush=True)

    if args.summarize_only:
        md, csv_path = write_summary(jobs, sweep_dir, args.name, metrics)
        print(md.read_text(), end="")
        print(f"[sweep] wrote {md} and {csv_path}")
        return 0

    if slurm:
        opts = SlurmOptions(partition=args.slurm_partition, account=args.slurm_account, qos=args.slurm_qos,
                            time=args.slurm_time, nodes=args.slurm_nodes, gpus_per_node=args.slurm_gpus,
                            cpus_per_task=args.slurm_cpus, mem=args.slurm_mem,
                            max_parallel=args.slurm_max_parallel, signal_seconds=args.slurm_signal_seconds,
                            setup=args.slurm_setup, extra=args.slurm_extra)
        try:
            path, script, manifest = write_slurm(jobs, sweep_dir, args.name, opts, env=env,
                                                 write=not args.dry_run)
        except SweepError as e:
            print(f"sweep: error: {e}", file=sys.stderr)
            return 2
        if args.dry_run:
            print(f"[sweep] dry run: would write {path}:\n{script}\n[sweep] manifest:\n{manifest}", end="")
        else:
            print(f"[sweep] wrote {path} (manifest {path.parent / 'jobs.tsv'}); not submitted. Submit with:\n"
                  f"    sbatch {path}\nthen, when it has run:\n"
                  f"    python launch/sweep.py --recipe {args.recipe} --name {args.name} --out {args.out} "
                  f"--summarize-only {shlex.join(args.overrides)}")
        return 0

    if args.dry_run:
        for j in jobs:
            done = read_complete(j.run_dir) is not None
            prefix = "# skip (complete): " if done else ""
            env_prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            print(prefix + (env_prefix + " " if env_prefix else "") + shlex.join(j.command))
        return 0

    outcome = run_local(jobs, env=env, tee=args.tee)
    md, csv_path = write_summary(jobs, sweep_dir, args.name, metrics)
    print(md.read_text(), end="")
    print(f"[sweep] wrote {md} and {csv_path}")
    failed = [j for j in jobs if outcome.get(j.name) == "failed"]
    for j in failed:
        print(f"[sweep] FAILED {j.name}: log {j.run_dir / LOG_FILE}; last lines:\n{_tail(j.run_dir / LOG_FILE)}")
    counts = {k: sum(v == k for v in outcome.values()) for k in ("done", "skipped", "failed", "not run")}
    print("[sweep] " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if any(v == "not run" for v in outcome.values()):
        return 130
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
