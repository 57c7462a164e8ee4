"""GRPO's SFT term (CHORD, arXiv 2508.11408; the loss is ``trainer.algos.grpo.sft_term``): which prompt rows of a
rollout batch get an SFT target, the target's tokens, and each rank's micro-batch share of them.

Why: a group whose G rewards are all 0 has zero variance, so GRPO has no gradient on it (``algo.drop_zero_variance``
drops it and refills the batch). On a fact the policy does not know and on which it ignores a correct context, every
sample fails, and GRPO can never repair it. ``algo.sft_rows=zero_variance_failed`` keeps those rows for an SFT term
(they are still dropped from the GRPO batch); ``correct_context`` takes every row whose ``condition`` is correct.

- The rows are picked among *every* group generated for the rollout batch (all rounds: kept, dropped, surplus), each
  prompt row once, in generation order. The pick runs on the global groups (every rank holds them after the
  exchange of ``trainer/rl/rollout.py``), so every rank picks the same rows and no collective is added.
- Target completion: ``algo.sft_target`` (a format string over the row's fields, default ``"The answer is {gold}."``)
  tokenised on its own (no special tokens) with EOS appended, as DPO tokenises a chosen completion
  (``trainer.logprobs.logprobs.build_pair_batch``), after the prompt as the rollouts render it (``render_prompt``).
- Split: global SFT row ``k`` goes to global micro-batch slot ``k mod (grad_accum * world)``, slot ``i * world + r``
  being micro-batch ``i`` of rank ``r`` (the order of ``rollout.rank_rows``); each slot's loss is normalised by the
  step's SFT tokens / ``(grad_accum * world)``, so the loop's mean over micro-batches and DDP's mean over ranks give the
  token mean over the step's SFT rows. A slot with no row adds nothing (no forward).
- The SFT rows run unshared, in a forward of their own (``trainer/rl/step.py``'s ``grpo_step``), whatever
  ``algo.shared_prompt`` says: they are one row per prompt, there is no group prompt to share.
"""

from __future__ import annotations

from typing import Sequence

from selectrust.conditions import CORRECT
from selectrust.core.io import DataError
from selectrust.generation.prompts import PromptSettings, render_prompt
from trainer.logprobs.logprobs import right_pad
from trainer.rl.sft_rules import SFT_ROW_RULES

__all__ = ["check_sft_rows", "target_text", "picked_items", "sft_batch", "sft_microbatch"]


def target_text(row: dict, template: str) -> str:
    """The SFT target completion of ``row``: ``template`` formatted with the row's fields."""
    return template.format_map(row)


def check_sft_rows(rows: Sequence[dict], *, rule: str, template: str) -> None:
    """Raises DataError (one line: the row's file, line and field) before any model loads when ``template`` names a
    field a row lacks, or ``rule="correct_context"`` finds a row without ``condition`` or no correct row at all."""
    for r in rows:
        try:
            target_text(r, template)
        except (KeyError, IndexError, AttributeError, ValueError) as e:
            raise DataError(f"algo.sft_target={template!r} cannot be filled from this row ({type(e).__name__}: {e})",
                            path=r.get("_path"), line=r.get("_line"), field="sft_target") from None
        if rule == "correct_context" and r.get("condition") is None:
            raise DataError("algo.sft_rows=correct_context needs every prompt row's condition", path=r.get("_path"),
                            line=r.get("_line"), field="condition")
    if rule == "correct_context" and not any(r.get("condition") == CORRECT for r in rows):
        raise DataError("algo.sft_rows=correct_context: no prompt row has condition 'correct'",
                        path=rows[0].get("_path") if rows else None, field="condition")


def picked_items(groups, rows_by_id: dict[str, dict], *, rule: str) -> list[str]:
    """The item ids of ``groups`` (``trainer.rl.rollout.Group``) that get an SFT target under ``rule``, each once,
    in order (``rule``: a name of :data:`trainer.rl.sft_rules.SFT_ROW_RULES`: ``zero_variance_failed``, every reward
    of the group is <= 0; ``correct_context``, the row's ``condition`` is ``"correct"``)."""
    if rule not in SFT_ROW_RULES:
        raise ValueError(f"unknown sft_rows rule {rule!r}")
    picks = SFT_ROW_RULES[rule]
    out: list[str] = []
    for g in groups:
        if g.item_id in out:
            continue
        if picks(g, rows_by_id):
            out.append(g.item_id)
    return out


def sft_batch(groups, rows: Sequence[dict], *, rule: str, template: str, tokenizer,
              prompt_settings: PromptSettings) -> dict:
    """The SFT rows of a global rollout batch (JSON-able, saved with the batch for an exact resume):
    ``{"item_ids", "input_ids", "masks", "tokens"}`` (prompt then target+EOS ids, 0/1 target mask, target tokens)."""
    by_id = {r["item_id"]: r for r in rows}
    items = picked_items(groups, by_id, rule=rule)
    ids, masks = [], []
    for item in items:
        row = by_id[item]
        p_ids = render_prompt(tokenizer, row["prompt"], prompt_settings)
        c_ids = list(tokenizer(target_text(row, template), add_special_tokens=False)["input_ids"])
        c_ids.append(tokenizer.eos_token_id)
        ids.append(p_ids + c_ids)
        masks.append([0] * len(p_ids) + [1] * len(c_ids))
    return {"item_ids": items, "input_ids": ids, "masks": masks, "tokens": sum(sum(m) for m in masks)}


def sft_microbatch(sft: dict | None, index: int, *, rank: int, world: int, grad_accum: int, tokenizer) -> dict | None:
    """Rank ``rank``'s share of ``sft`` (:func:`sft_batch`) for its micro-batch ``index`` (module docstring), padded:
    ``{"input_ids", "attention_mask", "completion_mask" (S, T), "num_tokens", "item_ids"}``; None when it has none."""
    if not sft or not sft["item_ids"]:
        return None
    slots = grad_accum * world
    picked = list(range(index * world + rank, len(sft["item_ids"]), slots))
    if not picked:
        return None
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, att, cm = right_pad([sft["input_ids"][k] for k in picked], [sft["masks"][k] for k in picked], pad_id)
    return {"input_ids": ids, "attention_mask": att, "completion_mask": cm, "num_tokens": sft["tokens"] / slots,
            "item_ids": [sft["item_ids"][k] for k in picked]}
