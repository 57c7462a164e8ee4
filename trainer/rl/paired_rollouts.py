"""Knowledgeable-R1's paired rollouts (``algo.rollout_mode=paired_context``): each prompt row is sampled with its
retrieved context and without it, so the policy learns when the context helps and when its own knowledge is better.

Knowledgeable-R1: Lin et al., arXiv 2506.05154 (v4, "Resisting Contextual Interference in RAG via
Parametric-Knowledge Reinforcement"); its code, github.com/lcy80366872/Knowledgeable-R1 (verl). The advantages are
the pure function ``trainer.algos.paired_context.paired_context_advantages`` (formulas there).

Per prompt row (which must carry its ``context``, a string its ``prompt`` holds; :func:`check_paired_rows` refuses
any other before a model loads) with G = ``algo.group_size``, one backend request of G completions of the prompt
``p'`` (seed: the row's rollout seed) and one of G completions of the same prompt without its context ``p``
(:func:`no_context_prompt`: the paragraph holding the context dropped; seed derived from the row's), both scored by
``algo.reward`` against the row. The row's :class:`~trainer.rl.rollout.Group` holds 3G samples, in this order:

- G **CK** rows: ``p'`` + a completion sampled with the context, advantage ``A_global + A_local``;
- G **RPK** rows: ``p'`` + a completion sampled *without* the context (the policy with the context is taught the
  answers it finds without it), advantage ``LeakyReLU_beta(A_global)``; they were not sampled under ``p'``, so
  their rollout log-probs are NaN (importance weight 1 under ``algo.is_correction``) and the judge does not count
  them again in ``rollout/<status>``;
- G **PK** rows: ``p`` + the same completions, advantage ``A_global``, item id ``<item_id>/no_context``
  (:data:`NO_CONTEXT`), so ``algo.shared_prompt`` packs the two prompts' rows as two runs without a warning.

A group whose 2G rewards all agree has zero variance and is dropped and refilled as any GRPO group (the v1 code
drops exactly these). The rollout batch of P prompts holds 3·P·G rows, so ``optim.batch_size ×
optim.grad_accum × world = 3 × algo.prompts_per_step × algo.group_size`` (``trainer.config.validation``).
Each step with a new rollout batch logs ``paired/beta``, ``paired/reward_with``, ``paired/reward_without``,
``paired/context_helps_frac``, ``paired/context_hurts_frac`` and ``paired/e_ck``, ``paired/e_pos``,
``paired/e_neg``; ``reward_mean``, ``reward_mean_trained``, ``completion_len_mean`` and ``truncated_frac`` are over
every row, so they count each no-context completion twice (its PK and RPK rows).

How this departs from its reference (the v4 code; the advantage-side departures are in
``trainer/algos/paired_context.py``):

- the loss is GRPO's (``trainer.algos.grpo.clipped_policy_loss``) on each row: the reference adds a PK completion's
  RPK and PK terms on one token position and normalises by its tokens once, here the RPK and PK rows are two rows,
  so ``token_mean`` divides by the CK tokens plus twice the PK tokens; the KL term (``algo.kl_beta``) applies to
  every row, where the reference applies it to the CK and RPK terms only;
- the no-context prompt is the row's prompt without the paragraph holding its context (the reference renders the
  question alone; on this project's facts and NQ-Swap rows the two are the same text: the clean row's prompt);
- G completions each way (the reference samples n per regime too), generated in one backend call per row and
  regime, seeded like every GRPO prompt (rank-independent, exact on resume).
"""

from __future__ import annotations

from typing import Sequence

from selectrust.core.io import DataError
from trainer.algos.choices import PAIRED_ROWS

from .groups import Group, Rollout
from .rollout_modes import SingleTurnMode
from selectrust.generation.backends.base import derive_seed

__all__ = ["NO_CONTEXT", "PairedContextMode", "check_paired_rows", "no_context_prompt"]

#: suffix of the item id of a row's no-context (PK) samples
NO_CONTEXT = "/no_context"
_PARAGRAPH = "\n\n"


def no_context_prompt(prompt: str, context: str) -> str:
    """``prompt`` without its ``context``: the paragraph (``\\n\\n``-separated) the context stands in is dropped
    whole, with its label (``Passage: ...``), and the paragraphs around it joined. Raises ValueError when the
    context is empty, not in the prompt, or all of it."""
    at = prompt.find(context) if context.strip() else -1
    if at < 0:
        raise ValueError("the prompt does not hold the context")
    start = prompt.rfind(_PARAGRAPH, 0, at)
    end = prompt.find(_PARAGRAPH, at + len(context))
    before = prompt[:start] if start >= 0 else ""
    after = prompt[end + len(_PARAGRAPH):] if end >= 0 else ""
    bare = _PARAGRAPH.join(p for p in (before, after) if p.strip())
    if not bare.strip():
        raise ValueError("nothing is left of the prompt without its context")
    return bare


#: the rule a context must follow (said by the refusals and by ``algo.rollout_mode``'s ``--help``)
PARAGRAPH_RULE = ("the context must be a paragraph of its own in the prompt, set off from the question by a blank "
                  "line ('\\n\\n'), so that dropping its paragraph leaves the question")


def _has_context(r: dict) -> bool:
    return isinstance(r.get("context"), str) and bool(r["context"].strip())


def _no_context_advice(rows: Sequence[dict]) -> str:
    """What to do about rows without a context: keep the conditions whose rows have one (family rows), or, when
    no row has one, use rows that carry one or the single-turn mode."""
    with_context = sorted({r["condition"] for r in rows if _has_context(r) and r.get("condition")})
    if with_context:
        return f"keep only the conditions whose rows have one: data.train_conditions=[{','.join(with_context)}]"
    return (f"none of the {len(rows)} rows has a context: train on rows that carry one (a family's items with "
            f"passages, e.g. data.train_family=mist with data.train_path=<MIST items>, or rows with a 'context' "
            f"their prompt holds), or use algo.rollout_mode=single_turn")


def check_paired_rows(rows: Sequence[dict]) -> None:
    """Raises DataError (one line: the row's file, line and field) before any model loads unless every row has a
    ``prompt`` string holding its ``context`` (a non-empty string) as a paragraph of its own (:data:`PARAGRAPH_RULE`),
    with a question left without it."""
    need = "algo.rollout_mode=paired_context samples every prompt row with and without its context"
    for r in rows:
        where = dict(path=r.get("_path"), line=r.get("_line"))
        name = f"row {r.get('item_id')!r}" + (f" (condition {r['condition']!r})" if r.get("condition") else "")
        context = r.get("context")
        if not _has_context(r):
            raise DataError(f"{need}; {name} has no context", **where, field="context",
                            accepted=f"a non-empty string in the row's prompt: {_no_context_advice(rows)}")
        if not isinstance(r.get("prompt"), str):
            raise DataError(f"{need}; {name} has a prompt of chat messages", **where, field="prompt",
                            accepted="a prompt string holding the context")
        try:
            no_context_prompt(r["prompt"], context)
        except ValueError as e:
            raise DataError(f"{need}; {name}: {e}", **where, field="context",
                            accepted=f"a context that is part of the prompt, with the question outside it: "
                                     f"{PARAGRAPH_RULE}") from None


class PairedContextMode(SingleTurnMode):
    """G completions of each prompt row with its context and G without, as one group of 3G rows (module docstring),
    with Knowledgeable-R1's advantages (``min_slope``: the floor of the RPK rows' negative-advantage slope)."""

    def __init__(self, settings, tokenizer, reward, *, min_slope: float = 0.01):
        super().__init__(settings, tokenizer, reward)
        self.min_slope = min_slope
        self._metrics: dict[str, float] = {}

    @classmethod
    def check_rows(cls, rows) -> None:
        check_paired_rows(rows)

    def generate(self, backend, items, seeds, adapter):
        reqs = []
        for r, seed in zip(items, seeds):
            reqs.append(self.request(r["prompt"], seed, adapter))
            reqs.append(self.request(no_context_prompt(r["prompt"], r["context"]), derive_seed("no_context", seed),
                                     adapter))
        return backend.generate(reqs)

    def to_groups(self, items, results) -> list[Group]:
        groups = []
        for i, r in enumerate(items):
            res_with, res_without = results[2 * i], results[2 * i + 1]
            with_ctx = self.scored(r, res_with, r["prompt"])
            without = self.scored(r, res_without, no_context_prompt(r["prompt"], r["context"]),
                                  item_id=r["item_id"] + NO_CONTEXT)
            first = with_ctx[0]
            p_ids = first.input_ids[:len(first.input_ids) - first.completion_len]  # p' as scored() tokenised it
            groups.append(Group(r["item_id"], with_ctx + [_under(x, p_ids, r["item_id"]) for x in without] + without))
        return groups

    def advantages(self, groups: list[Group], rewards):
        """Knowledgeable-R1's advantages of the batch's groups (each [CK, RPK, PK] x G), in sample order."""
        import torch  # deferred: imports torch

        from trainer.algos.paired_context import paired_context_advantages  # deferred: imports torch

        G = self.s.group_size
        if rewards.numel() != len(groups) * PAIRED_ROWS * G:
            raise RuntimeError(f"{rewards.numel()} rewards for {len(groups)} paired groups of 3 x {G} samples")
        r = rewards.view(len(groups), PAIRED_ROWS, G)
        adv_with, adv_without, adv_cross, m = paired_context_advantages(
            r[:, 0], r[:, 2], std_scaling=self.s.std_scaling, min_slope=self.min_slope)
        self._metrics = {f"paired/{k}": float(v) for k, v in m.items()}
        return torch.stack([adv_with, adv_cross, adv_without], dim=1).reshape(-1)

    def pop_metrics(self) -> dict:
        m, self._metrics = self._metrics, {}
        return {**super().pop_metrics(), **m}


def _under(x: Rollout, p_ids: list[int], item_id: str) -> Rollout:
    """The RPK row of PK sample ``x``: its completion after the prompt with the context (``p_ids``)."""
    c_ids = x.input_ids[len(x.input_ids) - x.completion_len:]
    return Rollout(item_id=item_id, input_ids=p_ids + c_ids, completion_mask=[0] * len(p_ids) + [1] * len(c_ids),
                   reward=x.reward, reward_ok=x.reward_ok, truncated=x.truncated, completion_len=x.completion_len,
                   rollout_logps=None if x.rollout_logps is None else [float("nan")] * len(c_ids))
