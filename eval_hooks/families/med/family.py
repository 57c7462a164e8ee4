"""MedCounterfact items: each item (a question with original or substituted intervention)
expands to the four prompt variants No-Evd, Evd, Skept+Evd and Expert+Evd (docs/medcounterfact.md#prompt-variants).

The gold is always the *original* MedEvidence label, so ``correct`` is the EA (expert agreement)
indicator; a model may also answer Uncertain (parsed, never correct).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from selectrust.core.io import read_records
from ...parsers import MED_LABELS, normalize_label
from selectrust.core.settings import choice_type, setting
from ..base import Family, items_once, copy_extras, req_choice, req_str, req_str_list
from selectrust.conditions import MED_CATEGORIES as CATEGORIES, MED_FORMATS, MED_MITIGATIONS, MED_VARIANTS as VARIANTS
from .items import build_items
from .metrics import label_prob_metrics, med_metrics, pipeline_metrics
from .pipelines import KeywordJudge, ModelJudge, run_pipelines
from .prompts import render_med_prompt
from .report import report_section

GOLD_LABELS = ("Higher", "Lower", "No Difference")
KNOWN = {"item_id", "question", "evidence", "label", "category", "term_original", "term_substituted", "variants"}

MedFormat = choice_type("MedFormat", MED_FORMATS, __name__)
MedMitigation = choice_type("MedMitigation", MED_MITIGATIONS, __name__)
MedJudge = choice_type("MedJudge", ("keyword", "self"), __name__)


@dataclass
class MedSettings:
    """MedCounterfact's settings: the section ``eval.med`` of the ``eval`` config group."""

    formats: list[MedFormat] = setting(list(MED_FORMATS), "MedCounterfact answer formats: mc (multiple choice) and/or "
                                                          "free (free text mapped to a label by the judge).")
    mitigations: list[MedMitigation] = setting(list(MED_MITIGATIONS), "MedCounterfact mitigation pipelines run besides "
                                                                      "the base one (evidence variants only): detect | prior.")
    label_probs: bool = setting(True, "Score P(label) before generation with the backend's score_labels (base "
                                      "pipeline, mc).")
    generate: bool = setting(True, "Generate answers (formats, mitigations, judge). false: score the label probabilities "
                                   "only, with no generation (needs label_probs=true; formats, mitigations and judge "
                                   "are not used, and metrics.json holds the label-probability summaries only).")
    judge: MedJudge = setting("keyword", "Free-text label and awareness judge: keyword (deterministic heuristic) | self "
                                         "(the evaluated model with fixed judge prompts).")
    prompt_token_budget: Optional[int] = setting(None, "Prompt tokens above which the refine chain walks the evidence "
                                                       "in chunks (None = model positions - max_new_tokens - 16).")
    max_refine_chunks: int = setting(8, "At most this many evidence chunks per refine chain (the rest of the evidence "
                                        "is not read).")
    max_questions: Optional[int] = setting(None, "Evaluate only the first N MedEvidence questions (all their items).")
    seed: int = setting(0, "Term-draw seed when eval.path is a raw MedEvidence file (items are then built in memory).")


class MedFamily(Family):
    name = "med"
    answer_types = ("label",)
    row_fields = ("category", "variant")
    settings = MedSettings  # the section eval.med
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

    def backend_needs(self, settings: MedSettings) -> dict[str, tuple[str, str]]:
        if not settings.label_probs:
            return {}
        return {"label_scores": ("MedCounterfact's label probabilities ('ANSWER: <label>' is several tokens)",
                                 f"{self.setting_key('label_probs')}=false")}

    def eval_rows(self, path, settings: MedSettings | None = None) -> list[dict]:
        """Med rows (validated before any model loads). A raw MedEvidence file is built into items in memory
        (verified substitutions only, seed ``eval.med.seed``); ``eval.med.max_questions`` keeps the first N
        questions with all their items."""
        med = self.own_settings(settings)
        if not med.generate and not med.label_probs:
            raise ValueError("eval.med.generate=false scores the label probabilities only: it needs "
                             "eval.med.label_probs=true")
        path = Path(path)
        records = read_records(path)
        if all("sources" in r and "answer" in r for _, r in records):  # raw MedEvidence
            items, _ = build_items(records, seed=med.seed, path=str(path))
            rows = self.expand_records(list(enumerate(items, start=1)), f"{path} (built)")
        else:
            rows = self.load_records(records, path)
        if med.max_questions is not None:
            keep: list = []
            for r in rows:
                q = r.get("question_id", r["item_id"])
                if q not in keep and len(keep) < med.max_questions:
                    keep.append(q)
            rows = [r for r in rows if r.get("question_id", r["item_id"]) in keep]
        return rows

    def metrics(self, item_scores, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        return med_metrics(item_scores)

    def headline(self, metrics: dict[str, Any]) -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for rate in ("ea_rate", "uncertain_rate"):
            for cat, per_var in metrics[rate].items():
                flat.update({f"{rate}.{cat}.{var}": v for var, v in per_var.items()})
        return flat

    def report_section(self, metrics, item_scores, out_dir, title):
        return report_section(metrics, item_scores, out_dir, title)

    def run(self, backend, rows: Sequence[dict], out_dir, *, step: int | None = None, max_new_tokens: int | None = None,
            title: str | None = None, settings: Any = None, **generic: Any) -> dict:
        """The Med run (:mod:`.pipelines`): every row in the answer formats, base and mitigation pipelines,
        with label probabilities and the refine chain for long evidence; then the atomic write of
        ``out_dir`` as for every family. ``settings`` is ``eval.med`` (:class:`MedSettings`: formats, mitigations,
        label_probs, judge, prompt_token_budget, max_refine_chunks, generate: false scores the label probabilities
        only and ``metrics.json`` holds only their summaries); None = its defaults. The generic run's sampling and
        bootstrap options (``generic``) do not apply. ``max_new_tokens`` None = :meth:`default_max_new_tokens`
        (the generic default)."""
        settings = self.own_settings(settings)
        max_new_tokens = self.budget(rows, max_new_tokens)
        budget = settings.prompt_token_budget
        if budget is None:  # None = model positions - max_new_tokens - 16
            positions = getattr(getattr(getattr(backend, "model", None), "config", None), "max_position_embeddings",
                                None)
            budget = positions - max_new_tokens - 16 if positions else None
        generate = settings.generate
        options = {"formats": list(settings.formats), "mitigations": list(settings.mitigations),
                   "label_probs": settings.label_probs, "max_refine_chunks": settings.max_refine_chunks,
                   "generate": generate}
        described = {"backend": getattr(backend, "name", type(backend).__name__), "max_new_tokens": max_new_tokens,
                     "formats": options["formats"], "mitigations": options["mitigations"],
                     "judge": settings.judge, "prompt_token_budget": budget,
                     "max_refine_chunks": settings.max_refine_chunks, "generate": generate}
        judge = ModelJudge(backend) if settings.judge == "self" else KeywordJudge()
        records = run_pipelines(backend, rows, judge=judge, max_new_tokens=max_new_tokens,
                                prompt_settings=getattr(backend, "prompt_settings", None),
                                prompt_token_budget=budget, **options)
        summary = pipeline_metrics(records) if generate else {
            **label_prob_metrics(records), "n_refined": sum(r["refined"] for r in records), "n_records": len(records)}
        metrics = {"family": self.name, **summary, "eval_settings": described}
        if step is not None:
            metrics["step"] = step
        self.publish(records, metrics, out_dir, title=title or "MedCounterfact evaluation")
        return metrics


assert set(GOLD_LABELS) < set(MED_LABELS)
