"""Box2 workflow items (docs/box2.md#conditions): one item expands to the five frozen conditions.

``none`` (no workflow), ``good`` (all good steps), ``bad`` (``bad_continuations["0"]``), and for every
change point k in ``bad_continuations``: ``partial_k`` (first k good steps, then nothing) and
``mixed_k`` (first k good steps + ``bad_continuations[k]``). As in the paper, k = 0 is a change point
too (partial_0 shows no workflow, mixed_0 is the bad workflow), so S_P and S_M average over the same
k set the paper uses (e.g. {0, 2, 4, 6, 8}).
"""

from __future__ import annotations

import re
from typing import Any

from ..base import (Ctx, Family, items_once, answer_instruction, check_choices, check_gold, copy_extras, render_choices,
                   req_choice, req_str, req_str_list)
from selectrust.conditions import BOX2_CURVE_REGIMES, BOX2_FIXED_REGIMES, BOX2_REGIMES as REGIMES
from .metrics import box2_metrics
from .report import report_section

ANSWER_TYPES = ("multiple_choice", "numeric", "boolean")
_COND = re.compile(rf"^({'|'.join(BOX2_FIXED_REGIMES)}|({'|'.join(BOX2_CURVE_REGIMES)})_(\d+))$")
KNOWN = {"item_id", "task", "answer_type", "gold", "good_steps", "bad_continuations", "choices", "prompt_style"}
# ``plain`` (opt-in per item): the task, then one step per line, nothing else. For tiny models (the toy
# task of the CPU demo), where the full template would multiply sequence lengths several times.
PROMPT_STYLES = ("full", "plain")


def render_box2_prompt(task: str, workflow: list[str] | None, answer_type: str, choices: Any = None,
                       *, style: str = "full") -> str:
    if style == "plain":
        return "\n".join([task.strip(), *(s.strip() for s in workflow or [])])
    parts = [f"Task:\n{task.strip()}"]
    if choices is not None:
        parts.append("Options:\n" + render_choices(choices))
    if workflow:
        steps = "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(workflow, start=1))
        parts.append("A workflow for this task (a sequence of goals):\n" + steps)
    parts.append("Solve the task step by step. " + answer_instruction(answer_type, choices))
    return "\n\n".join(parts)


class Box2Family(Family):
    name = "box2"
    answer_types = ANSWER_TYPES
    row_fields = ("regime", "k", "task")
    condition_accepted = "none | good | bad | partial_<k> | mixed_<k>"

    def is_condition(self, c: Any) -> bool:
        return isinstance(c, str) and _COND.match(c) is not None

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:
        rows: list[dict] = []
        for ctx, rec, item_id in items_once(records, path):
            task = req_str(rec, "task", ctx)
            at = req_choice(rec, "answer_type", ctx, ANSWER_TYPES)
            choices = check_choices(rec, ctx)
            check_gold(rec.get("gold"), at, ctx, choices=choices)
            good = req_str_list(rec, "good_steps", ctx)
            bad = _bad_continuations(rec, ctx, len(good))
            style = req_choice(rec, "prompt_style", ctx, PROMPT_STYLES) if "prompt_style" in rec else "full"

            conditions: list[tuple[str, str, int | None, list[str] | None]] = [
                ("none", "none", None, None), ("good", "good", None, good), ("bad", "bad", None, bad[0])]
            for k in sorted(bad):
                conditions.append((f"partial_{k}", "partial", k, good[:k]))
            for k in sorted(bad):
                conditions.append((f"mixed_{k}", "mixed", k, good[:k] + bad[k]))
            for cond, regime, k, workflow in conditions:
                row = {"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond, "regime": regime,
                       "k": k, "task": task, "prompt": render_box2_prompt(task, workflow, at, choices, style=style),
                       "gold": rec["gold"], "answer_type": at, "workflow": workflow or []}
                if choices is not None:
                    row["choices"] = choices
                copy_extras(rec, row, KNOWN, ctx)
                rows.append(row)
        return rows

    def metrics(self, item_scores, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return box2_metrics(item_scores)

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        flat: dict[str, Any] = {f"score.{k}": v for k, v in metrics["score"].items()}
        flat.update({f"delta.{k}": v for k, v in metrics["delta"].items()})
        return flat

    def report_section(self, metrics, item_scores, out_dir, title):
        return report_section(metrics, item_scores, out_dir, title)


def _bad_continuations(rec: dict, ctx: Ctx, n_good: int) -> dict[int, list[str]]:
    accepted = ('an object {"0": [steps], "<k>": [steps], ...}: change point k (0 <= k <= number of good '
                'steps, "0" required) -> the steps that follow the first k good steps')
    v = rec.get("bad_continuations")
    if not isinstance(v, dict) or not v:
        raise ctx.error(f"expected a non-empty object, got {v!r}"[:200], "bad_continuations", accepted)
    out: dict[int, list[str]] = {}
    for key, steps in v.items():
        if steps is None:  # Parquet struct columns fill keys other rows have with null
            continue
        try:
            k = int(str(key).strip())
        except ValueError:
            raise ctx.error(f"change point {key!r} is not an integer", "bad_continuations", accepted) from None
        if not 0 <= k <= n_good:
            raise ctx.error(f"change point {k} outside 0..{n_good} (the number of good steps)",
                            "bad_continuations", accepted)
        if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s.strip() for s in steps):
            raise ctx.error(f"continuation at change point {k} must be a non-empty list of strings",
                            "bad_continuations", accepted)
        if k in out:
            raise ctx.error(f"change point {k} given twice", "bad_continuations", accepted)
        out[k] = list(steps)
    if 0 not in out:
        raise ctx.error('no continuation for change point "0" (the bad workflow)', "bad_continuations", accepted)
    return out
