"""Taste-Bench decision forks (docs/taste.md#scoring): each item is asked in the stored (seeded) order and in its
exact reverse, with the correct letter recomputed for each presentation."""

from __future__ import annotations

from typing import Any

from .base import Family, items_once, copy_extras, req_choice, req_str

CONDITIONS = ("seeded", "reversed")
CONSTRUCTIONS = ("parallel", "detour")
DOMAINS = ("engineering", "research")
KNOWN = {"item_id", "task", "prefix", "candidate_a", "candidate_b", "label", "construction", "domain", "horizon"}


def render_taste_prompt(task: str, prefix: str | list[str], first: str, second: str) -> str:
    if isinstance(prefix, list):
        prefix = "\n".join(f"[step {i}] {s.strip()}" for i, s in enumerate(prefix, start=1))
    return (
        "You are reviewing work in progress at a decision point.\n\n"
        f"Task:\n{task.strip()}\n\n"
        f"Trajectory so far:\n{prefix.strip() or '(nothing yet)'}\n\n"
        "Two candidate directions for the next step:\n\n"
        f"A: {first.strip()}\n\n"
        f"B: {second.strip()}\n\n"
        "Which direction is more likely to lead to a successful outcome? Reason briefly, then end your "
        "response with a final line of the form `ANSWER: X`, where X is A or B."
    )


class TasteFamily(Family):
    name = "taste"
    answer_types = ("choice",)
    row_fields = ("construction", "domain")
    condition_accepted = " | ".join(CONDITIONS)

    def is_condition(self, c: Any) -> bool:
        return c in CONDITIONS

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:
        rows: list[dict] = []
        for ctx, rec, item_id in items_once(records, path):
            task = req_str(rec, "task", ctx)
            prefix = rec.get("prefix")
            if not (isinstance(prefix, str) or (isinstance(prefix, list) and all(isinstance(s, str) for s in prefix))):
                raise ctx.error(f"expected a string or a list of strings, got {prefix!r}"[:200], "prefix",
                                "the shared trajectory up to the fork: a string or a list of step strings")
            a = req_str(rec, "candidate_a", ctx)
            b = req_str(rec, "candidate_b", ctx)
            if a.strip() == b.strip():
                raise ctx.error("candidate_b is identical to candidate_a", "candidate_b", "two different candidates")
            label = req_choice(rec, "label", ctx, ("A", "B"))
            construction = req_choice(rec, "construction", ctx, CONSTRUCTIONS)
            domain = req_choice(rec, "domain", ctx, DOMAINS)
            horizon = rec.get("horizon")
            if isinstance(horizon, (dict, list)):
                raise ctx.error(f"expected a scalar or null, got {horizon!r}"[:200], "horizon",
                                "a horizon level (string or number) or null")
            for cond, first, second, gold in (("seeded", a, b, label),
                                              ("reversed", b, a, "B" if label == "A" else "A")):
                row = {"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond,
                       "prompt": render_taste_prompt(task, prefix, first, second), "gold": gold,
                       "answer_type": "choice", "construction": construction, "domain": domain,
                       "horizon": horizon, "task": task}
                copy_extras(rec, row, KNOWN, ctx)
                rows.append(row)
        return rows

    def score_row(self, row: dict, response: str) -> dict:
        out = super().score_row(row, response)
        out["choice"] = out["parsed"]
        return out
