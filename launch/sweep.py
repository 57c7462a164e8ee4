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

This module does not import torch; it only needs hydra-core for the override grammar.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

RUN_DIR_KEY = "trainer.run_dir"
COMPLETE_MARKER = "run_complete.json"
STATUS_FILE = "launch_status.json"
LOG_FILE = "launch.log"
MAX_NAME_LEN = 100


class SweepError(ValueError):
    """A sweep specification that cannot be expanded; the message says which override and why."""


@dataclass
class Job:
    name: str
    swept: dict[str, str]          # override key (as typed, e.g. "algo.beta" or "+x") -> Hydra value string
    run_dir: Path
    command: list[str] = field(default_factory=list)
    shell: str = ""                # the same command as shell text (accelerate args kept verbatim)

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.swept.items()]


# --------------------------------------------------------------------------------------------------
# Expansion
# --------------------------------------------------------------------------------------------------

def parse_overrides(overrides: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """Split command-line overrides into fixed ones (passed through verbatim) and swept ones.

    Returns ``(fixed, swept)`` where ``swept`` is ``[(key, [value, ...]), ...]`` in command-line order;
    each value is a Hydra-serialised string (quoted where needed), so ``f"{key}={value}"`` is a valid
    override that Hydra parses back to the same value.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    fixed: list[str] = []
    swept: list[tuple[str, list[str]]] = []
    seen: dict[str, str] = {}
    parser = OverridesParser.create()
    for raw in overrides:
        try:
            (ov,) = parser.parse_overrides([raw])
        except HydraException as e:
            raise SweepError(f"override {raw!r}: not valid Hydra override syntax: {e}") from None
        key = ov.get_key_element()
        bare = key.lstrip("+~")
        if bare in seen:
            raise SweepError(f"override {raw!r}: key {bare!r} is already given by {seen[bare]!r}; "
                             f"give each key once (a sweep is written k=a,b,c)")
        seen[bare] = raw
        if bare == RUN_DIR_KEY:
            raise SweepError(f"override {raw!r}: {RUN_DIR_KEY} is set by the sweep "
                             f"(<out>/<name>/<job>); use --out and --name instead")
        if not ov.is_sweep_override():
            fixed.append(raw)
            continue
        if not ov.is_discrete_sweep():
            raise SweepError(f"override {raw!r}: only discrete sweeps are supported "
                             f"(a,b,c | range(start,stop[,step]) | choice(...)), not interval()")
        try:
            values = list(ov.sweep_string_iterator())
        except Exception as e:  # glob() over config groups needs Hydra's config loader
            raise SweepError(f"override {raw!r}: cannot enumerate this sweep here ({e}); "
                             f"list the values explicitly, e.g. {bare}=a,b,c") from None
        if not values:
            raise SweepError(f"override {raw!r}: the sweep has no values")
        if len(set(values)) != len(values):
            raise SweepError(f"override {raw!r}: repeated values {values}; each value must appear once")
        swept.append((key, values))
    return fixed, swept


def _short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Last dotted component of each key, or the whole key where two keys share a last component."""
    last = {k: k.lstrip("+~").rsplit(".", 1)[-1] for k in keys}
    counts: dict[str, int] = {}
    for v in last.values():
        counts[v] = counts.get(v, 0) + 1
    return {k: (last[k] if counts[last[k]] == 1 else k.lstrip("+~")) for k in keys}


def _safe(text: str) -> str:
    """Filesystem-safe token: letters, digits and ``._+-``; Hydra quotes are dropped."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    out = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")
    return out or "empty"


def _digest(parts: Sequence[str], n: int = 8) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:n]


def job_name(swept: dict[str, str], short: dict[str, str]) -> str:
    """Readable, filesystem-safe name from the swept values, e.g. ``beta-0.05__lambda_m-0.25``."""
    if not swept:
        return "base"
    name = "__".join(f"{_safe(short[k])}-{_safe(v)}" for k, v in swept.items())
    if len(name) > MAX_NAME_LEN:
        name = name[: MAX_NAME_LEN - 9].rstrip("-_.") + "-" + _digest([f"{k}={v}" for k, v in swept.items()])
    return name


def expand(overrides: Sequence[str]) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """Cartesian product of the swept overrides (last key varies fastest).

    Returns ``(fixed, combos, names)``: the fixed overrides, one ``{key: value}`` per job, and one
    distinct filesystem-safe name per job.
    """
    fixed, swept = parse_overrides(overrides)
    keys = [k for k, _ in swept]
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*[v for _, v in swept])]
    short = _short_keys(keys)
    names = [job_name(c, short) for c in combos]
    # Sanitising can map different values to one name ('a/b' and 'a-b'): disambiguate by a hash.
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        groups.setdefault(n, []).append(i)
    for n, idx in groups.items():
        if len(idx) > 1:
            for i in idx:
                names[i] = f"{n[: MAX_NAME_LEN - 9]}-{_digest([f'{k}={v}' for k, v in combos[i].items()])}"
    if len(set(names)) != len(names):  # pragma: no cover - would need a sha1 prefix collision
        raise SweepError("could not give the jobs distinct names; shorten or simplify the swept values")
    return fixed, combos, names


def hydra_quote(value: str) -> str:
    """Quote a string for a Hydra override value when it has characters Hydra would interpret."""
    if re.fullmatch(r"[A-Za-z0-9_./:+-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def build_jobs(recipe: str, sweep_name: str, out: str | Path, overrides: Sequence[str], *,
               accelerate_config: Optional[str] = None, accelerate_args: str = "",
               python: str = sys.executable, accelerate_cmd: Sequence[str] | None = None) -> list[Job]:
    """Expand ``overrides`` into jobs with run directories under ``<out>/<sweep_name>/`` and commands.

    Without ``accelerate_config`` a job is ``python <recipe> <overrides>``; with it,
    ``<accelerate_cmd> --config_file <cfg> <accelerate_args> <recipe> <overrides>`` where
    ``accelerate_cmd`` defaults to ``python -m accelerate.commands.launch`` (= ``accelerate launch``
    from the same interpreter). ``accelerate_args`` is one shell string: split for ``command``, kept
    verbatim in ``shell`` so that e.g. ``--machine_rank $SLURM_NODEID`` expands on each node.
    """
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", sweep_name):
        raise SweepError(f"--name {sweep_name!r}: use letters, digits and ._- (it becomes a directory name)")
    fixed, combos, names = expand(overrides)
    sweep_dir = Path(out).expanduser().resolve() / sweep_name
    if accelerate_config is not None:
        launcher = list(accelerate_cmd or [python, "-m", "accelerate.commands.launch"])
        launcher += ["--config_file", accelerate_config]
        try:
            extra = shlex.split(accelerate_args)
        except ValueError as e:
            raise SweepError(f"--accelerate-args {accelerate_args!r}: {e}") from None
    else:
        if accelerate_args.strip():
            raise SweepError("--accelerate-args needs --accelerate-config")
        launcher, extra = [python], []
    jobs = []
    for combo, name in zip(combos, names):
        run_dir = sweep_dir / name
        rest = [recipe, *fixed, *[f"{k}={v}" for k, v in combo.items()],
                f"{RUN_DIR_KEY}={hydra_quote(str(run_dir))}"]
        shell = " ".join(x for x in (shlex.join(launcher), accelerate_args.strip(), shlex.join(rest)) if x)
        jobs.append(Job(name=name, swept=combo, run_dir=run_dir, command=[*launcher, *extra, *rest],
                        shell=shell))
    return jobs


# --------------------------------------------------------------------------------------------------
# Status and summary
# --------------------------------------------------------------------------------------------------

def read_complete(run_dir: Path) -> Optional[dict[str, Any]]:
    path = Path(run_dir) / COMPLETE_MARKER
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def job_status(job: Job) -> str:
    """``done`` (run_complete.json present), ``failed`` (launched, not complete) or ``missing`` (never launched)."""
    if read_complete(job.run_dir) is not None:
        return "done"
    if (job.run_dir / LOG_FILE).exists() or (job.run_dir / STATUS_FILE).exists():
        return "failed"
    return "missing"


def _last_status(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((run_dir / STATUS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def summary_rows(jobs: Sequence[Job]) -> tuple[list[str], list[dict[str, Any]]]:
    """Rows for the summary table and the column order: job, swept keys, status, step, metrics, note."""
    keys: list[str] = []
    for j in jobs:
        for k in j.swept:
            if k not in keys:
                keys.append(k)
    metric_keys: list[str] = []
    rows = []
    for j in jobs:
        status = job_status(j)
        record = read_complete(j.run_dir) or {}
        metrics = record.get("final_metrics") or {}
        if not isinstance(metrics, dict):
            metrics = {}
        for m in metrics:
            if m not in metric_keys:
                metric_keys.append(m)
        note = ""
        if status == "failed":
            last = _last_status(j.run_dir)
            rc = last.get("returncode")
            if rc == 0:
                note = "exited 0 without run_complete.json (stopped early or preempted); re-run to resume"
            elif rc is not None:
                note = f"exit code {rc}"
            note = (note + "; " if note else "") + f"log: {j.run_dir / LOG_FILE}"
        row = {"job": j.name, **{k: j.swept.get(k, "") for k in keys}, "status": status,
               "step": record.get("step", ""), **metrics, "run_dir": str(j.run_dir), "note": note}
        rows.append(row)
    columns = ["job", *keys, "status", "step", *metric_keys, "run_dir", "note"]
    return columns, rows


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if v is None:
        return ""
    return str(v)


def write_summary(jobs: Sequence[Job], sweep_dir: Path, title: str = "",
                  metrics: Optional[Sequence[str]] = None) -> tuple[Path, Path]:
    """Write ``summary.md`` and ``summary.csv`` in ``sweep_dir``; returns their paths.

    ``metrics`` limits the metric columns of the Markdown table (the CSV always has all of them)."""
    columns, rows = summary_rows(jobs)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    csv_path = sweep_dir / "summary.csv"
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c, "")) for c in columns})
    csv_path.write_text(buf.getvalue())

    counts = {s: sum(r["status"] == s for r in rows) for s in ("done", "failed", "missing")}
    md_cols = [c for c in columns if c != "run_dir"]
    if metrics:
        fixed_cols = {"job", "status", "step", "note", *(k for j in jobs for k in j.swept)}
        md_cols = [c for c in md_cols if c in fixed_cols]
        md_cols[-1:-1] = list(metrics)      # requested metrics before "note", in the order given
    esc = lambda s: s.replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"# Sweep {title or sweep_dir.name}", "",
             f"{len(rows)} jobs: {counts['done']} done, {counts['failed']} failed, {counts['missing']} missing. "
             f"Run directories: `{sweep_dir}/<job>`.", "",
             "| " + " | ".join(esc(c) for c in md_cols) + " |",
             "|" + "|".join("---" for _ in md_cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(esc(_fmt(r.get(c, ""))) for c in md_cols) + " |")
    md_path = sweep_dir / "summary.md"
    md_path.write_text("\n".join(lines) + "\n")
    return md_path, csv_path


# --------------------------------------------------------------------------------------------------
# Local launcher
# --------------------------------------------------------------------------------------------------

class _Forwarder:
    """While a job runs, SIGINT/SIGTERM/SIGUSR1 to the sweep become SIGTERM to the job's process group
    (the trainers checkpoint and exit 0 on SIGTERM; under `accelerate launch` the torchrun agent passes
    SIGTERM on to every rank). The sweep then stops launching new jobs."""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None
        self.stopping: Optional[int] = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, h in self._old.items():
            signal.signal(sig, h)

    def _handle(self, signum, frame):
        self.stopping = signum
        print(f"[sweep] got {signal.Signals(signum).name}: stopping the current job (SIGTERM -> checkpoint) "
              f"and launching no more", flush=True)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def run_job(job: Job, *, env: Optional[dict[str, str]] = None, tee: bool = False,
            forwarder: Optional[_Forwarder] = None, cwd: Optional[str] = None) -> int:
    """Run one job to completion, appending its output to ``<run_dir>/launch.log``; returns the exit code."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    log_path = job.run_dir / LOG_FILE
    started = time.time()
    with open(log_path, "ab") as log:
        header = (f"\n===== [sweep] {time.strftime('%Y-%m-%d %H:%M:%S')} launching {job.name}\n"
                  f"===== {shlex.join(job.command)}\n")
        log.write(header.encode())
        log.flush()
        proc = subprocess.Popen(job.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        if forwarder is not None:
            forwarder.proc = proc
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            log.write(line)
            log.flush()
            if tee:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
        rc = proc.wait()
        if forwarder is not None:
            forwarder.proc = None
        log.write(f"===== [sweep] exit code {rc} after {time.time() - started:.1f}s\n".encode())
    status = {"returncode": rc, "started": started, "ended": time.time(), "command": job.command}
    (job.run_dir / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n")
    return rc


def run_local(jobs: Sequence[Job], *, env: Optional[dict[str, str]] = None, tee: bool = False,
              cwd: Optional[str] = None) -> dict[str, str]:
    """Run the jobs one after another, skipping done ones; returns ``{job: outcome}``
    with outcome one of ``skipped`` | ``done`` | ``failed`` | ``not run``."""
    outcome: dict[str, str] = {}
    with _Forwarder() as fwd:
        for i, job in enumerate(jobs, 1):
            if fwd.stopping is not None:
                outcome[job.name] = "not run"
                continue
            if read_complete(job.run_dir) is not None:
                print(f"[sweep] {i}/{len(jobs)} skip {job.name}: already complete "
                      f"({job.run_dir / COMPLETE_MARKER} exists)", flush=True)
                outcome[job.name] = "skipped"
                continue
            print(f"[sweep] {i}/{len(jobs)} run {job.name}  (log: {job.run_dir / LOG_FILE})", flush=True)
            t0 = time.time()
            rc = run_job(job, env=env, tee=tee, forwarder=fwd, cwd=cwd)
            ok = rc == 0 and read_complete(job.run_dir) is not None
            outcome[job.name] = "done" if ok else "failed"
            why = "" if ok else (f" (exit code {rc})" if rc != 0 else " (exit 0 but no run_complete.json)")
            print(f"[sweep] {i}/{len(jobs)} {outcome[job.name]} {job.name} in {time.time() - t0:.1f}s{why}",
                  flush=True)
    return outcome


def _tail(path: Path, n: int = 8) -> str:
    """The last ``n`` lines of a job's log, indented for the sweep's failure message."""
    from eval_hooks.io import tail_file

    return "\n".join("    " + ln for ln in tail_file(path, n).splitlines())


# --------------------------------------------------------------------------------------------------
# SLURM
# --------------------------------------------------------------------------------------------------

@dataclass
class SlurmOptions:
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: str = "24:00:00"
    nodes: int = 1
    gpus_per_node: int = 1
    cpus_per_task: Optional[int] = None
    mem: Optional[str] = None
    max_parallel: Optional[int] = None
    signal_seconds: int = 120
    setup: list[str] = field(default_factory=list)   # shell lines run before the job (module load, venv)
    extra: list[str] = field(default_factory=list)   # extra "#SBATCH ..." option strings, e.g. "--constraint=h100"


def slurm_script(jobs: Sequence[Job], sweep_dir: Path, sweep_name: str, opts: SlurmOptions,
                 manifest: Path, workdir: str, env: Optional[dict[str, str]] = None) -> str:
    """The sbatch array script text (one array index per line of ``manifest``)."""
    n = len(jobs)
    array = f"0-{n - 1}" + (f"%{opts.max_parallel}" if opts.max_parallel else "")
    logs = sweep_dir / "slurm" / "logs"
    sb = [f"--job-name={sweep_name}", f"--array={array}", f"--output={logs}/%A_%a.out",
          f"--nodes={opts.nodes}", "--ntasks-per-node=1", f"--gpus-per-node={opts.gpus_per_node}",
          f"--time={opts.time}", "--requeue", f"--signal=USR1@{opts.signal_seconds}", "--open-mode=append"]
    for flag, val in (("partition", opts.partition), ("account", opts.account), ("qos", opts.qos),
                      ("cpus-per-task", opts.cpus_per_task), ("mem", opts.mem)):
        if val is not None:
            sb.append(f"--{flag}={val}")
    sb += list(opts.extra)
    lines = ["#!/bin/bash", f"# selectrust sweep {sweep_name!r}: {n} jobs. Generated by launch/sweep.py; "
             f"submit with: sbatch {sweep_dir / 'slurm' / 'sweep.sbatch'}"]
    lines += [f"#SBATCH {s}" for s in sb]
    lines += [
        "#",
        "# Preemption / time limit: --signal=USR1@N makes Slurm send SIGUSR1 to the job step N seconds before",
        "# the end; the trainers then finish the current step, save one checkpoint and exit 0. The torchrun",
        "# agent inside `accelerate launch` is started with SIGUSR1 ignored (trap '' USR1), so only the ranks,",
        "# which install their own handler, react to it. This relies on Slurm signalling every process of the",
        "# step, which is what proctrack/cgroup does (check: scontrol show config | grep ProctrackType).",
        "# A run that exits 0 without run_complete.json was stopped early: the task requeues itself and",
        "# resumes from its newest complete checkpoint (trainer.resume=auto). --requeue also lets Slurm",
        "# requeue the task after a preemption (SIGTERM -> checkpoint -> exit 0).",
        "set -uo pipefail",
        f"mkdir -p {shlex.quote(str(logs))}",
        f"cd {shlex.quote(workdir)}",
        *opts.setup,
        *[f"export {k}={shlex.quote(v)}" for k, v in (env or {}).items()],
        f"MANIFEST={shlex.quote(str(manifest))}",
        'LINE=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$MANIFEST")',
        "IFS=$'\\t' read -r JOB RUN_DIR CMD <<< \"$LINE\"",
        'if [ -z "${CMD:-}" ]; then echo "no job at array index $SLURM_ARRAY_TASK_ID in $MANIFEST" >&2; exit 2; fi',
        f'if [ -f "$RUN_DIR/{COMPLETE_MARKER}" ]; then echo "[sweep] skip $JOB: already complete"; exit 0; fi',
        'mkdir -p "$RUN_DIR"',
        'echo "===== [sweep] $(date "+%F %T") job $JOB (array ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}, '
        'restart ${SLURM_RESTART_COUNT:-0}) on $(hostname)" >> "$RUN_DIR/' + LOG_FILE + '"',
        'echo "===== $CMD" >> "$RUN_DIR/' + LOG_FILE + '"',
        "# On SIGTERM (preemption) torchrun passes SIGTERM to the ranks and kills them after this many seconds.",
        f"export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=${{TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-{opts.signal_seconds}}}",
        "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        "export MASTER_PORT=$((20000 + SLURM_ARRAY_TASK_ID % 20000))",
        "# Multi-node: CMD may use $SLURM_NNODES, $SLURM_NODEID, $MASTER_ADDR, $MASTER_PORT (expanded per node).",
        'srun --kill-on-bad-exit=1 bash -c "trap \'\' USR1; exec $CMD" >> "$RUN_DIR/' + LOG_FILE + '" 2>&1',
        "RC=$?",
        'echo "{\\"returncode\\": $RC, \\"ended\\": $(date +%s)}" > "$RUN_DIR/' + STATUS_FILE + '"',
        f'if [ "$RC" -eq 0 ] && [ ! -f "$RUN_DIR/{COMPLETE_MARKER}" ]; then',
        '  echo "[sweep] $JOB stopped before the end (checkpoint saved); requeueing" >> "$RUN_DIR/' + LOG_FILE + '"',
        '  scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"',
        "fi",
        "exit $RC",
    ]
    return "\n".join(lines) + "\n"


def write_slurm(jobs: Sequence[Job], sweep_dir: Path, sweep_name: str, opts: SlurmOptions, *,
                workdir: Optional[str] = None, env: Optional[dict[str, str]] = None,
                write: bool = True) -> tuple[Path, str, str]:
    """Write ``<sweep_dir>/slurm/jobs.tsv`` (index, job, run_dir, command), ``jobs.json`` and
    ``sweep.sbatch``. Returns ``(script_path, script_text, manifest_text)``; nothing is submitted."""
    slurm_dir = sweep_dir / "slurm"
    manifest = slurm_dir / "jobs.tsv"
    rows = []
    for j in jobs:
        cmd = j.shell or shlex.join(j.command)
        for part in (j.name, str(j.run_dir), cmd):
            if "\t" in part or "\n" in part:
                raise SweepError(f"job {j.name}: tabs and newlines cannot go into the SLURM manifest: {part!r}")
        rows.append(f"{j.name}\t{j.run_dir}\t{cmd}")
    manifest_text = "\n".join(rows) + "\n"
    script = slurm_script(jobs, sweep_dir, sweep_name, opts, manifest, workdir or os.getcwd(), env)
    path = slurm_dir / "sweep.sbatch"
    if write:
        slurm_dir.mkdir(parents=True, exist_ok=True)
        manifest.write_text(manifest_text)
        (slurm_dir / "jobs.json").write_text(json.dumps(
            [{"index": i, "job": j.name, "overrides": j.overrides, "run_dir": str(j.run_dir),
              "command": j.command} for i, j in enumerate(jobs)], indent=2) + "\n")
        path.write_text(script)
        path.chmod(0o755)
    return path, script, manifest_text


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------

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
