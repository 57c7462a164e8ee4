"""Full-vocabulary limit of ``topk_forward_kl`` against TRL 1.16's distillation divergence.

TRL's ``DistillationTrainer`` computes its generalized JSD (``beta=0`` is the forward KL
``sum_v p_T log(p_T / p_S)``) in the private helper ``_chunked_divergence_loss(student_hidden,
teacher_hidden, student_lm_head_weight, teacher_lm_head_weight, completion_mask, beta, ...)``, which
projects hidden states through the LM heads itself. Passing the logits as "hidden states" with an
identity LM head makes it score exactly those logits. With ``k = V`` our truncated KL has an empty
remainder bucket and must equal it (value and student gradient), for temperature 1 and 2. The helper is
private, so the test is skipped if a TRL version moves it.
"""

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.distill import topk_forward_kl

pytest.importorskip("trl")
distill_mod = pytest.importorskip("trl.trainer.distillation_trainer")


@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("support", ["teacher", "student", "union"])
def test_full_vocab_forward_kl_matches_trl(temperature, support):
    fn = getattr(distill_mod, "_chunked_divergence_loss", None)
    if fn is None:
        pytest.skip("this TRL version has no _chunked_divergence_loss")
    g = torch.Generator().manual_seed(0)
    V = 11
    teacher = torch.randn(2, 5, V, generator=g) * 2
    student = (torch.randn(2, 5, V, generator=g) * 2).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]])
    eye = torch.eye(V)
    theirs, _, n_valid = fn(student, teacher, eye, eye, mask, beta=0.0, temperature=temperature)
    (g_theirs,) = torch.autograd.grad(theirs, student)
    ours, m = topk_forward_kl(teacher, student, mask, k=V, support=support, temperature=temperature)
    (g_ours,) = torch.autograd.grad(ours, student)
    assert int(n_valid) == int(m["num_positions"]) == 7
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-6)
