"""Models: policy, reference, optimizer and LR schedule (``policy``), per-sequence log-probs
(``logprobs``) and their chunked path through the LM head (``chunked_logprobs``)."""
