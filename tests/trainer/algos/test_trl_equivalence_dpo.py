"""Our sigmoid DPO against TRL 1.16's ``DPOTrainer``.

Two levels:

1. Loss level: TRL computes its DPO loss inside ``DPOTrainer._compute_loss(model, inputs, ...)``, which
   also runs the model. To feed it identical log-probs we call that method unbound with a stand-in
   ``self`` (only the attributes the method reads) and a stand-in model whose forward returns the
   given per-token log-probs in TRL's fused-LM-head output format. TRL's own arithmetic is untouched.
2. Model level: a real ``DPOTrainer`` (fp32, CPU, no gradient checkpointing, no padding-free, a frozen
   copy as ``ref_model``) computes its loss on a batch of 3 pairs from the tiny Llama; our pipeline
   (``build_preference_batch`` -> ``sequence_logprobs`` on policy and reference -> ``sigmoid_dpo_loss``)
   must give the same token ids, loss and parameter gradients to 1e-5.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.dpo import sigmoid_dpo_loss
from trl.trainer.dpo_trainer import DPOTrainer


# ---------------------------------------------------------------------------------------------------------------------
# Loss level
# ---------------------------------------------------------------------------------------------------------------------


class _Accel:
    device = torch.device("cpu")

    def gather(self, x):
        return x

    gather_for_metrics = gather


def _trl_dpo_loss(policy_c, policy_r, ref_c, ref_r, *, beta, loss_type="sigmoid", label_smoothing=0.0):
    """Run TRL's ``_compute_loss`` on given sequence log-probs; returns (loss, TRL metrics)."""
    n = policy_c.shape[0]
    # Put each sequence log-prob on one completion token, so TRL's sum over tokens returns it exactly.
    per_token = torch.stack([torch.cat([policy_c, policy_r]), torch.zeros(2 * n)], dim=1)  # (2n, T-1=2)
    completion_mask = torch.tensor([[0, 1, 0]] * (2 * n))
    fused_out = SimpleNamespace(log_probs=per_token, entropy=torch.zeros(2 * n, 2),
                                mean_logits=torch.zeros(2 * n, 2), is_top1=torch.zeros(2 * n, 2, dtype=torch.bool))
    model = lambda **kwargs: fused_out  # noqa: E731  stand-in forward: TRL's fused head output
    fake_self = SimpleNamespace(
        model=SimpleNamespace(training=True), accelerator=_Accel(), aux_loss_enabled=False, ld_alpha=None,
        precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
        beta=beta, label_smoothing=label_smoothing, use_weighting=False, _total_train_tokens=0, _tp_size=1,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)}, args=SimpleNamespace(),
    )
    inputs = {"input_ids": torch.zeros(2 * n, 3, dtype=torch.long), "attention_mask": torch.ones(2 * n, 3),
              "completion_mask": completion_mask, "ref_chosen_logps": ref_c, "ref_rejected_logps": ref_r}
    loss = DPOTrainer._compute_loss(fake_self, model, inputs, return_outputs=False)
    return loss, {k: v[-1] for k, v in fake_self._metrics["train"].items()}


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_sigmoid_loss_and_metrics_match_trl_on_identical_logps(beta):
    g = torch.Generator().manual_seed(int(beta * 10))
    pc, pr, rc, rr = (torch.randn(6, generator=g) * 5 - 20 for _ in range(4))
    ours, m = sigmoid_dpo_loss(pc, pr, rc, rr, beta=beta)
    theirs, tm = _trl_dpo_loss(pc, pr, rc, rr, beta=beta)
    assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    for ours_key, trl_key in [("rewards/chosen", "rewards/chosen"), ("rewards/rejected", "rewards/rejected"),
                              ("rewards/margins", "rewards/margins"), ("rewards/accuracies", "rewards/accuracies"),
                              ("logps/chosen", "logps/chosen"), ("logps/rejected", "logps/rejected")]:
        assert m[ours_key].item() == pytest.approx(tm[trl_key], rel=1e-6, abs=1e-6), ours_key


def test_trl_116_sigmoid_ignores_label_smoothing_so_cdpo_is_checked_against_aot_single_pair():
    """TRL 1.16's ``sigmoid`` drops ``label_smoothing``; its ``aot`` loss is the cDPO form on sorted
    log-ratio differences, which for one pair is cDPO itself: delta = (pc - pr) - (rc - rr)."""
    pc, pr, rc, rr = (torch.tensor([v]) for v in (-10.0, -12.5, -11.0, -12.0))  # delta = 2.5 - 1.0 = 1.5
    eps = 0.2
    sig_smoothed, _ = _trl_dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=eps)
    sig_plain, _ = _trl_dpo_loss(pc, pr, rc, rr, beta=0.5)
    assert_close(sig_smoothed, sig_plain)  # documents the TRL 1.16 behaviour our docstring mentions
    ours, _ = sigmoid_dpo_loss(pc, pr, rc, rr, beta=0.5, label_smoothing=eps)
    aot, _ = _trl_dpo_loss(pc, pr, rc, rr, beta=0.5, loss_type="aot", label_smoothing=eps)
    assert_close(ours, aot, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(ours, sig_plain)  # smoothing really changed the value


# ---------------------------------------------------------------------------------------------------------------------
# Model level
# ---------------------------------------------------------------------------------------------------------------------

PAIRS = [
    ("What is 2 + 2?", "2 + 2 = 4. The answer is 4.", "The note says 5, so the answer is 5."),
    ("Is the sky green?", "No.", "Yes, the document says so."),
    ("Name a prime number between 10 and 15.", "11", "12 is prime."),
]


def _trl_trainer(policy, ref, tokenizer, train_dataset, tmp_path, beta):
    from trl import DPOConfig

    args = DPOConfig(
        output_dir=str(tmp_path / "trl_dpo"), use_cpu=True, bf16=False, fp16=False, beta=beta,
        loss_type=["sigmoid"], per_device_train_batch_size=len(PAIRS), gradient_checkpointing=False,
        padding_free=False, precompute_ref_log_probs=False, max_length=None, report_to=[], logging_steps=1,
        dataset_num_proc=None, seed=0,
    )
    return DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=train_dataset, processing_class=tokenizer)


def test_model_level_loss_and_gradients_match_trl_dpo_trainer(tiny_model_dir, tiny_tokenizer, tmp_path):
    from datasets import Dataset

    from selectrust.model import load_model
    from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs

    beta = 0.1
    tok = tiny_tokenizer
    policy = load_model(str(tiny_model_dir))
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    # Move the policy away from the reference so the loss is not at its log 2 starting point and a swapped
    # policy/reference (or chosen/rejected) would change the result.
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))

    prompts = [p for p, _, _ in PAIRS]
    chosen = [c for _, c, _ in PAIRS]
    rejected = [r for _, _, r in PAIRS]
    rendered = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
                for p in prompts]
    # Non-conversational TRL input: the already-rendered prompt text; TRL appends EOS to the completions.
    ds = Dataset.from_dict({"prompt": rendered, "chosen": chosen, "rejected": rejected})
    trainer = _trl_trainer(policy, ref, tok, ds, tmp_path, beta)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(PAIRS))])

    # Same token ids, masks and layout ([chosen; rejected], right-padded) from our batch builder.
    ours_batch = build_preference_batch(tok, prompts, chosen, rejected, max_prompt_len=256, max_completion_len=256)
    assert ours_batch.stats["num_prompts_truncated"] == ours_batch.stats["num_completions_truncated"] == 0
    assert torch.equal(ours_batch.input_ids, batch["input_ids"])
    assert torch.equal(ours_batch.attention_mask, batch["attention_mask"])
    assert torch.equal(ours_batch.completion_mask, batch["completion_mask"])

    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    trl_loss = trainer.compute_loss(model, dict(batch))
    trl_loss.backward()
    trl_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    seq_pol, _, _ = sequence_logprobs(model, ours_batch.input_ids, ours_batch.attention_mask,
                                      ours_batch.completion_mask)
    with torch.no_grad():
        seq_ref, _, _ = sequence_logprobs(ref, ours_batch.input_ids, ours_batch.attention_mask,
                                          ours_batch.completion_mask)
    pol_c, pol_r = seq_pol.chunk(2)
    ref_c, ref_r = seq_ref.chunk(2)
    our_loss, metrics = sigmoid_dpo_loss(pol_c, pol_r, ref_c, ref_r, beta=beta)
    our_loss.backward()

    assert abs(our_loss.item() - torch.log(torch.tensor(2.0)).item()) > 1e-3  # not the trivial starting point
    assert_close(our_loss, trl_loss.detach(), rtol=1e-5, atol=1e-5)
    worst = 0.0
    for name, p in model.named_parameters():
        assert_close(p.grad, trl_grads[name], rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
        worst = max(worst, (p.grad - trl_grads[name]).abs().max().item())
    assert any(g.abs().sum() > 0 for g in trl_grads.values())
    trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    assert metrics["rewards/margins"].item() == pytest.approx(trl_metrics["rewards/margins"], abs=1e-5)
    assert metrics["rewards/accuracies"].item() == pytest.approx(trl_metrics["rewards/accuracies"])


# ---------------------------------------------------------------------------------------------------------------------
# SimPO (reference-free, length-normalised) against TRL 1.16's CPOTrainer(loss_type="simpo", cpo_alpha=0)
# ---------------------------------------------------------------------------------------------------------------------


def _trl_simpo(policy_c, policy_r, *, beta, gamma, label_smoothing=0.0):
    """TRL's ``CPOTrainer.cpo_loss`` run unbound with a stand-in ``self`` (the attributes it reads); per-pair losses
    and TRL's rewards."""
    from trl.experimental.cpo.cpo_trainer import CPOTrainer

    fake_self = SimpleNamespace(alpha=0.0, loss_type="simpo", simpo_gamma=gamma, beta=beta,
                                label_smoothing=label_smoothing, accelerator=_Accel())
    return CPOTrainer.cpo_loss(fake_self, policy_c, policy_r)


@pytest.mark.parametrize("beta, gamma, eps", [(2.0, 1.0, 0.0), (0.5, 0.25, 0.0), (10.0, 5.0, 0.1), (2.5, 0.0, 0.3)])
def test_simpo_loss_and_rewards_match_trl_cpo_simpo_on_identical_logps(beta, gamma, eps):
    from trainer.algos.dpo import simpo_loss

    g = torch.Generator().manual_seed(int(beta * 10 + gamma))
    pc, pr = (torch.randn(8, generator=g, dtype=torch.float32) * 0.5 - 2.0 for _ in range(2))  # per-token means
    ours, m = simpo_loss(pc, pr, beta=beta, gamma=gamma, label_smoothing=eps)
    losses, chosen_rewards, rejected_rewards = _trl_simpo(pc, pr, beta=beta, gamma=gamma, label_smoothing=eps)
    assert_close(ours, losses.mean(), rtol=1e-6, atol=1e-6)
    assert m["rewards/chosen"].item() == pytest.approx(chosen_rewards.mean().item(), rel=1e-6, abs=1e-6)
    assert m["rewards/rejected"].item() == pytest.approx(rejected_rewards.mean().item(), rel=1e-6, abs=1e-6)
    assert m["rewards/margins"].item() == pytest.approx((chosen_rewards - rejected_rewards).mean().item(), abs=1e-6)
    assert m["rewards/accuracies"].item() == (chosen_rewards > rejected_rewards).float().mean().item()


def test_model_level_simpo_matches_trl_cpo_length_normalised_logps_loss_and_gradients(tiny_model_dir, tiny_tokenizer):
    """On the tiny Llama in fp32: our pipeline (``build_preference_batch`` -> ``sequence_logprobs`` -> the registered
    loss's ``sequence_logps`` (per-token means) -> ``simpo_loss``) against TRL's CPO path (``get_batch_logps`` with
    ``average_log_prob=True`` on the same logits, then ``cpo_loss``): same per-token means, loss and gradients."""
    from trl.experimental.cpo.cpo_trainer import CPOTrainer

    from selectrust.model import load_model
    from trainer.dpo.losses import dpo_loss
    from trainer.logprobs.logprobs import build_preference_batch, sequence_logprobs

    beta, gamma = 2.0, 1.0
    simpo = dpo_loss("simpo")
    assert not simpo.reference and simpo.logps == "mean"
    model = load_model(str(tiny_model_dir)).float().train()
    b = build_preference_batch(tiny_tokenizer, [p for p, _, _ in PAIRS], [c for _, c, _ in PAIRS],
                               [r for _, _, r in PAIRS], max_prompt_len=256, max_completion_len=256)
    assert len(set(b.completion_mask.sum(1).tolist())) > 1  # lengths differ, so sum and mean disagree

    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    labels = b.input_ids.masked_fill(b.completion_mask == 0, -100)
    trl_logps = CPOTrainer.get_batch_logps(logits, labels, average_log_prob=True)
    losses, _, _ = _trl_simpo(*trl_logps.chunk(2), beta=beta, gamma=gamma)
    trl_loss = losses.mean()
    model.zero_grad(set_to_none=True)
    trl_loss.backward()
    trl_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    summed, _, _ = sequence_logprobs(model, b.input_ids, b.attention_mask, b.completion_mask)
    ours_logps = simpo.sequence_logps(summed, b.completion_mask.sum(1))
    assert_close(ours_logps, trl_logps.detach(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(summed, ours_logps)
    our_loss, _ = simpo(*ours_logps.chunk(2), beta=beta, gamma=gamma, label_smoothing=0.0, weights=None)
    our_loss.backward()
    assert_close(our_loss, trl_loss.detach(), rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        assert_close(p.grad, trl_grads[name], rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    assert any(g.abs().sum() > 0 for g in trl_grads.values())
