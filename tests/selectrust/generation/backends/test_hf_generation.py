"""HFBackend generation records each chosen token's log-prob step by step, never a (B, T, V) tensor.

The reference is the former computation: ``generate(output_logits=True)``, then
``log_softmax(torch.stack(out.logits, 1).float())`` gathered at the generated tokens.
"""

import pytest
import torch

from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.hf import HFBackend


def _full_logits_reference(model, tok, prompts, max_new_tokens, **gen_kwargs):
    """Token ids and log-probs as the backend computed them before (every logit kept)."""
    pad = tok.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.tensor(p)
        mask[r, width - len(p):] = 1
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, pad_token_id=pad,
                             return_dict_in_generate=True, output_logits=True, **gen_kwargs)
    new = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float()
    return new, torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)


def _prompts(tok, n=6):
    return [tok(f"key k{i}{' is' * (i % 3)}\n", add_special_tokens=False)["input_ids"] for i in range(n)]


def _check(samples, new, ref_logp):
    for row, s in enumerate(samples):
        n = len(s.token_ids)
        assert n >= 1 and s.token_ids == new[row, :n].tolist()
        assert torch.allclose(torch.tensor(s.logprobs), ref_logp[row, :n], atol=1e-5, rtol=0)
    return True


def test_greedy_logprobs_and_text_equal_the_full_logits_path(tiny_model, tiny_tokenizer):
    backend = HFBackend(tiny_model, tiny_tokenizer)
    prompts = _prompts(tiny_tokenizer)
    new, ref = _full_logits_reference(tiny_model, tiny_tokenizer, prompts, 12, do_sample=False)
    out = backend._generate_batch(prompts, 12, 0.0, 1.0, (), None)
    assert _check(out, new, ref)
    assert sum(len(s.token_ids) for s in out) > len(out)  # more than one step per row is compared


def test_unseeded_sampling_draws_the_same_tokens_and_logprobs(tiny_model, tiny_tokenizer):
    backend = HFBackend(tiny_model, tiny_tokenizer)
    prompts = _prompts(tiny_tokenizer)
    torch.manual_seed(7)
    new, ref = _full_logits_reference(tiny_model, tiny_tokenizer, prompts, 10, do_sample=True, temperature=0.7,
                                      top_p=0.9, top_k=0)
    out = backend._generate_batch(prompts, 10, 0.7, 0.9, (), 7)
    assert _check(out, new, ref)


def test_seeded_row_sampling_logprobs_are_the_raw_distribution(tiny_model, tiny_tokenizer):
    """Per-row seeded sampling: each recorded log-prob is the temperature-1 log-prob of the sampled token
    given the sampled prefix (checked by a full forward pass over prompt + sample)."""
    backend = HFBackend(tiny_model, tiny_tokenizer)
    prompts = _prompts(tiny_tokenizer, 3)
    out = backend._generate_batch(prompts, 6, 1.3, 0.95, (), None, row_seeds=[1, 2, 3])
    for p, s in zip(prompts, out):
        seq = torch.tensor([p + s.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(tiny_model(input_ids=seq).logits.float(), dim=-1)[0]
        want = logp[len(p) - 1:-1].gather(-1, torch.tensor(s.token_ids).unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(torch.tensor(s.logprobs), want, atol=1e-4, rtol=0)


def test_decoding_never_builds_every_logit(tiny_model, tiny_tokenizer):
    """No (B, T, V) tensor: every forward pass of decoding returns logits for one position per row (the prompt's
    forward included, ``logits_to_keep=1``), and every sample carries one log-prob per token."""
    shapes = []
    hook = tiny_model.register_forward_hook(lambda module, args, out: shapes.append(tuple(out.logits.shape)))
    backend = HFBackend(tiny_model, tiny_tokenizer, batch_size=2)
    reqs = [GenerationRequest(prompt=f"key k{i} is is is\n", max_new_tokens=5) for i in range(3)]
    reqs.append(GenerationRequest(prompt="key k9\n", max_new_tokens=5, temperature=1.0, seed=3, n=2))
    res = backend.generate(reqs)
    hook.remove()
    assert shapes and all(s[1] == 1 for s in shapes), shapes
    assert all(len(s.logprobs) == len(s.token_ids) for r in res for s in r.samples)


def test_finished_rows_leave_the_batch(tiny_model, tiny_tokenizer):
    """A row that reaches EOS leaves the batch (its KV cache rows too): the rows of the later forward passes
    shrink, and the tokens stay those of ``generate``, which keeps every row to the end."""
    prompts = _prompts(tiny_tokenizer)
    new, ref = _full_logits_reference(tiny_model, tiny_tokenizer, prompts, 12, do_sample=False)
    eos = tiny_tokenizer.eos_token_id
    lengths = [(row == eos).nonzero()[0].item() + 1 if (row == eos).any() else len(row) for row in new]
    assert len(set(lengths)) > 1, lengths   # rows finish at different steps, else nothing is compacted
    rows = []
    hook = tiny_model.register_forward_hook(lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]),
                                            with_kwargs=True)
    out = HFBackend(tiny_model, tiny_tokenizer)._generate_batch(prompts, 12, 0.0, 1.0, (), None)
    hook.remove()
    assert _check(out, new, ref)
    assert [len(s.token_ids) for s in out] == lengths
    assert rows[0] == len(prompts) and rows[-1] < len(prompts), rows
    assert rows == sorted(rows, reverse=True)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_results_come_back_in_request_order(tiny_model, tiny_tokenizer, batch_size):
    """Length bucketing (sorted within a group, batched, order restored) does not change any result."""
    backend = HFBackend(tiny_model, tiny_tokenizer, batch_size=batch_size)
    reqs = [GenerationRequest(prompt="key k" + "7" * (i * 3 % 7) + "\n", max_new_tokens=4) for i in range(5)]
    res = backend.generate(reqs)
    single = [HFBackend(tiny_model, tiny_tokenizer, batch_size=1).generate([r])[0] for r in reqs]
    assert [r.request for r in res] == reqs
    assert [r.samples[0].token_ids for r in res] == [r.samples[0].token_ids for r in single]


def test_bf16_autocast_generation_records_fp32_logprobs(tiny_model, tiny_tokenizer):
    """generation.mixed_precision=bf16: generate under autocast; each recorded log-prob (fp32 from bf16 logits)
    within 0.05 of the fp32 log-prob of the same token and prefix (bf16: 8-bit mantissa), and not identical
    to it (autocast really ran)."""
    from omegaconf import OmegaConf

    from trainer.config import generation_schema
    from trainer.eval_bridge import make_backend

    cfg = OmegaConf.structured(generation_schema("hf")(mixed_precision="bf16"))
    backend = make_backend(cfg, tiny_model, tiny_tokenizer, model_path="tiny")
    assert backend.autocast_dtype == torch.bfloat16
    prompts = _prompts(tiny_tokenizer, 3)
    diffs = []
    for p, s in zip(prompts, backend._generate_batch(prompts, 6, 0.0, 1.0, (), None)):
        with torch.no_grad():
            logp = torch.log_softmax(tiny_model(input_ids=torch.tensor([p + s.token_ids])).logits.float(), dim=-1)[0]
        want = logp[len(p) - 1:-1].gather(-1, torch.tensor(s.token_ids).unsqueeze(-1)).squeeze(-1)
        diffs.append((torch.tensor(s.logprobs) - want).abs())
    diffs = torch.cat(diffs)
    assert float(diffs.max()) < 0.05 and float(diffs.max()) > 0


def test_a_shared_prefix_is_computed_once_and_changes_nothing(tiny_model, tiny_tokenizer):
    """Prompts with a common prefix (a chat template's system turn): the prefix runs once (one row), its KV cache
    is repeated for the batch, and tokens and log-probs equal ``generate``'s on the whole prompts."""
    from selectrust.generation.backends.hf import MIN_SHARED_PREFIX, _shared_prefix

    head = "system: answer with the value. "
    prompts = [tiny_tokenizer(head + f"key k{i}{' is' * (i % 3)}\n", add_special_tokens=False)["input_ids"]
               for i in range(6)]
    shared = _shared_prefix(prompts)
    assert shared >= len(tiny_tokenizer(head, add_special_tokens=False)["input_ids"]) >= MIN_SHARED_PREFIX
    new, ref = _full_logits_reference(tiny_model, tiny_tokenizer, prompts, 12, do_sample=False)
    widths = []
    hook = tiny_model.register_forward_hook(lambda module, args, kwargs, out: widths.append(tuple(kwargs["input_ids"].shape)),
                                            with_kwargs=True)
    out = HFBackend(tiny_model, tiny_tokenizer)._generate_batch(prompts, 12, 0.0, 1.0, (), None)
    hook.remove()
    assert widths[0] == (1, shared) and widths[1] == (6, max(map(len, prompts)) - shared), widths[:2]
    assert _check(out, new, ref)


def test_shared_prefix_rules():
    from selectrust.generation.backends.hf import MIN_SHARED_PREFIX, _shared_prefix

    long = list(range(20))
    assert _shared_prefix([long + [1], long + [2, 3]]) == 20
    assert _shared_prefix([long, long + [5]]) == 19                 # the shortest prompt keeps one token of its own
    assert _shared_prefix([long[:MIN_SHARED_PREFIX - 1] + [1], long[:MIN_SHARED_PREFIX - 1] + [2]]) == 0
    assert _shared_prefix([[9] + long, long]) == 0


def test_frozen_weights_are_cast_once_per_batch_under_autocast(tiny_model, tiny_tokenizer):
    """torch.autocast caches its bf16 copy of a weight only for a weight that requires grad, so a frozen weight (a
    peft model's base, a policy's frozen layers) was cast again at every decoding step. The backend sets the flag on
    its frozen weights for the batch: fewer casts than decoding the same batch without it, the same tokens and
    log-probs bit for bit, and every flag as it was afterwards, also after an error."""
    import copy

    from selectrust.generation.backends.hf import _casts_cached, _decode, _token_picker

    model = copy.deepcopy(tiny_model)
    for i, p in enumerate(model.parameters()):  # half frozen, as a LoRA policy's base is
        p.requires_grad_(i % 2 == 0)
    flags = [p.requires_grad for p in model.parameters()]
    backend = HFBackend(model, tiny_tokenizer, autocast_dtype=torch.bfloat16)
    prompts = _prompts(tiny_tokenizer)

    def casts(fn):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = fn()
        return out, sum(e.name == "aten::_to_copy" for e in prof.events())

    def uncached():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return _decode(model, prompts, 8, _token_picker(0.0, 1.0, None, 8, torch.device("cpu")),
                           eos=backend._eos_ids(), pad=tiny_tokenizer.pad_token_id)

    ours, n_ours = casts(lambda: backend._generate_batch(prompts, 8, 0.0, 1.0, (), None))
    ref, n_ref = casts(uncached)
    assert [s.token_ids for s in ours] == [ids for ids, _ in ref]
    assert [s.logprobs for s in ours] == [logp for _, logp in ref]
    assert max(len(s.token_ids) for s in ours) > 1  # several decoding steps, so recasting would show
    assert n_ours < n_ref, (n_ours, n_ref)
    assert [p.requires_grad for p in model.parameters()] == flags
    with pytest.raises(RuntimeError, match="mid-batch"):
        with _casts_cached(model, True):
            assert all(p.requires_grad for p in model.parameters())
            raise RuntimeError("mid-batch")
    assert [p.requires_grad for p in model.parameters()] == flags


@pytest.mark.parametrize("mode", ["greedy", "seeded", "unseeded"])
def test_repeated_prompts_share_one_prompt_pass_and_change_nothing(tiny_model, tiny_tokenizer, mode, monkeypatch):
    """A request's n samples (a GRPO group) repeat one prompt: the prompt pass runs on the distinct prompts only
    (its KV cache and last logits repeated for their rows) and tokens and log-probs equal those of running every
    row's prompt (greedy: ``generate``'s; sampled: the per-row or global-RNG draws of the unshared batch)."""
    import selectrust.generation.backends.hf as hf

    distinct = _prompts(tiny_tokenizer, 3)
    prompts = [p for p in distinct for _ in range(4)]  # 3 groups of 4, as GRPO's rollouts ask for them
    args, kwargs = {"greedy": ((0.0, 1.0, (), None), {}),
                    "seeded": ((1.0, 1.0, (), None), {"row_seeds": list(range(12))}),
                    "unseeded": ((0.8, 0.95, (), 11), {})}[mode]
    backend = HFBackend(tiny_model, tiny_tokenizer)
    shapes = []
    hook = tiny_model.register_forward_hook(lambda module, a, kw, out: shapes.append(tuple(kw["input_ids"].shape)),
                                            with_kwargs=True)
    shared = backend._generate_batch(prompts, 8, *args, **kwargs)
    hook.remove()
    assert shapes[0] == (3, max(map(len, distinct))) and all(s[1] == 1 for s in shapes[1:]), shapes[:3]
    # the reference: the same decoding with every row's prompt run (the distinct-prompt step undone)
    monkeypatch.setattr(hf, "_distinct_rows", lambda ids: ([list(p) for p in ids], list(range(len(ids)))))
    unshared = backend._generate_batch(prompts, 8, *args, **kwargs)
    for a, b in zip(shared, unshared, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
    if mode == "greedy":
        new, ref = _full_logits_reference(tiny_model, tiny_tokenizer, prompts, 8, do_sample=False)
        assert _check(shared, new, ref)
    else:  # sampled rows of one prompt differ from each other: the draws are per row
        assert len({tuple(s.token_ids) for s in shared[:4]}) > 1


def test_distinct_rows():
    from selectrust.generation.backends.hf import _distinct_rows

    assert _distinct_rows([[1, 2], [3], [1, 2], [3], [4]]) == ([[1, 2], [3], [4]], [0, 1, 0, 1, 2])
