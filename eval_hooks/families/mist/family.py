"""MIST quartets (SCOPE, docs/scope.md#benchmark): the input already holds one row per (item, condition).

Checks: the row fields of docs/scope.md#benchmark; every item has exactly the four conditions, once each; answer type,
gold, wrong value, choices and (when given) question are identical across an item's four rows; the
wrong value is a valid answer that differs from the gold.
"""

from __future__ import annotations

from typing import Any

from ...parsers import ANSWER_TYPES as _ANSWER_TYPES
from ...parsers import answer_type as _answer_type
from ...parsers import answer_budget, answer_flags, answer_status, parse_row_answer, row_answer_matches
from ..base import Ctx, Family, check_choices, check_gold, req_choice, req_item_id, req_str
from selectrust.conditions import MIST_CONDITIONS as CONDITIONS
from .metrics import mist_metrics, quality_warnings
from .report import report_section

ANSWER_TYPES = ("multiple_choice", "numeric", "boolean", "short_text", "open_answer")
MATCHED_FIELDS = ("answer_type", "gold", "gold_aliases", "wrong_value", "choices", "question")


class MistFamily(Family):
    name = "mist"
    answer_types = ANSWER_TYPES
    condition_accepted = " | ".join(CONDITIONS)
    knowledge_labels = True  # metrics by_knowledge (metrics.knowledge_split); clean rows estimate the labels

    def is_condition(self, c: Any) -> bool:
        return c in CONDITIONS

    def default_max_new_tokens(self, rows) -> int:
        """The budget of the rows' answer formats (:func:`eval_hooks.parsers.answer_budget`, the one mining
        uses): 32 when every row is short_text, 512 when any row reasons to a final ``ANSWER:`` line."""
        return answer_budget({r["answer_type"] for r in rows})

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:
        rows: list[dict] = []
        by_item: dict[str, dict[str, tuple[int, dict, dict]]] = {}
        first_line: dict[str, int] = {}
        row_ids: dict[str, int] = {}
        for line, rec in records:
            ctx = Ctx(path, line)
            item_id = req_item_id(rec, ctx)
            cond = req_choice(rec, "condition", ctx, CONDITIONS)
            req_str(rec, "prompt", ctx)
            at = req_choice(rec, "answer_type", ctx, ANSWER_TYPES)
            choices = check_choices(rec, ctx)
            gold = check_gold(rec.get("gold"), at, ctx, choices=choices)
            wrong = check_gold(rec.get("wrong_value"), at, ctx, field="wrong_value", choices=choices)
            aliases = _check_aliases(rec, at, ctx)
            alt = rec.get("gold_alt_names")
            if alt is not None and not (isinstance(alt, list) and all(isinstance(a, str) for a in alt)
                                        and _answer_type(at).aliases):
                raise ctx.error(f"invalid gold_alt_names {str(alt)[:200]!r}", "gold_alt_names",
                                "a list of strings (other names of the gold, e.g. GeoNames' alternate names), with "
                                "an answer type that has aliases")
            if _answer_type(at).same_answer(gold, wrong):
                raise ctx.error(f"wrong_value {rec['wrong_value']!r} equals the gold {rec['gold']!r}",
                                "wrong_value", "a valid answer different from the gold")
            if wrong in aliases:
                alias = rec["gold_aliases"][aliases.index(wrong)]
                raise ctx.error(f"gold alias {alias!r} equals the wrong_value {rec['wrong_value']!r}", "gold_aliases",
                                "other names of the gold, none of them the wrong value")
            conds = by_item.setdefault(item_id, {})
            first_line.setdefault(item_id, line)
            if cond in conds:
                raise ctx.error(f"duplicate condition {cond!r} for item {item_id!r} (first on line "
                                f"{conds[cond][0]})", "condition",
                                "each item exactly once per condition: " + ", ".join(CONDITIONS))
            norm = {"answer_type": at, "gold": gold, "gold_aliases": aliases, "wrong_value": wrong,
                    "choices": choices, "question": rec.get("question")}
            conds[cond] = (line, rec, norm)
            row = dict(rec)
            row["item_id"] = item_id
            rid = rec.get("row_id", f"{item_id}/{cond}")
            if not isinstance(rid, str) or not rid:
                raise ctx.error(f"expected a non-empty string, got {rid!r}", "row_id", "a non-empty string, or omit it")
            if rid in row_ids:
                raise ctx.error(f"duplicate row_id {rid!r} (first on line {row_ids[rid]})", "row_id", "unique row ids")
            row_ids[rid] = line
            row["row_id"] = rid
            rows.append(row)

        for item_id, conds in by_item.items():
            missing = [c for c in CONDITIONS if c not in conds]
            if missing:
                raise Ctx(path, first_line[item_id]).error(
                    f"item {item_id!r} lacks condition(s) {', '.join(missing)}", "condition",
                    "each item exactly once per condition: " + ", ".join(CONDITIONS))
            ref_cond = CONDITIONS[0]
            ref_line, _, ref = conds[ref_cond]
            for cond in CONDITIONS[1:]:
                line, rec, norm = conds[cond]
                for f in MATCHED_FIELDS:
                    if norm[f] != ref[f]:
                        raise Ctx(path, line).error(
                            f"{f} {rec.get(f)!r} of item {item_id!r} ({cond}) disagrees with "
                            f"{conds[ref_cond][1].get(f)!r} on line {ref_line} ({ref_cond})", f,
                            "the same question, answer type, gold, wrong value and choices on all 4 rows of an item")
        return rows

    def score_row(self, row: dict, response: str) -> dict:
        """Parsed with the row's candidates (short_text: gold, ``gold_aliases``, wrong value); ``answer_status``:
        candidate | outside | no_answer | hedged (short_text: two candidates offered as alternatives, ``parsed``
        null; ``eval_hooks.parsers.answer_status``)."""
        parsed = parse_row_answer(response, row)
        out = {k: v for k, v in row.items() if k not in ("prompt", "messages")}
        out.update(response=response, parsed=parsed, parse_ok=parsed is not None,
                   correct=row_answer_matches(parsed, row), answer_status=answer_status(parsed, row, response))
        out.update(answer_flags(response, parsed, row))  # short_text: fuzzy_match (issue 59)
        return out

    def validate_rows(self, records, path):
        rows = super().validate_rows(records, path)
        self.expand_records(list(zip((l for l, _ in records), rows)), path)  # quartet checks
        return rows

    def load_records(self, records, path):
        """MIST items *are* rows (one per item and condition): always expanded, with the full quartet checks."""
        return self.expand_records(records, path)

    def metrics(self, item_scores, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return mist_metrics(item_scores, n_boot=n_boot, seed=seed)

    def quality_warnings(self, metrics, baseline):
        """Fewer than 30 clean-correct items (SC2W's denominator), or a format-compliance drop of more than 20
        points against ``baseline`` (``families/mist/metrics.py``)."""
        return quality_warnings(metrics, dict(baseline) if baseline else None)

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        flat: dict[str, Any] = {f"accuracy.{c}": metrics["accuracy"][c] for c in CONDITIONS}
        flat["overall"] = metrics["overall"]
        flat["sc2w"] = metrics["sc2w"]
        flat["situated_faithfulness"] = metrics.get("situated_faithfulness")
        return flat

    def report_section(self, metrics, item_scores, out_dir, title):
        return report_section(metrics, item_scores, out_dir, title)


def _check_aliases(rec: dict, answer_type: str, ctx: Ctx) -> list[str]:
    """``gold_aliases`` (answer types with ``aliases``, e.g. short_text): other names of the gold, e.g. ``["Kiev"]``
    for ``"Kyiv"``; normalised."""
    v = rec.get("gold_aliases")
    if v is None:
        return []
    ok = isinstance(v, list) and all(isinstance(a, str) and a.strip() for a in v)
    if not _answer_type(answer_type).aliases or not ok:
        with_aliases = " | ".join(name for name, t in _ANSWER_TYPES.items() if t.aliases)
        raise ctx.error(f"invalid gold_aliases {v!r}", "gold_aliases",
                        f"a list of non-empty strings, with answer_type {with_aliases} only")
    return [check_gold(a, answer_type, ctx, field="gold_aliases") for a in v]

