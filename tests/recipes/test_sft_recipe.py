"""Counterfactual SFT: batches and loss against TRL SFTTrainer, multi-turn masks, the window source, an e2e run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.algos.sft import masked_nll_loss
from trainer.sft.data import load_sft_examples
from trainer.logprobs.logprobs import sequence_logprobs
from trainer.sft.data import WindowSource, collate_sft, tokenize_multiturn

ROOT = Path(__file__).resolve().parents[2]
KW = dict(max_prompt_len=256, max_completion_len=16, truncation="keep_end")


def test_single_turn_loss_equals_trl_sfttrainer(tiny_model_dir, tiny_tokenizer, tmp_path):
    """TRL 1.16 SFTTrainer on conversational prompt/completion rows (completion-only loss) vs our collate +
    masked_nll_loss, on the same 4 counterfactual examples and the same weights."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from selectrust.model import load_model

    examples = load_sft_examples("toy:0/box2_sft.jsonl")[:4]
    # make one target longer so token-mean and sequence-mean differ
    examples[1] = {**examples[1], "messages": [examples[1]["messages"][0],
                                               {"role": "assistant", "content": "it is 7 then"}]}
    model = load_model(str(tiny_model_dir))
    batch = collate_sft(tiny_tokenizer, examples, multi_turn=False, **KW)
    _, lp, _ = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    ours, _ = masked_nll_loss(lp, None, batch["completion_mask"], aggregation="token_mean")

    ds = Dataset.from_list([{"prompt": ex["messages"][:1], "completion": ex["messages"][1:]} for ex in examples])
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, report_to=[],
                     completion_only_loss=True, max_length=None, dataloader_drop_last=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tiny_tokenizer)
    trl_batch = next(iter(trainer.get_train_dataloader()))
    # same token rows and the same target positions (TRL shifts labels inside the model)
    ours_rows = sorted((tuple(i[a.bool()].tolist()), tuple(i[c.bool()].tolist()))
                       for i, a, c in zip(batch["input_ids"], batch["attention_mask"], batch["completion_mask"]))
    trl_rows = sorted((tuple(i[a.bool()].tolist()), tuple(i[l != -100].tolist()))
                      for i, a, l in zip(trl_batch["input_ids"], trl_batch["attention_mask"], trl_batch["labels"]))
    assert ours_rows == trl_rows
    n_items = int((trl_batch["labels"] != -100).sum())
    trl_loss = trainer.compute_loss(model, trl_batch, num_items_in_batch=torch.tensor(n_items))
    torch.testing.assert_close(ours, trl_loss, rtol=1e-5, atol=1e-6)


MULTI = [{"role": "user", "content": "find it"}, {"role": "assistant", "content": "look"},
         {"role": "user", "content": "notebook: 7"}, {"role": "assistant", "content": "answer 7"}]


def test_multiturn_masks_every_assistant_turn_and_fallback_agrees(tiny_tokenizer):
    ids, mask = tokenize_multiturn(tiny_tokenizer, MULTI)
    targets = tiny_tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert targets == "look<|end|>answer 7<|end|>"
    plain = tiny_tokenizer.__class__.from_pretrained(tiny_tokenizer.name_or_path)
    plain.chat_template = tiny_tokenizer.chat_template.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    ids2, mask2 = tokenize_multiturn(plain, MULTI)  # per-turn rendering (this template adds "\n" after turns)
    assert plain.decode([t for t, m in zip(ids2, mask2) if m]) == "look<|end|>\nanswer 7<|end|>\n"  # each turn's rendering incl. its separator
    assert plain.decode([t for t, m in zip(ids2, mask2) if not m]).count("notebook: 7") == 1
    b = collate_sft(tiny_tokenizer, [{"item_id": "a", "messages": MULTI}], multi_turn=True, **KW)
    assert b["completion_mask"][0].tolist() == mask


def test_window_source_normalises_over_the_accumulation_window(tiny_tokenizer):
    class Inner:
        epoch = 0

        def __init__(self):
            self.sizes = iter([3, 5])

        def next_microbatch(self):
            n = next(self.sizes)
            return {"completion_mask": torch.ones(1, n, dtype=torch.long)}

        def state_dict(self):
            return {}

    w = WindowSource(Inner(), grad_accum=2)
    a, b = w.next_microbatch(), w.next_microbatch()
    # loop backward: loss_i / grad_accum with loss_i = sum_i / num_items -> total = (sum_a + sum_b) / 8
    assert a["num_items"] == b["num_items"] == 8 / 2


def _run(recipe: str, run_dir: Path, *overrides: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, str(ROOT / "recipes" / recipe), f"trainer.run_dir={run_dir}", "trainer.progress=false",
           *overrides]
    return subprocess.run(cmd, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=timeout)


def test_sft_recipe_end_to_end(tmp_path):
    run = tmp_path / "sft"
    p = _run("sft.py", run, "trainer.max_steps=8", "eval=none", "optim.batch_size=4", "optim.grad_accum=2")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == list(range(1, 9))
    for k in ("loss", "nll_token_mean", "num_tokens", "lr", "grad_norm", "step_seconds"):
        assert k in lines[0], k
    assert lines[-1]["loss"] < lines[0]["loss"] - 0.05  # the target NLL goes down
    assert (run / "final" / "adapter_model.safetensors").exists() and (run / "run_complete.json").exists()
    from trainer.data.train_data import resolve_data_path

    n_rows = sum(1 for line in open(resolve_data_path("toy:0/box2_sft.jsonl")) if line.strip())
    assert json.loads((run / "data_stats.json").read_text())["examples"] == n_rows
