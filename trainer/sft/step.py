"""SFT's step: the loss and metrics of one micro-batch of examples (what ``recipes/sft.py`` hands the loop). The
loss is pure torch in ``trainer/algos/sft.py``; the micro-batch is built by ``trainer/sft/data.py``."""

from __future__ import annotations


def sft_step(model, mb: dict, *, aggregation: str, device, logprobs):
    """The masked NLL of one micro-batch's completion tokens (``algo.aggregation``; ``mb["num_items"]``: the step's
    examples, for the per-sequence means), with ``logprobs`` (``sequence_logprobs`` with the run's settings)."""
    from trainer.algos.sft import masked_nll_loss  # deferred: imports torch

    ids, att, cm = (mb[k].to(device) for k in ("input_ids", "attention_mask", "completion_mask"))
    _, token_logps, _ = logprobs(model, ids, att, cm)
    return masked_nll_loss(token_logps, None, cm, aggregation=aggregation, num_items=mb["num_items"])
