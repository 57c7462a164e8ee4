"""GRPO's prompt rows: loaded from a prompt file or an evaluation family's items (:func:`load_rl_prompts`) and
checked against ``data.max_prompt_len`` before any generation (:func:`check_prompt_lengths`). The batch source that
draws them is ``trainer/rl/rollout.py`` (which also exports both names)."""

from __future__ import annotations

from typing import Sequence

from selectrust.core.io import DataError, read_records
from selectrust.generation.prompts import PromptSettings, render_prompt
from eval_hooks.parsers import normalize_gold


def load_rl_prompts(path: str, *, family: str | None = None, conditions: Sequence[str] = ()) -> list[dict]:
    """RL prompt rows ``{item_id, prompt, gold, answer_type, [choices]}``.

    ``family=None``: a JSONL/Parquet file of such rows (or a registered data source, ``selectrust/core/data_sources.py``).
    ``family='box2'`` (or any eval family): an items file expanded by ``eval_hooks.load_rows``, keeping
    only ``conditions`` (e.g. ``["bad"]``: train on bad-workflow inputs, docs/box2.md#outcome-rl).
    """
    from trainer.data.train_data import resolve_data_path  # deferred: imports numpy

    real = resolve_data_path(path)
    if family:
        from eval_hooks import load_rows

        rows = load_rows(family, real)
        if conditions:
            rows = [r for r in rows if r["condition"] in set(conditions)]
        out = [{**r, "item_id": r["row_id"]} for r in rows]
        if not out:
            raise DataError(f"no rows with conditions {list(conditions)} in this {family} file", path=real,
                            field="condition")
        return out
    out, seen = [], {}
    for line, rec in read_records(real):
        for f in ("prompt", "gold", "answer_type"):
            if rec.get(f) is None:
                raise DataError("missing field", path=real, line=line, field=f,
                                accepted="{item_id, prompt, gold, answer_type[, choices]}")
        if not isinstance(rec["prompt"], str) or not rec["prompt"].strip():
            raise DataError("empty prompt", path=real, line=line, field="prompt", accepted="a non-empty string")
        if normalize_gold(rec["gold"], rec["answer_type"], choices=rec.get("choices")) is None:
            raise DataError(f"gold {rec['gold']!r} is not a valid {rec['answer_type']} answer", path=real,
                            line=line, field="gold")
        item_id = str(rec.get("item_id", f"line{line}"))
        if item_id in seen:
            raise DataError(f"duplicate item_id {item_id!r} (first on line {seen[item_id]})", path=real,
                            line=line, field="item_id")
        seen[item_id] = line
        out.append({**rec, "item_id": item_id, "_line": line, "_path": real})
    return out


def check_prompt_lengths(rows: Sequence[dict], tokenizer, *, max_prompt_len: int,
                         prompt_settings: PromptSettings) -> list[int]:
    """Token length of every rendered prompt; a prompt over ``max_prompt_len`` raises (before any
    generation) naming the row. Returns the lengths."""
    lengths = []
    for r in rows:
        n = len(render_prompt(tokenizer, r["prompt"], prompt_settings))
        if n > max_prompt_len:
            raise DataError(f"prompt of {r['item_id']!r} has {n} tokens > data.max_prompt_len={max_prompt_len}",
                            path=r.get("_path"), line=r.get("_line"), field="prompt",
                            accepted="shorter prompts, or raise data.max_prompt_len (RL prompts are never truncated)")
        lengths.append(n)
    return lengths
