"""MedCounterfact evaluation from a config: rows (from an items file, or built in memory from a raw
MedEvidence file) and the pipelines of :mod:`eval_hooks.med_eval` (formats, label probabilities,
awareness, mitigations, refine chain for long evidence)."""

from __future__ import annotations

from pathlib import Path


def _is_medevidence(records) -> bool:
    return all("sources" in r and "answer" in r for _, r in records)


def load_med_rows(eval_cfg) -> list[dict]:
    """Med rows for ``eval_cfg`` (validated before any model loads). A raw MedEvidence file is built into
    items in memory (verified substitutions only, seed ``eval.med.seed``); ``eval.med.max_questions``
    keeps the first N questions with all their items; ``eval.max_rows`` then applies as usual."""
    from eval_hooks import load_rows
    from eval_hooks.builders.medcounterfact import build_items
    from eval_hooks.families import get_family
    from eval_hooks.io import read_records

    from trainer.data.train_data import keep_whole_items, resolve_data_path

    med = eval_cfg.med
    path = Path(resolve_data_path(eval_cfg.path))
    records = read_records(path)
    if _is_medevidence(records):
        items, _ = build_items(records, seed=med.seed, path=str(path))
        rows = get_family("med").expand_records(list(enumerate(items, start=1)), f"{path} (built)")
    else:
        rows = load_rows("med", path)
    if med.max_questions is not None:
        keep: list = []
        for r in rows:
            q = r.get("question_id", r["item_id"])
            if q not in keep and len(keep) < med.max_questions:
                keep.append(q)
        rows = [r for r in rows if r.get("question_id", r["item_id"]) in keep]
    return keep_whole_items(rows, eval_cfg.max_rows)


def run_med(backend, rows: list[dict], eval_cfg, out_dir, *, prompt_settings=None, step: int | None = None) -> dict:
    """Run the Med pipelines on ``rows`` and write ``out_dir``; returns the metrics (recipe and epoch ends)."""
    from eval_hooks.med_eval import KeywordJudge, ModelJudge, run_med_eval

    med = eval_cfg.med
    budget = med.prompt_token_budget
    if budget is None:
        positions = getattr(getattr(getattr(backend, "model", None), "config", None), "max_position_embeddings", None)
        budget = positions - eval_cfg.max_new_tokens - 16 if positions else None
    judge = ModelJudge(backend) if med.judge == "self" else KeywordJudge()
    settings = {"backend": getattr(backend, "name", type(backend).__name__), "max_new_tokens": eval_cfg.max_new_tokens,
                "formats": list(med.formats), "mitigations": list(med.mitigations), "judge": med.judge,
                "prompt_token_budget": budget, "max_refine_chunks": med.max_refine_chunks}
    metrics = run_med_eval(backend, rows, out_dir, judge=judge, extra=settings, step=step, formats=list(med.formats),
                           mitigations=list(med.mitigations), label_probs=med.label_probs,
                           max_new_tokens=eval_cfg.max_new_tokens, prompt_settings=prompt_settings,
                           prompt_token_budget=budget, max_refine_chunks=med.max_refine_chunks)
    return metrics
