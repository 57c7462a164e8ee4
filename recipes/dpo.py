"""SCOPE: quartet-balanced sigmoid DPO (docs/scope.md#objective), plus its baselines and ablations as configs.

    python recipes/dpo.py                                   # tiny CPU default (recipe=scope_tiny)
    accelerate launch recipes/dpo.py recipe=scope_qwen3_4b data.train_path=pairs.jsonl eval.path=mist.jsonl

How this departs from TRL's DPOTrainer (same loss, checked by tests/test_trl_equivalence*):
- pairs are drawn from four condition pools with sampling mass (λ_m, λ_c, λ_p ρ, λ_p (1-ρ)) — or
  weighted in the loss (``algo.weighting=loss``) — and every metric is also reported per condition;
  ``algo=scope_knowledge_aware`` adds the unknown-item pools with mass λ_u (docs/scope.md#knowledge-aware-scope),
  and their metrics per pool (``rewards/accuracies/unknown_correct``);
- the reference is the same LoRA model with its adapter disabled (no second copy): the base, or the
  SFT policy when starting from ``model.init_adapter`` (selectrust/model/policy.py);
- baselines are configs: ``algo=standard_dpo`` (misleading only), ``algo=unmatched``, ``algo=no_clean``
  / ``no_correct`` / ``no_irrelevant``, ``algo=sft_on_chosen``, and Prompt-Defense via ``prompt=prompt_defense``
  with ``trainer.max_steps`` irrelevant (use ``recipes/evaluate.py``).
"""

from __future__ import annotations

from functools import partial

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_dpo
from trainer.config.roots import DPORunConfig
from trainer.config.schemas import DPOAlgoConfig
from trainer.config.settings import to_settings
from selectrust.core.io import write_json_atomic
from selectrust.generation.prompts import PromptSettings
from selectrust.conditions import SCOPE_MASS_DEFAULTS, pool_mass
from trainer.eval_bridge import load_eval_rows, make_backend
from trainer.runtime.run import setup_run
from trainer.dpo.losses import dpo_loss

register_schemas()


def run(cfg: DictConfig | DPORunConfig):
    """Train; returns the loop's ``LoopResult`` (step, preempted, final metrics). ``cfg``: the composed config
    (checked and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.data.train_data import ConditionSampler, SamplerSource, check_pool_mass  # deferred: imports numpy
    from trainer.dpo.data import apply_length_policy, load_pairs, unmatch_pairs  # deferred: imports numpy
    from trainer.logprobs.logprobs import sequence_logprobs  # deferred: tests patch it
    from selectrust.model import Reference, load_policy  # deferred: tests patch it
    from trainer.runtime.optim import build_optimizer, build_scheduler  # deferred: imports torch
    from trainer.train import train_evaluate_finish  # deferred: imports torch, numpy
    from trainer.dpo.pairs import collate_pairs, reference_table, use_shared_prompt  # deferred: imports torch
    from trainer.dpo.step import dpo_step  # deferred: imports torch

    # ---- validate everything before any model loads -------------------------------------------------
    cfg: DPORunConfig = to_settings(cfg, validate_dpo)  # the typed settings, from here down
    loss = dpo_loss(cfg.algo.loss_type)  # what it needs: a reference or none, summed or per-token log-probs
    logprobs = partial(sequence_logprobs, logprob_chunk=cfg.model.logprob_chunk)  # 0 = full logits
    algo, dcfg = cfg.algo, cfg.data
    pairs = load_pairs(dcfg.train_path, on_invalid=dcfg.on_invalid, require_quartets=algo.pairing == "matched")
    if algo.pairing == "unmatched":
        pairs = unmatch_pairs(pairs, seed=cfg.seed)
    eval_rows = load_eval_rows(cfg.eval)
    mass = pool_mass(**{k: getattr(algo, k) for k in SCOPE_MASS_DEFAULTS}, unknown_irrelevant=algo.unknown_irrelevant)
    check_pool_mass(pairs.stats["per_pool"], mass)

    # ---- build ------------------------------------------------------------------------------------
    ctx = setup_run(cfg, "dpo")
    acc = ctx.accelerator
    model, tokenizer = load_policy(cfg.model, seed=cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    pairs = apply_length_policy(pairs, tokenizer, max_prompt_len=dcfg.max_prompt_len,
                                max_completion_len=dcfg.max_completion_len, truncation=dcfg.truncation,
                                prompt_settings=prompt, on_invalid=dcfg.on_invalid)
    if ctx.is_main:
        write_json_atomic(ctx.run_dir / "data_stats.json", {**pairs.stats, "sampling_mass": mass})
        print(f"[selectrust] pairs: {pairs.stats['per_condition']} dropped: {pairs.stats['dropped']} "
              f"truncated: {pairs.stats.get('truncated', {})}", flush=True)
    # a reference-free loss (and SFT on chosen) builds none: no frozen copy, no table, no reference forward
    reference = Reference(model, lora=cfg.model.lora.enabled) if loss.reference and not algo.sft_on_chosen else None
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, max_steps=cfg.trainer.max_steps)
    model, optimizer = acc.prepare(model, optimizer)
    if reference is not None:
        reference.to(acc.device)
    unwrapped = acc.unwrap_model(model)
    rows = pairs.rows
    sampler = ConditionSampler([r["pool"] for r in rows], mass, seed=cfg.seed, mode=algo.weighting,
                               block=cfg.optim.batch_size * acc.num_processes,
                               lengths=[r["num_tokens"] for r in rows] if dcfg.group_by_length else None)
    batch_kwargs = dict(max_prompt_len=dcfg.max_prompt_len, max_completion_len=dcfg.max_completion_len,
                        truncation="keep_start" if dcfg.truncation == "keep_start" else "keep_end",
                        prompt_settings=prompt)
    collate = partial(collate_pairs, rows, tokenizer, batch_kwargs, shared_prompt=use_shared_prompt(cfg))

    # algo.reference=precomputed: one no-grad pass of the adapter-disabled (or frozen) reference over every
    # pair before training; each step then skips the reference forward (a third of a LoRA step's FLOPs).
    ref_table = None
    if algo.reference == "precomputed" and reference is not None:
        ref_table = reference_table(reference, unwrapped, collate, len(rows), cfg.optim.batch_size, acc.device,
                                    logprobs=logprobs)
    source = SamplerSource(sampler, collate, batch_size=cfg.optim.batch_size, rank=acc.process_index,
                           world=acc.num_processes)

    # ---- one micro-batch ----------------------------------------------------------------------------
    step_fn = partial(dpo_step, algo=algo, loss=loss, reference=reference, policy=unwrapped, ref_table=ref_table,
                      device=acc.device, logprobs=logprobs)

    # ---- loop, evaluation, save ------------------------------------------------------------------------
    return train_evaluate_finish(ctx, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                                 step_fn=step_fn, tokenizer=tokenizer, eval_rows=eval_rows,
                                 backend_factory=lambda: make_backend(cfg.generation, unwrapped, tokenizer,
                                                                      model_path=cfg.model.path,
                                                                      prompt_settings=prompt))


@hydra.main(config_path=str(CONF_DIR), config_name="dpo", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("dpo", main)
