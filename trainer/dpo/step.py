"""DPO's step: the loss and metrics of one micro-batch of pairs (what ``recipes/dpo.py`` hands the loop, and what
the bench times). The loss functions are pure torch in ``trainer/algos/dpo.py``; the micro-batch it reads is built
by ``trainer/dpo/pairs.py``."""

from __future__ import annotations

import torch
from trainer.algos.dpo import chosen_nll_loss, dpo_row_metrics, per_group_metrics
from trainer.algos.sft import masked_nll_loss
from trainer.dpo.pairs import pair_logps


def dpo_step(model, mb: dict, *, algo, loss, reference, policy, ref_table, device, logprobs):
    """Loss and metrics of one micro-batch of pairs (chosen rows first, then rejected): the weighted DPO-style
    loss ``loss`` (``algo.loss_type``'s ``trainer.algos.dpo.DPOLoss``; sigmoid by default) on the log-probs it
    declares (summed or per token), against the reference (precomputed or the adapter-disabled policy) when it has
    one, plus ``algo.rpo_alpha`` times the chosen rows' NLL, or NLL on the chosen rows alone for
    ``algo.sft_on_chosen``; every DPO metric also per condition."""
    batch = mb["batch"].to(device)
    inputs = (batch.input_ids, batch.attention_mask, batch.completion_mask)
    if algo.sft_on_chosen:
        n = len(mb["conditions"])
        _, token_logps, _ = logprobs(model, *[t[:n] for t in inputs])
        return masked_nll_loss(token_logps, None, batch.completion_mask[:n], aggregation="token_mean")
    summed = pair_logps(model, mb, device, logprobs).chunk(2)  # chosen, rejected
    counts = batch.completion_mask.sum(dim=1).chunk(2)
    pc, pr = (loss.sequence_logps(s, n) for s, n in zip(summed, counts))  # summed, or per-token means
    refs = ()
    if loss.reference:
        if ref_table is not None:
            ref_summed = ref_table[mb["indices"]].to(device=device, dtype=pc.dtype).unbind(1)
        else:
            with torch.no_grad(), reference.context(policy) as ref_model:
                ref_summed = pair_logps(ref_model, mb, device, logprobs).chunk(2)
        refs = tuple(loss.sequence_logps(s, n) for s, n in zip(ref_summed, counts))
    weights = mb["weights"].to(device) if algo.weighting == "loss" else None
    hyperparameters = {kw: getattr(algo, key) for kw, key in loss.hyperparameters.items()}
    value, metrics = loss(pc, pr, *refs, beta=algo.beta, label_smoothing=algo.label_smoothing, weights=weights,
                          **hyperparameters)
    if algo.rpo_alpha:
        nll, nll_metrics = chosen_nll_loss(summed[0], counts[0])
        value = value + algo.rpo_alpha * nll
        metrics.update(nll_metrics)
    metrics.update(per_group_metrics(dpo_row_metrics(pc, pr, *(refs or (None, None)), beta=algo.beta),
                                     mb["conditions"]))
    return value, metrics
