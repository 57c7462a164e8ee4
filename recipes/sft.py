"""Box2 counterfactual SFT (docs/box2.md#counterfactual-sft), single- and multi-turn; also plain SFT on a chat mix.

    python recipes/sft.py                                          # tiny CPU default (recipe=box2_sft_tiny)
    python recipes/sft.py algo=counterfactual_sft_multiturn data.train_path=episodes.jsonl
    accelerate launch --config_file launch/ddp.yaml recipes/sft.py recipe=<yours> data.train_path=cf_sft.jsonl

Data: ``{"messages": [...]}`` or ``{"prompt", "completion"}`` rows (``trainer.sft.data.load_sft_examples``).
Counterfactual rows put the task *and the bad workflow* in the user turn and a verified-correct
trajectory in the assistant turn (``eval_hooks.builders.workflows`` builds and freezes the workflows; the good
workflow is never trained on). Loss: NLL of the target tokens only, ``L = -log pi(tau+ | x, W_B)``.

How this departs from TRL's SFTTrainer (same token-mean loss: tests/recipes/test_sft_recipe.py):
- prompt and completion are tokenised separately (what the model sees when it generates the
  completion), not as one string;
- multi-turn (``algo.multi_turn``): every assistant turn is a target through the chat template's
  ``{% generation %}`` mask (or per-turn rendering when the template lacks the tags); over-long
  conversations keep their start;
- ``algo.aggregation=sequence_mean`` gives every example equal weight (not in TRL).
"""

from __future__ import annotations

from functools import partial

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_sft
from trainer.config.roots import SFTRunConfig
from trainer.config.settings import to_settings
from selectrust.core.io import write_json_atomic
from selectrust.generation.prompts import PromptSettings
from trainer.eval_bridge import load_eval_rows, make_backend
from trainer.runtime.run import setup_run
from trainer.sft.data import WindowSource, apply_sft_length_policy, collate_sft, load_sft_examples
from trainer.sft.step import sft_step

register_schemas()


def run(cfg: DictConfig | SFTRunConfig):
    """Train; returns the loop's ``LoopResult`` (step, preempted, final metrics). ``cfg``: the composed config
    (checked and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.runtime.distributed import reduce_sum  # deferred: imports torch
    from trainer.data.train_data import SamplerSource, ShuffleSampler, resolve_data_path  # deferred: imports numpy
    from trainer.logprobs.logprobs import sequence_logprobs  # deferred: tests patch it
    from trainer.train import train_evaluate_finish  # deferred: imports torch, numpy
    from selectrust.model import load_policy  # deferred: tests patch it
    from trainer.runtime.optim import build_optimizer, build_scheduler  # deferred: imports torch

    # ---- validate everything before any model loads -------------------------------------------------
    cfg: SFTRunConfig = to_settings(cfg, validate_sft)  # the typed settings, from here down
    sequence_logprobs = partial(sequence_logprobs, logprob_chunk=cfg.model.logprob_chunk)  # 0 = full logits
    algo, dcfg = cfg.algo, cfg.data
    examples = load_sft_examples(dcfg.train_path)
    eval_rows = load_eval_rows(cfg.eval)

    # ---- build ------------------------------------------------------------------------------------
    ctx = setup_run(cfg, "sft")
    acc = ctx.accelerator
    model, tokenizer = load_policy(cfg.model, seed=cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    lengths = dict(multi_turn=algo.multi_turn, max_prompt_len=dcfg.max_prompt_len,
                   max_completion_len=dcfg.max_completion_len, truncation=dcfg.truncation, prompt_settings=prompt)
    examples, stats = apply_sft_length_policy(examples, tokenizer, path=resolve_data_path(dcfg.train_path), **lengths)
    if ctx.is_main:
        write_json_atomic(ctx.run_dir / "data_stats.json", stats)
        print(f"[selectrust] sft examples: {stats}", flush=True)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, max_steps=cfg.trainer.max_steps)
    model, optimizer = acc.prepare(model, optimizer)
    unwrapped = acc.unwrap_model(model)

    def collate(indices: list[int], weights: list[float]) -> dict:
        return collate_sft(tokenizer, [examples[i] for i in indices], **lengths)

    sampler = ShuffleSampler(len(examples), seed=cfg.seed, block=cfg.optim.batch_size * acc.num_processes,
                             lengths=[ex["num_tokens"] for ex in examples] if dcfg.group_by_length else None)
    source = WindowSource(SamplerSource(sampler, collate,
                                        batch_size=cfg.optim.batch_size, rank=acc.process_index,
                                        world=acc.num_processes), grad_accum=cfg.optim.grad_accum,
                          world=acc.num_processes,
                          reduce_sum=partial(reduce_sum, acc))

    # ---- one micro-batch ----------------------------------------------------------------------------
    step_fn = partial(sft_step, aggregation=algo.aggregation, device=acc.device, logprobs=sequence_logprobs)

    # ---- loop, evaluation, save ------------------------------------------------------------------------
    return train_evaluate_finish(ctx, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                                 step_fn=step_fn, tokenizer=tokenizer, eval_rows=eval_rows,
                                 backend_factory=lambda: make_backend(cfg.generation, unwrapped, tokenizer,
                                                                      model_path=cfg.model.path,
                                                                      prompt_settings=prompt))


@hydra.main(config_path=str(CONF_DIR), config_name="sft", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("sft", main)
