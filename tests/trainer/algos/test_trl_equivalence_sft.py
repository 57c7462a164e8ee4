"""Our masked NLL against TRL 1.16 ``SFTTrainer``'s completion-only loss, on the tiny Llama.

A real ``SFTTrainer`` (fp32, CPU, no packing, no padding-free) collates a prompt/completion batch
(``completion_only_loss`` is on for that format: prompt labels are -100) and computes its loss with its
fused LM head. We run the plain HF forward on the same ids and apply ``masked_nll_loss`` (token mean)
to the shifted logits; loss and parameter gradients must agree to 1e-5.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.sft import masked_nll_loss

EXAMPLES = [
    ("Task: add 17 and 25.\nWorkflow: 1. subtract.\n", "17 + 25 = 42. ANSWER: 42"),
    ("Is 91 prime?\n", "91 = 7 * 13, so no."),
    ("Say hi.\n", "hi"),
]


def test_masked_nll_matches_sft_trainer_completion_only_loss(tiny_model_dir, tiny_tokenizer, tmp_path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from selectrust.model import load_model

    model = load_model(str(tiny_model_dir))
    ds = Dataset.from_dict({"prompt": [p for p, _ in EXAMPLES], "completion": [c for _, c in EXAMPLES]})
    args = SFTConfig(output_dir=str(tmp_path / "trl_sft"), use_cpu=True, bf16=False, fp16=False, packing=False,
                     padding_free=False, per_device_train_batch_size=len(EXAMPLES), report_to=[], max_length=None,
                     dataset_num_proc=None, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tiny_tokenizer)
    assert trainer.completion_only_loss
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(EXAMPLES))])
    labels = batch["labels"]
    assert (labels == -100).any() and (labels != -100).any()

    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    trl_loss = trainer.compute_loss(model, dict(batch))
    trl_loss.backward()
    trl_grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ours, metrics = masked_nll_loss(logits[:, :-1], labels[:, 1:], batch["attention_mask"][:, 1:],
                                    aggregation="token_mean")
    ours.backward()
    assert_close(ours, trl_loss.detach(), rtol=1e-5, atol=1e-5)
    assert metrics["num_tokens"].item() == int((labels[:, 1:] != -100).sum())
    for name, p in model.named_parameters():
        assert_close(p.grad, trl_grads[name], rtol=1e-5, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")

    # sequence_mean weighs the three examples equally, which differs from TRL's token mean here.
    seq_mean, _ = masked_nll_loss(logits[:, :-1].detach(), labels[:, 1:], None, aggregation="sequence_mean")
    assert not torch.allclose(seq_mean, trl_loss.detach(), atol=1e-4)
