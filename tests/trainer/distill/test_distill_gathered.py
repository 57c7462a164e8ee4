"""The gathered-log-probs path of the distillation step (trainer/distill/gathered.py:distill_logprobs) against the dense one.

``dense_reference_kl_terms`` below is the stage-1 step as it was written on full logits: both models'
``(B, P, V)`` logits at the aligned positions (``aligned_logits``), ``topk_forward_kl`` on them and
``choice_kl`` on the raw choice logits. It lives here, not in the trainer, as the reference the gathered
path (``DistillSteps.kl_terms``: hidden states projected ``chunk`` positions at a time, only the support's
and the choice tokens' log-probs kept, the teacher's top-K optionally cached) must reproduce: loss,
every metric and the adapter's gradients within 1e-5 on the tiny model, for each support, at KL
temperature 1 and 2, with and without the teacher cache.
"""

import copy

import pytest
import torch
from torch.testing import assert_close

from distill_fixtures import make_steps
from trainer.algos.distill import choice_kl, topk_forward_kl, topk_support_index
from trainer.distill.aligned import aligned_hidden, aligned_logits, sample_positions
from trainer.distill.gathered import distill_logprobs

TOL = {"rtol": 1e-5, "atol": 1e-7}


@pytest.fixture(scope="module")
def tiny():
    from selectrust.model import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_model("tiny", dtype="float32").eval(), load_tokenizer("tiny")


def _rows(tok):
    ids = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [ids("a short one"), ids("a much longer prompt than the other"), ids("mid length")]
    completions = [ids("xyz\nANSWER: "), ids("q\nANSWER: "), ids("need 3\nANSWER: ")]
    positions = [[0, 2, 5], [], [1, 2, 3, 4]]  # the middle row has no reasoning position, only its choice
    return prompts, completions, positions


def test_aligned_hidden_through_the_head_is_aligned_logits(tiny):
    model, tok = tiny
    prompts, completions, positions = _rows(tok)
    with torch.no_grad():
        tokens, choice, weight, mask = aligned_hidden(model, prompts, completions, positions, tok.pad_token_id, "cpu")
        dense, dmask = aligned_logits(model, prompts, completions, [p + [len(c)] for p, c in zip(positions, completions)],
                                      tok.pad_token_id, "cpu")
    assert tokens.shape == (7, weight.shape[1]) and choice.shape == (3, weight.shape[1])
    assert mask.tolist() == [[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    n = 0
    for b, ps in enumerate(positions):
        for p in range(len(ps)):
            assert_close(tokens[n] @ weight.t(), dense[b, p], rtol=1e-5, atol=1e-5)
            n += 1
        assert_close(choice[b] @ weight.t(), dense[b, len(ps)], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="strictly increasing"):
        aligned_hidden(model, prompts, completions, [[2, 1], [], []], tok.pad_token_id, "cpu")


@pytest.mark.parametrize("support", ["teacher", "student", "union"])
def test_distill_logprobs_are_the_dense_log_probs_on_the_support(tiny, support):
    """Teacher = a perturbed copy on longer prompts; every returned entry is log_softmax(logits / T) of the
    aligned dense logits at the support's ids (top-K of the side(s) the support names), with the padding
    of the position-less row invalid."""
    model, tok = tiny
    teacher = copy.deepcopy(model)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    prompts, completions, positions = _rows(tok)
    t_prompts = [p + tok(" hint: A", add_special_tokens=False)["input_ids"] for p in prompts]
    k, temp, choice_ids = 5, 2.0, [40, 41]

    class Ctx:
        def __enter__(self):
            self.g = torch.no_grad()
            self.g.__enter__()
            return teacher

        def __exit__(self, *exc):
            return self.g.__exit__(*exc)

    got = distill_logprobs(model, Ctx, prompts, t_prompts, completions, positions, pad_id=tok.pad_token_id,
                           device="cpu", choice_ids=choice_ids, k=k, support=support, temperature=temp, chunk=3)
    full_pos = [p + [len(c)] for p, c in zip(positions, completions)]
    with torch.no_grad():
        lt = torch.log_softmax(aligned_logits(teacher, t_prompts, completions, full_pos, tok.pad_token_id, "cpu")[0]
                               / temp, -1)
        ls = torch.log_softmax(aligned_logits(model, prompts, completions, full_pos, tok.pad_token_id, "cpu")[0]
                               / temp, -1)
    mask = got["mask"]
    for b, ps in enumerate(positions):
        n = len(ps)
        idx, valid = topk_support_index(lt[b, :n].topk(k, -1).indices, ls[b, :n].topk(k, -1).indices, support)
        assert torch.equal(got["valid"][b, :n], valid) and not got["valid"][b, n:].any()
        assert_close(got["teacher"][b, :n], lt[b, :n].gather(-1, idx), **TOL)
        assert_close(got["student"][b, :n], ls[b, :n].gather(-1, idx), **TOL)
        assert mask[b].tolist() == [1.0] * n + [0.0] * (mask.shape[1] - n)
        assert_close(got["teacher_choice"][b], lt[b, n, choice_ids], **TOL)
        assert_close(got["student_choice"][b], ls[b, n, choice_ids], **TOL)
    assert got["student"].requires_grad and not got["teacher"].requires_grad and got["vocab"] == lt.shape[-1]


def dense_reference_kl_terms(steps, model, views, completions, positions):
    """The stage-1 loss and metrics on full logits (the trainer's computation before the gathered helper)."""
    a = steps.a
    pad = steps.tokenizer.pad_token_id
    with steps.teacher_model() as m:
        teacher, _ = aligned_logits(m, [steps.prompt_ids(v, True) for v in views], completions, positions, pad, "cpu")
    student, mask = aligned_logits(model, [steps.prompt_ids(v, False) for v in views], completions, positions, pad,
                                   "cpu")
    last = torch.tensor([len(p) - 1 for p in positions])
    rows = torch.arange(len(views))
    tok_mask = mask.clone()
    tok_mask[rows, last] = 0.0
    z_s, z_t = student[rows, last][:, steps.choice_ids], teacher[rows, last][:, steps.choice_ids]
    kw = dict(k=a.topk, support=a.topk_support, temperature=a.kl_temperature)
    tok_loss, tok_m = topk_forward_kl(teacher, student, tok_mask, **kw)
    ch_loss, ch_m = choice_kl(z_t, z_s, temperature=a.kl_temperature)
    loss = a.token_kl_weight * tok_loss + a.choice_kl_weight * ch_loss
    labels = torch.tensor([0 if v.gold == "A" else 1 for v in views])
    metrics = {"token_kl": tok_m["kl"], "choice_kl": ch_m["kl"], "agreement": ch_m["agreement"],
               "teacher_mass": tok_m["teacher_mass"], "student_mass": tok_m["student_mass"],
               "positions": tok_m["num_positions"],
               "student_accuracy": ((z_s[:, 0] < z_s[:, 1]).long() == labels).float().mean()}
    with torch.no_grad():
        for cell in sorted({v.cell for v in views}):
            sel = torch.tensor([v.cell == cell for v in views])
            metrics[f"token_kl/{cell}"] = topk_forward_kl(teacher[sel], student[sel].detach(), tok_mask[sel], **kw)[1]["kl"]
            metrics[f"choice_kl/{cell}"] = choice_kl(z_t[sel], z_s[sel].detach(), temperature=a.kl_temperature)[1]["kl"]
    return loss, metrics


def _grads(model, loss):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params)


@pytest.mark.parametrize("support,cache,temperature,chunk", [
    ("teacher", False, 1.0, 0), ("teacher", True, 1.0, 0), ("teacher", True, 2.0, 5), ("teacher", False, 2.0, 5),
    ("student", False, 1.0, 0), ("student", False, 2.0, 5), ("union", False, 1.0, 5), ("union", False, 2.0, 0),
])
def test_kl_step_equals_the_dense_reference(tmp_path, support, cache, temperature, chunk):
    steps, model, views = make_steps(tmp_path, [f"algo.topk_support={support}", f"algo.teacher_cache={str(cache).lower()}",
                                            f"algo.kl_temperature={temperature}", f"model.logprob_chunk={chunk}"])
    assert steps.chunk == (chunk or 1024)
    if cache:
        steps.fill_teacher_cache(views)
        assert all(steps.cache[v.view_id][0].shape == (len(v.reasoning), 7) for v in views)
        assert steps.cache[views[0].view_id][1].dtype == torch.int32 and len(steps.choice_cache) == len(views)
    loss, metrics = steps.kl_step(model, {"views": views, "epoch": 0})
    completions = [list(v.reasoning) + steps.answer_ids for v in views]
    positions = [sample_positions(len(v.reasoning), 3, seed=steps.cfg.seed, view_id=v.view_id, epoch=0) + [len(c)]
                 for v, c in zip(views, completions)]
    want, want_m = dense_reference_kl_terms(steps, model, views, completions, positions)
    assert want.item() > 0.01 and want_m["token_kl"].item() > 1e-4
    assert_close(loss, want, **TOL)
    assert sorted(metrics) == sorted(want_m) and any("/" in k for k in metrics)
    for key, value in want_m.items():
        assert_close(metrics[key].float(), value.float(), **TOL, msg=key)
    for got_g, want_g in zip(_grads(model, loss), _grads(model, want)):
        assert_close(got_g, want_g, **TOL)


@pytest.mark.parametrize("support", ["teacher", "union"])
def test_kl_step_never_runs_the_lm_head_on_more_than_one_column(tmp_path, support):
    """Both models run with logits_to_keep=1: the LM head module only ever sees one position per row (the
    support's log-probs come from the captured hidden states, a chunk at a time)."""
    from trainer.logprobs.chunked_logprobs import lm_head_of

    steps, model, views = make_steps(tmp_path, [f"algo.topk_support={support}"])
    seen = []
    handle = lm_head_of(model)[1].register_forward_hook(lambda _m, _a, out: seen.append(tuple(out.shape)))
    try:
        loss, _ = steps.kl_step(model, {"views": views, "epoch": 0})
    finally:
        handle.remove()
    assert len(seen) == 2 and all(s[:2] == (len(views), 1) for s in seen), seen  # teacher and student forwards
    assert torch.isfinite(loss)
