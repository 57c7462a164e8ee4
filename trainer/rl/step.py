"""GRPO's step: the loss and metrics of one rollout micro-batch (what ``recipes/grpo.py`` hands the loop, and what
the bench and tests time and check), with CHORD's SFT term; and the two decisions the recipe asks of it before the
loop (whether a group's prompt is run once: :func:`use_shared_prompt`; the rollout-time log-probs:
:func:`old_logprobs`). The loss functions are pure torch in ``trainer/algos/grpo.py``."""

from __future__ import annotations

import logging

import torch
from trainer.logprobs.shared_prompt import attention_takes_4d_mask
from trainer.algos.grpo import clipped_policy_loss
from trainer.algos.is_correction import truncated_is_weights
from trainer.algos.grpo import sft_coef_at, sft_term

logger = logging.getLogger(__name__)


def use_shared_prompt(cfg) -> bool:
    """``algo.shared_prompt`` where it is exact: under an attention kernel that takes the 4D block mask (SDPA
    or eager); otherwise a log line says the run falls back to unshared rows."""
    if not cfg.algo.shared_prompt:
        return False
    if not attention_takes_4d_mask(cfg.model.attn_implementation):
        logger.warning("algo.shared_prompt falls back to unshared rows: model.attn_implementation=%s ignores the "
                       "block attention mask (sdpa or eager take it)", cfg.model.attn_implementation)
        return False
    return True


def old_logprobs(policy, device, logprobs, ids, att, cm):
    """Per-token log-probs of the sampled completions under the rollout-time policy (no grad), on CPU
    (``logprobs``: ``trainer.logprobs.logprobs.sequence_logprobs``, or ``group_sequence_logprobs`` with
    ``algo.shared_prompt``, with the run's settings)."""
    with torch.no_grad():
        return logprobs(policy, ids.to(device), att.to(device), cm.to(device))[1].cpu()


def grpo_step(model, mb: dict, *, algo, reference, policy, device, logprobs, max_steps=None, sft_logprobs=None):
    """Loss and metrics of one rollout micro-batch: the clipped token loss, with the KL term to the
    adapter-disabled reference and the truncated importance weights when configured, plus the SFT term when
    ``algo.sft_coef > 0`` (:func:`add_sft_term`)."""
    ids, att, cm = mb["input_ids"].to(device), mb["attention_mask"].to(device), mb["completion_mask"].to(device)
    _, logps, entropy = logprobs(model, ids, att, cm, return_entropy=True)
    old = mb["old_logps"].to(device) if mb["old_logps"] is not None else logps.detach()
    ref = None
    if reference is not None:
        with torch.no_grad(), reference.context(policy) as ref_model:
            ref = logprobs(ref_model, ids, att, cm)[1]
    is_w, is_metrics = None, {}
    if algo.is_correction != "none":
        if mb["rollout_logps"] is None:
            raise RuntimeError(f"algo.is_correction={algo.is_correction!r} needs the rollout log-probs of every "
                               f"sampled token, but the generation backend returned none (or a different number "
                               f"than tokens) for items {mb['item_ids'][:8]}")
        # the behaviour policy as the trainer computes it (old log-probs) vs as the server sampled it
        is_w, is_metrics = truncated_is_weights(old, mb["rollout_logps"].to(device), cm,
                                                level=algo.is_correction, cap=algo.is_cap)
    loss, metrics = clipped_policy_loss(
        logps, old, mb["advantages"].to(device), cm, eps_low=algo.eps_low, eps_high=algo.eps_high,
        aggregation=algo.aggregation, ref_logps=ref, kl_beta=algo.kl_beta, is_weights=is_w,
        num_tokens=mb["num_tokens"] if algo.aggregation == "token_mean" else None)
    metrics.update({k if k.startswith("is_") else f"is_{k}": v for k, v in is_metrics.items()})
    # over the global step's token count (per micro-batch and rank: global tokens / (grad_accum * world)),
    # so the loop's mean over micro-batches and ranks is the token mean of the whole step on any world size
    metrics["entropy"] = (entropy * cm).sum() / max(float(mb["num_tokens"]), 1e-9)
    metrics["advantage_abs_mean"] = mb["advantages"].abs().mean()
    if algo.sft_coef > 0:
        loss = add_sft_term(loss, metrics, mb, algo=algo, policy=policy, device=device, max_steps=max_steps,
                            logprobs=sft_logprobs)
    return loss, metrics


def add_sft_term(loss, metrics: dict, mb: dict, *, algo, policy, device, max_steps, logprobs=None):
    """``loss`` plus CHORD's SFT term on the micro-batch's SFT rows (``mb["sft"]``, trainer/rl/sft_rows.py; a
    separate unshared forward of ``policy``, the unwrapped model, so a DDP rank with no SFT row in this micro-batch
    runs no extra wrapped forward: the gradients still reach the same parameters, no collective is added). Adds
    ``sft/loss`` (the SFT token NLL over the step's SFT tokens, 0 here when the micro-batch has no SFT row) and
    ``sft/coef`` (the scheduled weight) to ``metrics``."""
    from trainer.logprobs.logprobs import sequence_logprobs  # deferred: tests patch it

    logprobs = logprobs or sequence_logprobs  # unshared rows (``model.logprob_chunk`` through the recipe's partial)
    coef = sft_coef_at(int(mb.get("step", 0)), coef=algo.sft_coef, schedule=algo.sft_schedule, max_steps=max_steps)
    metrics["sft/coef"] = coef
    sft = mb.get("sft")
    if not sft:
        metrics["sft/loss"] = torch.zeros(())
        return loss
    ids, att, cm = sft["input_ids"].to(device), sft["attention_mask"].to(device), sft["completion_mask"].to(device)
    logps = logprobs(policy, ids, att, cm)[1]
    term, m = sft_term(logps, cm.to(logps.dtype), coef=coef, num_tokens=sft["num_tokens"])
    metrics["sft/loss"] = m["nll"]
    return loss + term
