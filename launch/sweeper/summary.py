"""The sweep's summary: one row per job (swept values, status, step, final metrics, a note for failures),
written as ``summary.md`` and ``summary.csv`` in the sweep directory."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Optional, Sequence

from launch.sweeper.jobs import LOG_FILE, STATUS_FILE, Job, job_status, read_complete


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
