"""Taste-Bench decision forks (docs/taste.md#scoring): each item is asked in the stored (seeded) order and in its exact
reverse, with the correct letter recomputed for each presentation.

Long inputs follow the published runner: when a rendered prompt exceeds ``max_prompt_tokens``
(default 65,536), the prefix keeps its first ``HEAD_LINES`` (25) lines, an omission marker and the
longest tail of lines that fits (rows record ``omitted_lines``). Tokens are counted with
``count_tokens`` (a tokenizer's length function); the default is an estimate of one token per 4 UTF-8
bytes, so pass a tokenizer (``eval.prompt_tokenizer``, ``expand --tokenizer``) for an exact cap."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..base import Family, _show, items_once, copy_extras, req_choice, req_str
from selectrust.core.settings import setting
from selectrust.conditions import TASTE_CONDITIONS as CONDITIONS
from .metrics import taste_metrics
from .report import report_section

CONSTRUCTIONS = ("parallel", "detour")
DOMAINS = ("engineering", "research")
KNOWN = {"item_id", "task", "prefix", "candidate_a", "candidate_b", "label", "construction", "domain", "horizon",
         "task_id"}
MAX_PROMPT_TOKENS = 65536
HEAD_LINES = 25


def approx_tokens(text: str) -> int:
    """Token estimate used when no tokenizer is given: one token per 4 UTF-8 bytes, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def omission_marker(n: int) -> str:
    return f"[... {n} line{'s' if n != 1 else ''} omitted ...]"


def prefix_text(prefix: str | list[str]) -> str:
    if isinstance(prefix, list):
        return "\n".join(f"[step {i}] {s.strip()}" for i, s in enumerate(prefix, start=1))
    return prefix


def fit_prompt(task: str, prefix: str | list[str], first: str, second: str, *,
               max_prompt_tokens: int = MAX_PROMPT_TOKENS,
               count_tokens: Callable[[str], int] = approx_tokens) -> tuple[str, int]:
    """``(prompt, omitted_lines)``: the full prompt if it fits, else the prefix's first 25 lines, the
    omission marker and the longest tail of prefix lines that fits (0 tail lines if none fits)."""
    text = prefix_text(prefix)
    prompt = render_taste_prompt(task, text, first, second)
    lines = text.split("\n")
    if len(lines) <= HEAD_LINES or count_tokens(prompt) <= max_prompt_tokens:
        return prompt, 0
    head, body = lines[:HEAD_LINES], lines[HEAD_LINES:]

    def with_tail(k: int) -> str:  # keep the last k of the body's lines
        kept = head + [omission_marker(len(body) - k)] + (body[len(body) - k:] if k else [])
        return render_taste_prompt(task, "\n".join(kept), first, second)

    lo, hi = 0, len(body) - 1  # the largest k that fits (k = len(body) is the full prompt: too long)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(with_tail(mid)) <= max_prompt_tokens:
            lo = mid
        else:
            hi = mid - 1
    return with_tail(lo), len(body) - lo


def render_taste_prompt(task: str, prefix: str | list[str], first: str, second: str) -> str:
    prefix = prefix_text(prefix)
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


@dataclass
class TasteSettings:
    """Taste's settings: the keys ``eval.max_prompt_tokens`` and ``eval.prompt_tokenizer`` (at the top of the
    ``eval`` group, where they were before families declared their settings)."""

    max_prompt_tokens: int = setting(MAX_PROMPT_TOKENS, "taste only: prompt-token cap; longer prompts keep the prefix's "
                                                        "first 25 lines, an omission marker and the longest tail of "
                                                        "lines that fits (the published runner's rule).")
    prompt_tokenizer: Optional[str] = setting(None, "taste only: tokenizer (local dir or 'tiny') that counts tokens for "
                                                    "the cap; None = estimate of 4 UTF-8 bytes per token.")


class TasteFamily(Family):
    name = "taste"
    answer_types = ("choice",)
    row_fields = ("construction", "domain")
    condition_accepted = " | ".join(CONDITIONS)
    settings, flat_settings = TasteSettings, True

    def __init__(self, max_prompt_tokens: int = MAX_PROMPT_TOKENS,
                 count_tokens: Callable[[str], int] = approx_tokens):
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self.max_prompt_tokens, self.count_tokens = int(max_prompt_tokens), count_tokens

    def configured(self, *, max_prompt_tokens: int | None = None,
                   count_tokens: Callable[[str], int] | None = None) -> "TasteFamily":
        return TasteFamily(max_prompt_tokens or self.max_prompt_tokens, count_tokens or self.count_tokens)

    def is_condition(self, c: Any) -> bool:
        return c in CONDITIONS

    def check_settings(self, settings: TasteSettings) -> None:
        if settings.max_prompt_tokens < 1:
            raise ValueError(f"{self.setting_key('max_prompt_tokens')} must be >= 1, got {settings.max_prompt_tokens}")

    def eval_rows(self, path, settings: TasteSettings | None = None) -> list[dict]:
        """``eval.max_prompt_tokens`` caps the prompts, counted by the tokenizer ``eval.prompt_tokenizer``
        (None: the 4-bytes-per-token estimate)."""
        settings = self.own_settings(settings)
        count = None
        if settings.prompt_tokenizer:
            from selectrust.model import load_tokenizer

            tok = load_tokenizer(settings.prompt_tokenizer)
            count = lambda text: len(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        return self.configured(max_prompt_tokens=settings.max_prompt_tokens, count_tokens=count).load(path)

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
            task_id = rec.get("task_id")
            if task_id is not None and (isinstance(task_id, bool) or not isinstance(task_id, (str, int))
                                        or not str(task_id).strip()):
                raise ctx.error(f"expected a non-empty string or an integer, got {_show(task_id)}", "task_id",
                                "the source task's id (items of one task_id share a fold), or absent")
            horizon = rec.get("horizon")
            if isinstance(horizon, (dict, list)):
                raise ctx.error(f"expected a scalar or null, got {horizon!r}"[:200], "horizon",
                                "a horizon level (string or number) or null")
            for cond, first, second, gold in (("seeded", a, b, label),
                                              ("reversed", b, a, "B" if label == "A" else "A")):
                prompt, omitted = fit_prompt(task, prefix, first, second, max_prompt_tokens=self.max_prompt_tokens,
                                             count_tokens=self.count_tokens)
                row = {"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond,
                       "prompt": prompt, "gold": gold, "omitted_lines": omitted,
                       "answer_type": "choice", "construction": construction, "domain": domain,
                       "horizon": horizon, "task": task}
                if task_id is not None:
                    row["task_id"] = str(task_id)
                copy_extras(rec, row, KNOWN, ctx)
                rows.append(row)
        return rows

    def score_row(self, row: dict, response: str) -> dict:
        out = super().score_row(row, response)
        out["choice"] = out["parsed"]
        return out

    def metrics(self, item_scores, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return taste_metrics(item_scores)

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        flat: dict[str, Any] = {k: metrics[k] for k in ("seeded", "reversed", "strict", "mean", "average")}
        flat.update({f"per_cell.{c}.strict": v["strict"] for c, v in metrics["per_cell"].items()})
        flat.update({f"paired_outcomes.{k}": v for k, v in metrics["paired_outcomes"].items()})
        return flat

    def report_section(self, metrics, item_scores, out_dir, title):
        return report_section(metrics, item_scores, out_dir, title)
