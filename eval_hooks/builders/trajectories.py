"""Agent trajectories: the input of Taste-Bench fork mining (format in ``eval_hooks/FORMATS.md``).

One JSON line per attempt::

    {"task_id": "django-123", "attempt_id": "a1", "model": "agent-x", "outcome": 1.0,
     "task": "Fix ...", "domain": "engineering",
     "steps": [{"step_id": 1, "role": "assistant", "content": "...", "exit_code": null}, ...]}

``task`` (the task statement) and ``domain`` (engineering | research) are optional: without ``task``
the first step's content is the statement; without ``domain`` the mining config's default applies.
Validation raises :class:`~selectrust.core.io.DataError` naming file, line and field (``steps[3].step_id``)
for: an empty task id, missing/empty steps, a step id that is not an integer, out of order or
repeated, a non-numeric outcome, and an attempt id repeated within a task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..families.base import Ctx, _show, req_str
from selectrust.core.io import read_records

DOMAINS = ("engineering", "research")
_WS = re.compile(r"\s+")


def normalize_ws(text: str) -> str:
    """Whitespace runs collapsed to one space, ends stripped (quote verification compares these)."""
    return _WS.sub(" ", text).strip()


@dataclass
class Step:
    step_id: int
    role: str
    content: str
    exit_code: int | None = None

    def render(self) -> str:
        """One prefix/record line: ``role: content`` (+ the exit code when there is one)."""
        code = "" if self.exit_code is None else f" [exit code {self.exit_code}]"
        return f"{self.role}: {self.content.strip()}{code}"


@dataclass
class Trajectory:
    task_id: str
    attempt_id: str
    model: str
    outcome: float
    task: str
    domain: str | None
    steps: list[Step]
    path: str | None = None
    line: int | None = None
    by_id: dict[int, Step] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.by_id = {s.step_id: s for s in self.steps}

    def where(self) -> str:
        return f"{self.path}, line {self.line}" if self.path else f"attempt {self.attempt_id!r}"


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_trajectory(rec: dict, ctx: Ctx) -> Trajectory:
    task_id = rec.get("task_id")
    if task_id is None or isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or not str(task_id).strip():
        raise ctx.error(f"expected a non-empty task id, got {_show(task_id)}", "task_id", "a non-empty string or an integer")
    attempt_id = rec.get("attempt_id")
    if attempt_id is None or isinstance(attempt_id, bool) or not isinstance(attempt_id, (str, int)) \
            or not str(attempt_id).strip():
        raise ctx.error(f"expected a non-empty attempt id, got {_show(attempt_id)}", "attempt_id",
                        "a non-empty string or an integer, unique within its task")
    model = req_str(rec, "model", ctx, accepted="the agent model's name")
    outcome = rec.get("outcome")
    if isinstance(outcome, bool) or not isinstance(outcome, (int, float)) or outcome != outcome:
        raise ctx.error(f"expected a number, got {_show(outcome)}", "outcome", "the attempt's recorded score (a number)")
    domain = rec.get("domain")
    if domain is not None and domain not in DOMAINS:
        raise ctx.error(f"unknown value {_show(domain)}", "domain", " | ".join(DOMAINS) + " (or absent)")
    steps_raw = rec.get("steps")
    if not isinstance(steps_raw, list) or not steps_raw:
        raise ctx.error(f"missing steps: expected a non-empty list, got {_show(steps_raw)}", "steps",
                        "a list of {step_id, role, content, exit_code?} objects")
    steps: list[Step] = []
    ids: set[int] = set()
    for i, s in enumerate(steps_raw):
        f = f"steps[{i}]"
        if not isinstance(s, dict):
            raise ctx.error(f"expected an object, got {_show(s)}", f, "{step_id, role, content, exit_code?}")
        sid = s.get("step_id")
        if not _int(sid):
            raise ctx.error(f"expected an integer, got {_show(sid)}", f + ".step_id", "an integer, increasing")
        if sid in ids:
            raise ctx.error(f"duplicate step id {sid}", f + ".step_id", "each step id once, increasing")
        if steps and sid < steps[-1].step_id:
            raise ctx.error(f"step id {sid} is out of order (after step {steps[-1].step_id})", f + ".step_id",
                            "step ids in increasing order")
        role = s.get("role")
        if not isinstance(role, str) or not role.strip():
            raise ctx.error(f"expected a non-empty string, got {_show(role)}", f + ".role",
                            "the speaker: assistant, tool, user, ...")
        content = s.get("content")
        if not isinstance(content, str):
            raise ctx.error(f"expected a string, got {_show(content)}", f + ".content", "the step's text")
        code = s.get("exit_code")
        if code is not None and not _int(code):
            raise ctx.error(f"expected an integer or null, got {_show(code)}", f + ".exit_code",
                            "the command's exit code, or absent")
        ids.add(sid)
        steps.append(Step(sid, role.strip(), content, code))
    task = rec.get("task")
    if task is not None and (not isinstance(task, str) or not task.strip()):
        raise ctx.error(f"expected a non-empty string, got {_show(task)}", "task", "the task statement, or absent")
    return Trajectory(str(task_id), str(attempt_id), model, float(outcome), task or steps[0].content, domain, steps,
                      path=None if ctx.path is None else str(ctx.path), line=ctx.line)


def load_trajectories(paths: str | Path | list) -> list[Trajectory]:
    """Read and validate one or more trajectory files (JSONL/Parquet). Raises ``DataError`` before
    anything else happens, naming file, line and field."""
    out: list[Trajectory] = []
    seen: dict[tuple[str, str], str] = {}
    for path in [paths] if isinstance(paths, (str, Path)) else list(paths):
        for line, rec in read_records(path):
            ctx = Ctx(path, line)
            t = parse_trajectory(rec, ctx)
            key = (t.task_id, t.attempt_id)
            if key in seen:
                raise ctx.error(f"attempt {t.attempt_id!r} of task {t.task_id!r} repeats {seen[key]}", "attempt_id",
                                "each attempt id once per task")
            seen[key] = f"{path}, line {line}"
            out.append(t)
    return out
