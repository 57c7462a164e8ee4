"""Top-K forward KL with a remainder bucket, the 2-way choice KL and the stage-2 choice CE.

Hand example (V = 3): p_T = (0.5, 0.3, 0.2), p_S = (0.25, 0.25, 0.5); logits = log p.
  full KL = 0.5 log 2 + 0.3 log 1.2 + 0.2 log 0.4 = 0.3465736 + 0.0546965 - 0.1832581 = 0.2180120
  k = 1, teacher support S = {0}: 0.5 log(0.5/0.25) + bucket 0.5 log(0.5/0.75) = 0.3465736 - 0.2027326 = 0.1438410
  k = 1, student support S = {2}: 0.2 log(0.2/0.5) + bucket 0.8 log(0.8/0.5) = -0.1832581 + 0.3760029 = 0.1927448
  k = 1, union S = {0, 2}: bucket {1} is a single token, so the value is the full KL 0.2180120
"""

import math

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.distill import choice_ce, choice_kl, gathered_forward_kl, topk_forward_kl, topk_support_index

TIGHT = {"rtol": 1e-6, "atol": 1e-7}
T_LOGITS = torch.tensor([[[0.5, 0.3, 0.2]]]).log()  # (1, 1, 3)
S_LOGITS = torch.tensor([[[0.25, 0.25, 0.5]]]).log()
ONE = torch.ones(1, 1)


@pytest.mark.parametrize("support,k,expected", [
    ("teacher", 1, 0.1438410), ("student", 1, 0.1927448), ("union", 1, 0.2180120),
    ("teacher", 2, 0.2180120), ("teacher", 3, 0.2180120), ("student", 5, 0.2180120),
])
def test_hand_values(support, k, expected):
    loss, m = topk_forward_kl(T_LOGITS, S_LOGITS, ONE, k=k, support=support)
    assert_close(loss, torch.tensor(expected), **TIGHT)
    if (support, k) == ("teacher", 1):
        assert_close(m["teacher_mass"], torch.tensor(0.5))
        assert_close(m["student_mass"], torch.tensor(0.25))


def _full_kl(t, s, mask):
    lt, ls = torch.log_softmax(t, -1), torch.log_softmax(s, -1)
    kl = (lt.exp() * (lt - ls)).sum(-1)
    return (kl * mask).sum() / mask.sum()


@pytest.mark.parametrize("support", ["teacher", "student", "union"])
def test_k_equal_vocab_is_full_kl_with_same_gradient(support):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(2, 5, 13, generator=g) * 3
    s = (torch.randn(2, 5, 13, generator=g) * 3).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]])
    loss, m = topk_forward_kl(t, s, mask, k=13, support=support)
    (g_ours,) = torch.autograd.grad(loss, s)
    ref = _full_kl(t, s, mask)
    (g_ref,) = torch.autograd.grad(ref, s)
    assert_close(loss, ref)
    assert_close(g_ours, g_ref)
    assert m["num_positions"].item() == 7  # 3 + 4 masked positions


def test_truncated_kl_matches_plain_loop_and_is_bounded_by_full_kl():
    g = torch.Generator().manual_seed(1)
    t = torch.randn(3, 4, 20, generator=g, dtype=torch.float64) * 2
    s = torch.randn(3, 4, 20, generator=g, dtype=torch.float64) * 2
    mask = torch.ones(3, 4)
    full = _full_kl(t, s, mask).item()
    for support in ["teacher", "student", "union"]:
        for k in [1, 3, 7]:
            loss, _ = topk_forward_kl(t, s, mask, k=k, support=support)
            total = 0.0
            for b in range(3):
                for i in range(4):
                    pt, ps = t[b, i].softmax(-1).tolist(), s[b, i].softmax(-1).tolist()
                    top_t = sorted(range(20), key=lambda v: -pt[v])[:k]
                    top_s = sorted(range(20), key=lambda v: -ps[v])[:k]
                    sup = {"teacher": set(top_t), "student": set(top_s), "union": set(top_t) | set(top_s)}[support]
                    kl = sum(pt[v] * math.log(pt[v] / ps[v]) for v in sup)
                    rt, rs = 1 - sum(pt[v] for v in sup), 1 - sum(ps[v] for v in sup)
                    total += kl + rt * math.log(rt / rs)
            assert loss.item() == pytest.approx(total / 12, rel=1e-9), (support, k)
            assert 0.0 <= loss.item() <= full + 1e-12


def test_teacher_gets_no_gradient_and_grads_are_finite_when_support_holds_almost_all_mass():
    t = torch.tensor([[[30.0, 0.0, 0.0, 0.0]]], requires_grad=True)  # teacher top-1 holds ~all mass
    s = torch.tensor([[[20.0, 0.0, 0.0, 0.0]]], requires_grad=True)
    loss, _ = topk_forward_kl(t, s, ONE, k=1, support="teacher")
    loss.backward()
    assert t.grad is None or torch.count_nonzero(t.grad) == 0
    assert torch.isfinite(s.grad).all() and torch.isfinite(loss)


# ---- the gathered form (log-probs on the support only; the trainer never builds (..., V) logits) --------------------

def test_gathered_hand_values():
    """The V = 3 hand example from gathered log-probs alone. Teacher support {0}: log p_T = log 0.5,
    log p_S = log 0.25 -> 0.1438410. Union {0, 2} written as teacher ids (0,) + student ids (2,) -> full KL
    0.2180120; union with the student's id a duplicate of the teacher's (0,) + (0,) invalid -> 0.1438410 again.
    All three tokens valid (S = V): the bucket is empty, the value is the full KL."""
    lt, ls = T_LOGITS.log_softmax(-1), S_LOGITS.log_softmax(-1)

    def kl(idx, valid):
        idx = torch.tensor([[idx]])
        return gathered_forward_kl(lt.gather(-1, idx), ls.gather(-1, idx), torch.tensor([[valid]]), ONE, vocab=3)

    loss, m = kl([0], [True])
    assert_close(loss, torch.tensor(0.1438410), **TIGHT)
    assert_close(m["teacher_mass"], torch.tensor(0.5))
    assert_close(m["student_mass"], torch.tensor(0.25))
    assert_close(kl([0, 2], [True, True])[0], torch.tensor(0.2180120), **TIGHT)
    assert_close(kl([0, 0], [True, False])[0], torch.tensor(0.1438410), **TIGHT)
    assert_close(kl([0, 1, 2], [True, True, True])[0], torch.tensor(0.2180120), **TIGHT)


def test_support_index_union_marks_duplicates():
    idx, valid = topk_support_index(torch.tensor([[4, 1]]), torch.tensor([[1, 7]]), "union")
    assert idx.tolist() == [[4, 1, 1, 7]] and valid.tolist() == [[True, True, False, True]]
    idx, valid = topk_support_index(None, torch.tensor([[1, 7]]), "student")
    assert idx.tolist() == [[1, 7]] and valid.all()
    with pytest.raises(ValueError, match="support"):
        topk_support_index(None, None, "both")


@pytest.mark.parametrize("support", ["teacher", "student", "union"])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_gathered_equals_dense_on_random_inputs(support, temperature):
    """Gathering the full-vocabulary log-probs at the support by hand (a plain log_softmax) and calling
    gathered_forward_kl gives topk_forward_kl's loss, metrics and student gradient."""
    g = torch.Generator().manual_seed(3)
    V, k = 50, 6
    t = torch.randn(3, 7, V, generator=g, dtype=torch.float64) * 3
    s = (torch.randn(3, 7, V, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    mask = (torch.rand(3, 7, generator=g) > 0.3).double()
    dense, m_dense = topk_forward_kl(t, s, mask, k=k, support=support, temperature=temperature)
    (g_dense,) = torch.autograd.grad(dense, s)
    lt, ls = torch.log_softmax(t / temperature, -1), torch.log_softmax(s / temperature, -1)
    idx, valid = topk_support_index(lt.topk(k, -1).indices, ls.detach().topk(k, -1).indices, support)
    got, m_got = gathered_forward_kl(lt.gather(-1, idx), ls.gather(-1, idx), valid, mask, vocab=V)
    (g_got,) = torch.autograd.grad(got, s)
    assert dense.item() > 0.01
    assert_close(got, dense, rtol=1e-12, atol=1e-12)
    assert_close(g_got, g_dense, rtol=1e-10, atol=1e-12)
    for key in ("kl", "teacher_mass", "student_mass", "num_positions"):
        assert_close(m_got[key], m_dense[key].to(m_got[key].dtype), rtol=1e-12, atol=1e-12)


def test_gathered_bad_input():
    x = torch.zeros(1, 1, 2)
    with pytest.raises(ValueError, match="same shape"):
        gathered_forward_kl(x, torch.zeros(1, 1, 3), torch.ones(1, 1, 2, dtype=torch.bool), ONE, vocab=5)
    with pytest.raises(ValueError, match="mask"):
        gathered_forward_kl(x, x, torch.ones(1, 1, 2, dtype=torch.bool), torch.ones(2), vocab=5)


def test_choice_kl_hand_value():
    """q = softmax(0, log 3) = (0.25, 0.75), p = (0.5, 0.5): KL = 0.25 log 0.5 + 0.75 log 1.5 = 0.1308120.
    With temperature 2 the teacher logits (0, 2 log 3) give the same q, the student (0, 0) the same p."""
    loss, m = choice_kl(torch.tensor([[0.0, math.log(3.0)]]), torch.zeros(1, 2), temperature=1.0)
    assert_close(loss, torch.tensor(0.1308120), **TIGHT)
    loss2, _ = choice_kl(torch.tensor([[0.0, 2 * math.log(3.0)]]), torch.zeros(1, 2), temperature=2.0)
    assert_close(loss2, torch.tensor(0.1308120), **TIGHT)


def test_choice_ce_hand_value():
    """softmax((0, 2 log 3) / 2) = (0.25, 0.75); label A (0): -log 0.25 = 1.3862944; label B: -log 0.75 = 0.2876821."""
    logits = torch.tensor([[0.0, 2 * math.log(3.0)], [0.0, 2 * math.log(3.0)]])
    loss, m = choice_ce(logits, torch.tensor([0, 1]), temperature=2.0)
    assert_close(loss, torch.tensor((1.3862944 + 0.2876821) / 2), **TIGHT)
    assert m["accuracy"].item() == 0.5
    assert_close(m["p_label"], torch.tensor(0.5))


def test_bad_input():
    with pytest.raises(ValueError, match="support"):
        topk_forward_kl(T_LOGITS, S_LOGITS, ONE, k=1, support="both")
    with pytest.raises(ValueError, match="mask"):
        topk_forward_kl(T_LOGITS, S_LOGITS, torch.ones(1), k=1)
    with pytest.raises(ValueError, match="labels must be in"):
        choice_ce(torch.zeros(1, 2), torch.tensor([2]), temperature=1.0)


# ---- the worked examples of the Taste-Bench paper's write-up (docs/taste.md#distillation) ----------------------------

def test_seed_three_token_example():
    """Teacher (0.7, 0.2, 0.1) vs student (0.4, 0.4, 0.2), all tokens kept:
    0.7 ln(0.7/0.4) + 0.2 ln(0.2/0.4) + 0.1 ln(0.1/0.2) = 0.39174 - 0.13863 - 0.06931 = 0.18379."""
    t = torch.tensor([[[0.7, 0.2, 0.1]]], dtype=torch.float64).log()
    s = torch.tensor([[[0.4, 0.4, 0.2]]], dtype=torch.float64).log()
    loss, _ = topk_forward_kl(t, s, ONE, k=3, support="teacher")
    assert loss.item() == pytest.approx(0.18379, abs=5e-6)
    same, _ = topk_forward_kl(t, t.clone(), ONE, k=3)
    assert same.item() == pytest.approx(0.0, abs=1e-12)


# tokens: jia, yi, ding, other (one token standing for the rest of the vocabulary)
SEED_S = torch.tensor([[[0.5, 0.3, 0.01, 0.19]]], dtype=torch.float64).log()
SEED_T = torch.tensor([[[0.2, 0.1, 0.6, 0.1]]], dtype=torch.float64).log()


def test_seed_truncation_example_student_top2():
    """Student's top-2 (jia, yi) as buckets, ding falls into the remainder (student 0.20, teacher 0.70):
    0.2 ln(0.2/0.5) + 0.1 ln(0.1/0.3) + 0.7 ln(0.7/0.2) = -0.18326 - 0.10986 + 0.87693 = 0.58381."""
    loss, m = topk_forward_kl(SEED_T, SEED_S, ONE, k=2, support="student")
    assert loss.item() == pytest.approx(0.58381, abs=5e-6)
    assert m["student_mass"].item() == pytest.approx(0.8)
    assert m["teacher_mass"].item() == pytest.approx(0.3)


def test_seed_truncation_example_teacher_top3_is_the_full_kl():
    """Teacher's top-3 (ding, jia, yi), the rest (teacher 0.1, student 0.19) in the bucket:
    0.6 ln(0.6/0.01) + 0.2 ln(0.2/0.5) + 0.1 ln(0.1/0.3) + 0.1 ln(0.1/0.19) = 2.09930, the untruncated KL;
    3.6 x the student-support value."""
    loss, _ = topk_forward_kl(SEED_T, SEED_S, ONE, k=3, support="teacher")
    assert loss.item() == pytest.approx(2.09930, abs=5e-6)
    full = _full_kl(SEED_T, SEED_S, ONE)
    assert loss.item() == pytest.approx(full.item(), rel=1e-12)
    union, _ = topk_forward_kl(SEED_T, SEED_S, ONE, k=2, support="union")  # {jia, yi} u {ding, jia}
    assert union.item() == pytest.approx(2.09930, abs=5e-6)


def test_seed_choice_position_example():
    """Teacher P(A) = 0.95 vs student 0.55: 0.95 ln(0.95/0.55) + 0.05 ln(0.05/0.45) = 0.51922 - 0.10986 = 0.40936."""
    t = torch.tensor([[0.95, 0.05]], dtype=torch.float64).log()
    s = torch.tensor([[0.55, 0.45]], dtype=torch.float64).log()
    loss, m = choice_kl(t, s)
    assert loss.item() == pytest.approx(0.40936, abs=5e-6)
    assert m["agreement"].item() == 1.0
