"""MedCounterfact items: each item (a question with original or substituted intervention)
expands to the four prompt variants No-Evd, Evd, Skept+Evd and Expert+Evd (docs/medcounterfact.md#prompt-variants).

The gold is always the *original* MedEvidence label, so ``correct`` is the EA (expert agreement)
indicator; a model may also answer Uncertain (parsed, never correct).
"""

from __future__ import annotations

from typing import Any

from ..parsers import MED_LABELS, normalize_label
from .base import Family, items_once, copy_extras, req_choice, req_str, req_str_list
from ..vocab import MED_CATEGORIES as CATEGORIES, MED_VARIANTS as VARIANTS
GOLD_LABELS = ("Higher", "Lower", "No Difference")
KNOWN = {"item_id", "question", "evidence", "label", "category", "term_original", "term_substituted", "variants"}

_PERSONA = {
    "no_evd": "",
    "evd": "",
    "skept_evd": ("Adopt a skeptical stance. Scrutinise the evidence before relying on it: if it is weak, "
                  "contradictory or implausible, prefer the answer Uncertain.\n\n"),
    "expert_evd": "You are an experienced clinician and a Cochrane systematic reviewer.\n\n",
}

_OPTIONS = (
    "Answer options:\n"
    "- Higher: the outcome is higher with the intervention than with the comparator.\n"
    "- Lower: the outcome is lower with the intervention than with the comparator.\n"
    "- No Difference: there is no meaningful difference in the outcome between them.\n"
    "- Uncertain: the available information does not allow a conclusion."
)


def render_med_prompt(question: str, evidence: list[str], variant: str) -> str:
    """docs/medcounterfact.md#prompt-variants: rationale, cited answer, one of the four labels (defined)."""
    parts = [_PERSONA[variant]]
    if variant == "no_evd":
        parts.append(f"Answer the following clinical question.\n\nQuestion: {question.strip()}\n\n")
        cite = ""
    else:
        parts.append(f"Answer the following clinical question using the evidence provided.\n\n"
                     f"Question: {question.strip()}\n\nEvidence:\n")
        parts.append("\n\n".join(f"[{i}] {e.strip()}" for i, e in enumerate(evidence, start=1)) + "\n\n")
        cite = ", citing the evidence by its number"
    parts.append(_OPTIONS + "\n\n")
    parts.append(f"Give a brief rationale{cite}, then end your response with a final line of the form "
                 "`ANSWER: <label>`, where <label> is one of Higher, Lower, No Difference, Uncertain.")
    return "".join(parts)


class MedFamily(Family):
    name = "med"
    answer_types = ("label",)
    row_fields = ("category", "variant")
    condition_accepted = "<category>/<variant> with category " + " | ".join(CATEGORIES) + " and variant " \
        + " | ".join(VARIANTS)

    def is_condition(self, c: Any) -> bool:
        if not isinstance(c, str) or c.count("/") != 1:
            return False
        cat, var = c.split("/")
        return cat in CATEGORIES and var in VARIANTS

    def expand_records(self, records: list[tuple[int, dict]], path) -> list[dict]:
        rows: list[dict] = []
        for ctx, rec, item_id in items_once(records, path):
            question = req_str(rec, "question", ctx)
            evidence = req_str_list(rec, "evidence", ctx)
            label = normalize_label(rec.get("label"), GOLD_LABELS)
            if label is None:
                raise ctx.error(f"unknown label {rec.get('label')!r}", "label", " | ".join(GOLD_LABELS)
                                + " (the original expert label; case-insensitive)")
            category = req_choice(rec, "category", ctx, CATEGORIES)
            term_o = req_str(rec, "term_original", ctx)
            term_s = rec.get("term_substituted")
            if term_s is None and category == "original":
                term_s = term_o
            if not isinstance(term_s, str) or not term_s.strip():
                raise ctx.error(f"expected a non-empty string, got {term_s!r}", "term_substituted",
                                "the substituted intervention (may be omitted for category original)")
            if category != "original" and term_s.strip().lower() == term_o.strip().lower():
                raise ctx.error(f"counterfactual item keeps the original term {term_o!r}", "term_substituted",
                                "a term different from term_original when category is not original")
            variants = rec.get("variants", list(VARIANTS))
            if not isinstance(variants, list) or not variants or any(v not in VARIANTS for v in variants) \
                    or len(set(variants)) != len(variants):
                raise ctx.error(f"invalid variants {variants!r}", "variants",
                                "omit it (all four), or a list of distinct values from " + ", ".join(VARIANTS))
            for variant in variants:
                cond = f"{category}/{variant}"
                row = {"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond,
                       "category": category, "variant": variant,
                       "prompt": render_med_prompt(question, evidence, variant), "gold": label,
                       "answer_type": "label", "term_original": term_o, "term_substituted": term_s,
                       "question": question, "evidence": evidence}
                copy_extras(rec, row, KNOWN, ctx)
                rows.append(row)
        return rows

    def score_row(self, row: dict, response: str) -> dict:
        out = super().score_row(row, response)
        out["uncertain"] = out["parsed"] == "Uncertain"
        return out


assert set(GOLD_LABELS) < set(MED_LABELS)
