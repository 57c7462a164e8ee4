"""Distillation views (docs/taste.md#distillation-trainer): what each example of the trainer is, read from a data file.

A *view* is one presentation of a fork item (``seeded`` or ``reversed``): the student's prompt (exactly
the evaluation prompt), the teacher's prompt (the same plus a demonstration naming the right candidate)
and the gold letter. A *completion* is reasoning ids (ending in ``algo.reasoning_end``) followed by the
ids of ``algo.answer_prefix``; the *choice position* is the position after the completion, where the
logits of ``algo.choice_tokens`` (A, B) are read (:func:`choice_token_ids`). An OPSD view
(:func:`load_mist_views`) is a MIST item, with no choice position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from selectrust.conditions import CLEAN, MISLEADING, SEEDED
from selectrust.core.io import DataError, read_records
from eval_hooks.builders.taste_toy import compact_demonstration, compact_prompt
from eval_hooks.families import get_family
from eval_hooks import load_rows
from selectrust.core.errors import ConfigError

__all__ = ["ForkView", "load_fork_views", "load_mist_views", "load_views", "has_choice_position", "check_task_disjoint",
           "choice_token_ids"]


@dataclass
class ForkView:
    view_id: str
    item_id: str
    task_id: str | None
    condition: str
    gold: str                       # "A" | "B"
    student_prompt: str
    teacher_prompt: str
    row: dict                       # the evaluation row (taste family), for scoring
    reasoning: list[int] = field(default_factory=list)  # teacher-written reasoning ids (stage 1)

    @property
    def cell(self) -> str:
        if "construction" not in self.row:  # a MIST view (load_mist_views): one cell per condition
            return self.condition
        return f"{self.row['construction']}_{self.row['domain']}"


def load_fork_views(path, *, style: str, demonstration: str, require_task_id: bool = True) -> list[ForkView]:
    """Views of every item of a taste file (validated by the taste family: errors name file, line, field).

    ``style``: ``taste`` (the evaluation prompt of ``eval_hooks/families/taste/family.py``; the teacher's prompt
    adds a blank line and ``demonstration.format(right=..., wrong=...)``) or ``compact`` (the toy's
    one-line prompt, ``eval_hooks/builders/taste_toy.py``)."""
    records = read_records(path)
    rows = get_family("taste").expand_records(records, path)
    by_id = {str(rec["item_id"]): (line, rec) for line, rec in records}
    views = []
    for row in rows:
        line, rec = by_id[row["item_id"]]
        if require_task_id and row.get("task_id") is None:
            raise DataError("missing task_id: distillation trains and tests on task-disjoint folds", path=path,
                            line=line, field="task_id", accepted="a non-empty string or an integer")
        a, b = rec["candidate_a"], rec["candidate_b"]
        first, second = (a, b) if row["condition"] == SEEDED else (b, a)
        right, wrong = (a, b) if rec["label"] == "A" else (b, a)
        if style == "compact":
            student = compact_prompt(rec["task"], first, second)
            teacher = f"{student} {compact_demonstration(right, wrong, row['gold'])}"
        else:
            student = row["prompt"]
            teacher = f"{student}\n\n{demonstration.format(right=right.strip(), wrong=wrong.strip())}"
        views.append(ForkView(view_id=row["row_id"], item_id=row["item_id"], task_id=row.get("task_id"),
                              condition=row["condition"], gold=row["gold"], student_prompt=student,
                              teacher_prompt=teacher, row=row))
    return views


def load_mist_views(path) -> list[ForkView]:
    """OPSD views of a MIST quartet file (SCOPE's on-policy self-distillation baseline): one per item, the
    student's prompt = the item's ``misleading`` row prompt, the teacher's = its ``clean`` row prompt.

    The rows come from the same loader as the matched evaluation (``eval_hooks.load_rows`` on
    ``trainer.data.train_data.resolve_data_path(path)``, so registered data sources work), with its quartet
    checks (errors name file, line and field); the prompts are the rows' ``prompt`` strings, which the
    trainer renders with the same :func:`selectrust.generation.prompts.render_prompt` settings as evaluation. A MIST
    view has no choice position: ``gold`` is the item's answer (not a letter)."""
    from trainer.data.train_data import resolve_data_path  # deferred: imports numpy

    rows = load_rows("mist", resolve_data_path(str(path)))
    by_item: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_item.setdefault(row["item_id"], {})[row["condition"]] = row
    views = []
    for item_id, conds in by_item.items():
        mis, clean = conds[MISLEADING], conds[CLEAN]
        views.append(ForkView(view_id=mis["row_id"], item_id=item_id, task_id=None, condition=MISLEADING,
                              gold=str(mis["gold"]), student_prompt=mis["prompt"], teacher_prompt=clean["prompt"],
                              row=mis))
    if not views:
        raise DataError("no MIST item: OPSD needs at least one quartet", path=path)
    return views


def has_choice_position(style: str) -> bool:
    """Whether views of ``data.prompt_style`` end in an A/B choice position (and an answer prefix): every style
    but ``mist``, whose OPSD views are scored on the student's own answer tokens alone."""
    return style != "mist"


def load_views(path, *, style: str, demonstration: str) -> list[ForkView]:
    """:func:`load_mist_views` for ``style=mist``, else :func:`load_fork_views`."""
    if style == "mist":
        return load_mist_views(path)
    return load_fork_views(path, style=style, demonstration=demonstration)


def check_task_disjoint(train: Sequence[ForkView], test_path, test: Sequence[ForkView]) -> None:
    """Raise a DataError naming the test file, line and field when a test item shares a task with training."""
    train_tasks = {v.task_id for v in train}
    shared = {v.item_id for v in test if v.task_id in train_tasks}
    if shared:
        for line, rec in read_records(test_path):
            if str(rec["item_id"]) in shared:
                raise DataError(f"task_id {rec['task_id']!r} is also in the training fold ({len(shared)} item(s) "
                                f"share a task): the folds must be task-disjoint", path=test_path, line=line,
                                field="task_id", accepted="task ids that no training item has")


def choice_token_ids(tokenizer, tokens: Sequence[str], key: str = "algo.choice_tokens") -> list[int]:
    """The single token id of each choice string; a ConfigError naming ``key`` when one is not one token."""
    out = []
    for t in tokens:
        ids = tokenizer(t, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ConfigError(f"{key}: {t!r} is {len(ids)} tokens for this tokenizer; each choice must be one token")
        out.append(int(ids[0]))
    return out
