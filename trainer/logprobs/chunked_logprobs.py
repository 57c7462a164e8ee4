"""Per-token log-probs (and entropy, and top-K gathers) without the ``(B, T, V)`` logits tensor.

The model runs with ``logits_to_keep=1``; the final hidden states of the positions that predict a
completion token are captured from the decoder and projected through the LM head ``chunk`` positions
at a time, keeping only what is asked for (the label's log-prob, the entropy, K gathered log-probs).
Peak memory of the head is then ``chunk x V`` floats instead of several ``B x T x V`` tensors.

Backward (a custom autograd function) never keeps a chunk's logits:

- frozen head (LoRA, the reference pass): the forward also computes ``p @ W`` per position (one extra
  ``N x V x H`` product, the same one the backward of the full-logits path does), so the backward
  is ``N x H`` work only;
- trainable head (full fine-tuning): the forward keeps the per-position ``logsumexp`` and the backward
  recomputes each chunk's logits to form the head's and the hidden states' gradients.

Selected by ``model.logprob_chunk`` (positions per chunk; 0 = the full-logits path of
``trainer.logprobs.logprobs.sequence_logprobs``). Equal to that path within float32 round-off.

Public API:

- ``chunked_token_logprobs(hidden (N, H), weight (V, H), labels (N,), *, temperature, chunk,
  return_entropy) -> (logps (N,), entropy (N,) | None)``
- ``chunked_gather_logprobs(hidden, weight, index (N, K), *, temperature, chunk) -> (N, K)``: full-vocabulary
  log-probs at K given tokens (a student's log-probs at a teacher's top-K), differentiable
- ``chunked_topk_logprobs(hidden, weight, k, *, temperature, chunk) -> (values (N, K), indices (N, K))``:
  the K most likely tokens and their full-vocabulary log-probs, no gradient (the teacher side)
- ``completion_hidden_states(model, input_ids, attention_mask, completion_mask) -> (hidden (N, H), head)``
- ``sequence_logprobs_chunked(model, input_ids, attention_mask, completion_mask, *, chunk, temperature,
  return_entropy)``: the same outputs as ``sequence_logprobs``
"""

from __future__ import annotations

import torch

__all__ = [
    "chunked_token_logprobs",
    "chunked_gather_logprobs",
    "chunked_topk_logprobs",
    "completion_hidden_states",
    "sequence_logprobs_chunked",
]


def _out_dtype(hidden: torch.Tensor) -> torch.dtype:
    return torch.float64 if hidden.dtype == torch.float64 else torch.float32


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float, dtype: torch.dtype) -> torch.Tensor:
    """``(n, H) @ (V, H)^T`` in the model dtype (as the LM head computes it), then upcast and tempered."""
    logits = (h @ weight.t()).to(dtype)
    return logits / temperature if temperature != 1.0 else logits


class _GatherLogprobs(torch.autograd.Function):
    """``logps[n, k] = log softmax(h_n W^T / T)[index[n, k]]`` and the (detached) entropy of each row."""

    @staticmethod
    def forward(ctx, hidden, weight, index, temperature, chunk, want_entropy, grad_hidden, grad_weight):
        dtype = _out_dtype(hidden)
        n = hidden.shape[0]
        logps = torch.empty(index.shape, dtype=dtype, device=hidden.device)
        entropy = torch.zeros(n if want_entropy else 0, dtype=dtype, device=hidden.device)
        lse_all = torch.empty(n, dtype=dtype, device=hidden.device) if grad_weight else None
        p_w = torch.empty_like(hidden) if (grad_hidden and not grad_weight) else None
        for s in range(0, n, chunk):
            logits = _chunk_logits(hidden[s:s + chunk], weight, temperature, dtype)
            lse = torch.logsumexp(logits, dim=-1)
            logps[s:s + chunk] = logits.gather(-1, index[s:s + chunk]) - lse.unsqueeze(-1)
            if lse_all is not None:
                lse_all[s:s + chunk] = lse
            if want_entropy or p_w is not None:
                probs = (logits - lse.unsqueeze(-1)).exp_()
                if want_entropy:
                    entropy[s:s + chunk] = lse - (probs * logits).sum(-1)
                if p_w is not None:
                    p_w[s:s + chunk] = (probs.to(weight.dtype) @ weight).to(hidden.dtype)
                del probs
            del logits
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.grad_hidden, ctx.grad_weight = grad_hidden, grad_weight
        ctx.save_for_backward(hidden, weight, index, lse_all if lse_all is not None else p_w)
        ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, _grad_entropy):
        hidden, weight, index, saved = ctx.saved_tensors
        temp, chunk = ctx.temperature, ctx.chunk
        grad_h = torch.zeros_like(hidden) if ctx.grad_hidden else None
        grad_w = torch.zeros_like(weight) if ctx.grad_weight else None
        g = grad_logps.to(_out_dtype(hidden))
        g_sum = g.sum(-1, keepdim=True)
        for s in range(0, hidden.shape[0], chunk):
            gs, idx = g[s:s + chunk], index[s:s + chunk]
            if ctx.grad_weight:  # recompute the chunk's logits: d logp_k / d logits = onehot_k - p
                logits = _chunk_logits(hidden[s:s + chunk], weight, temp, g.dtype)
                grad_logits = logits.sub_(saved[s:s + chunk].unsqueeze(-1)).exp_().mul_(-g_sum[s:s + chunk])
                grad_logits.scatter_add_(-1, idx, gs)
                if temp != 1.0:
                    grad_logits /= temp
                grad_logits = grad_logits.to(weight.dtype)
                grad_w += grad_logits.t() @ hidden[s:s + chunk]
                if grad_h is not None:
                    grad_h[s:s + chunk] = (grad_logits @ weight).to(hidden.dtype)
                del logits, grad_logits
            else:  # frozen head: d/dh = (sum_k g_k W[idx_k] - (sum_k g_k) p W) / T, with p W kept from forward
                picked = torch.einsum("nk,nkh->nh", gs.to(weight.dtype), weight[idx])
                grad_h[s:s + chunk] = ((picked - g_sum[s:s + chunk].to(weight.dtype) * saved[s:s + chunk])
                                       / temp).to(hidden.dtype)
        return grad_h, grad_w, None, None, None, None, None, None


def _check(hidden, weight, chunk: int) -> int:
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden {tuple(hidden.shape)} must be (N, H) and weight {tuple(weight.shape)} (V, H)")
    if int(chunk) < 1:
        raise ValueError(f"chunk must be >= 1 positions; got {chunk}")
    return int(chunk)


def chunked_gather_logprobs(hidden, weight, index, *, temperature: float = 1.0, chunk: int = 1024,
                            return_entropy: bool = False):
    """Full-vocabulary log-probs ``(N, K)`` of the tokens ``index (N, K)`` under ``softmax(hidden @ weight^T / T)``,
    computed ``chunk`` rows at a time; gradients flow into ``hidden`` and ``weight`` without keeping any
    chunk's logits. With ``return_entropy`` also returns the detached entropy ``(N,)`` (else None)."""
    chunk = _check(hidden, weight, chunk)
    if index.dim() != 2 or index.shape[0] != hidden.shape[0]:
        raise ValueError(f"index {tuple(index.shape)} must be (N, K) with N = {hidden.shape[0]}")
    grad = torch.is_grad_enabled()
    logps, entropy = _GatherLogprobs.apply(hidden, weight, index.long(), float(temperature), chunk,
                                           bool(return_entropy), grad and hidden.requires_grad,
                                           grad and weight.requires_grad)
    return logps, (entropy if return_entropy else None)


def chunked_token_logprobs(hidden, weight, labels, *, temperature: float = 1.0, chunk: int = 1024,
                           return_entropy: bool = False):
    """Log-prob ``(N,)`` of each label ``(N,)`` and, with ``return_entropy``, the detached entropy ``(N,)``."""
    logps, entropy = chunked_gather_logprobs(hidden, weight, labels.reshape(-1, 1), temperature=temperature,
                                             chunk=chunk, return_entropy=return_entropy)
    return logps.squeeze(-1), entropy


@torch.no_grad()
def chunked_topk_logprobs(hidden, weight, k: int, *, temperature: float = 1.0, chunk: int = 1024):
    """The ``k`` most likely tokens of each row and their full-vocabulary log-probs: ``(values, indices)``,
    each ``(N, k)``, no gradient (a distillation teacher's top-K)."""
    chunk = _check(hidden, weight, chunk)
    dtype = _out_dtype(hidden)
    values, indices = [], []
    for s in range(0, hidden.shape[0], chunk):
        logits = _chunk_logits(hidden[s:s + chunk], weight, temperature, dtype)
        top = logits.topk(k, dim=-1)
        values.append(top.values - torch.logsumexp(logits, dim=-1, keepdim=True))
        indices.append(top.indices)
    return torch.cat(values), torch.cat(indices)


def _unwrap(model):
    while hasattr(model, "module"):  # DDP / accelerate wrappers
        model = model.module
    if hasattr(model, "get_base_model"):  # peft
        model = model.get_base_model()
    return model


def lm_head_of(model):
    """The ``(decoder, head)`` modules of a causal LM (through DDP and peft wrappers); raises a clear error
    for heads the chunked path cannot reproduce (bias, logit soft-capping, a wrapped head)."""
    inner = _unwrap(model)
    head = inner.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(f"model.logprob_chunk needs a plain nn.Linear LM head; {type(inner).__name__} has "
                         f"{type(head).__name__} (a LoRA-wrapped head?); set model.logprob_chunk=0")
    if head.bias is not None:
        raise ValueError("model.logprob_chunk does not support an LM head with a bias; set model.logprob_chunk=0")
    cfg = getattr(inner, "config", None)
    for attr in ("final_logit_softcapping", "logit_scale"):
        if getattr(cfg, attr, None) not in (None, 1.0):
            raise ValueError(f"model.logprob_chunk does not support {attr}={getattr(cfg, attr)}; "
                             "set model.logprob_chunk=0")
    return inner.get_decoder(), head


def completion_hidden_states(model, input_ids, attention_mask, completion_mask):
    """Final hidden states of the positions predicting each completion token: ``(N, H)`` in the row-major
    order of ``completion_mask``'s ones (N = their count), and the LM head module.

    The model runs with ``logits_to_keep=1`` (one position's logits) and position ids from
    ``attention_mask`` as in ``sequence_logprobs``; the decoder's output is captured by a forward hook,
    so DDP and peft wrappers still see an ordinary forward."""
    decoder, head = lm_head_of(model)
    captured = []

    def hook(_module, _args, output):
        captured.append(output[0] if isinstance(output, tuple) else output.last_hidden_state)

    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
    handle = decoder.register_forward_hook(hook)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False,
              logits_to_keep=1)
    finally:
        handle.remove()
    if len(captured) != 1:
        raise RuntimeError(f"expected one decoder output, captured {len(captured)}")
    hidden = captured[0]
    comp = completion_mask.bool()
    return hidden[:, :-1][comp[:, 1:]], head


def sequence_logprobs_chunked(model, input_ids, attention_mask, completion_mask, *, chunk: int,
                              temperature: float = 1.0, return_entropy: bool = False):
    """``sequence_logprobs`` with the head applied ``chunk`` completion positions at a time: returns
    ``seq_logps (B,)``, ``token_logps (B, T)`` and ``entropy (B, T) | None`` (zero outside the completion).
    Inputs are validated by ``sequence_logprobs`` (which dispatches here for ``logprob_chunk > 0``)."""
    hidden, head = completion_hidden_states(model, input_ids, attention_mask, completion_mask)
    comp = completion_mask.bool()
    lp, ent = chunked_token_logprobs(hidden, head.weight, input_ids[comp], temperature=temperature, chunk=chunk,
                                     return_entropy=return_entropy)
    token_logps = torch.zeros(input_ids.shape, dtype=lp.dtype, device=lp.device).masked_scatter(comp, lp)
    entropy = None
    if return_entropy:
        entropy = torch.zeros(input_ids.shape, dtype=ent.dtype, device=ent.device).masked_scatter(comp, ent)
    return token_logps.sum(dim=1), token_logps, entropy
