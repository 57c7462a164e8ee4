"""Box2 outcome RL: group-relative policy optimisation on bad-workflow inputs (docs/box2.md#outcome-rl).

    python recipes/grpo.py                                     # tiny CPU default (recipe=grpo_tiny)
    python recipes/grpo.py recipe=grpo_env_tiny                # multi-turn toy environment
    accelerate launch --config_file launch/ddp.yaml --num_processes 8 recipes/grpo.py recipe=aime_qwen3_4b \
        data.train_path=prompts.jsonl model.init_adapter=runs/box2_sft/final   # from the SFT adapter
    python recipes/chain.py recipe=box2_tiny          # counterfactual SFT, then GRPO, as one command

Per optimizer step: P = algo.prompts_per_step prompts, G = algo.group_size samples each, through the
generation backend (``generation=hf`` in-process, ``generation=vllm_server`` a vLLM server with the
LoRA adapter synced and probed every ``generation.sync_every`` steps, its version and checksum on every
metrics line; ``algo.is_correction=token|sequence`` weights the loss by the truncated ratio of the
trainer's to the server's log-probs of the sampled tokens; a dead server, a malformed reply, a refused
adapter or a failed probe checkpoints the last completed step and stops); outcome rewards
(``algo.reward``, guarded) or environment returns (``algo.env``); group advantages; the clipped token
loss of ``trainer.algos.grpo``.

How this departs from TRL's GRPOTrainer (same loss on the same inputs, tests/trainer/algos/test_trl_equivalence_grpo.py):
- groups whose rewards all agree are dropped and the batch refilled (``algo.max_refill_rounds``), the first
  generation round over-sampled from the running zero-variance rate (``algo.oversample_cap``);
- each group's prompt runs once in the policy, old-policy and reference forward (``algo.shared_prompt``,
  one packed row per group: trainer/logprobs/group_packing.py; equal to the unshared loss, tests/trainer/rl/test_grpo_shared_prompt.py);
- ``optim.batch_size * optim.grad_accum * world == algo.prompts_per_step * algo.group_size`` (x 3 with
  ``algo.rollout_mode=paired_context``, Knowledgeable-R1's paired rollouts: trainer/rl/paired_rollouts.py): one
  rollout batch per optimizer step, replayed ``algo.num_iterations`` times with stored old log-probs;
- rollouts are seeded per (seed, rollout batch, round, global prompt index), so a resumed run regenerates
  them exactly and N ranks generate what one process would; the ranks exchange their groups and take
  the drop/refill, advantage (``std_scaling=batch``) and ``token_mean`` normalisation decisions on the
  global batch, so an N-rank run equals a 1-rank run with the same global batch (trainer/rl/rollout.py);
- the reference for the KL term is the LoRA adapter disabled (no second model copy): the base, or the
  SFT policy when starting from ``model.init_adapter`` (see selectrust/model/policy.py).
"""

from __future__ import annotations

import os
from functools import partial

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_grpo
from trainer.config.roots import GRPORunConfig
from trainer.config.schemas import GRPOAlgoConfig
from trainer.config.settings import to_settings
from selectrust.generation.prompts import PromptSettings
from trainer.rl.envs import resolve_env
from trainer.eval_bridge import generation_capabilities, load_eval_rows, make_backend
from trainer.rl.rewards import GuardedReward, resolve_reward
from trainer.rl.rollout import Ranks, RolloutSettings, RolloutSource, check_prompt_lengths, load_rl_prompts
from trainer.rl.modes import MODES
from trainer.rl.rollout_modes import EnvironmentMode
from trainer.runtime.run import setup_run
from trainer.config.budget import shape_of_model
from trainer.config.validation import check_generation_budget
from trainer.rl.rollout_sync import rollout_sync_hook
from trainer.rl.sft_rows import check_sft_rows

register_schemas()


def run(cfg: DictConfig | GRPORunConfig):
    """Train; returns the loop's ``LoopResult`` (step, preempted, final metrics). ``cfg``: the composed config
    (checked and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.data.train_data import ShuffleSampler  # deferred: imports numpy
    from trainer.logprobs.group_packing import group_sequence_logprobs  # deferred: tests patch it
    from trainer.logprobs.logprobs import sequence_logprobs  # deferred: tests patch it
    from trainer.train import train_evaluate_finish  # deferred: imports torch, numpy
    from selectrust.model import Reference, load_policy  # deferred: tests patch it
    from trainer.runtime.optim import build_optimizer, build_scheduler  # deferred: imports torch
    from trainer.rl.step import grpo_step, old_logprobs, use_shared_prompt  # deferred: imports torch

    # ---- validate everything before any model loads (and long before any generation) -------------------
    cfg: GRPORunConfig = to_settings(cfg, validate_grpo, world=int(os.environ.get("WORLD_SIZE", "1")))
    shared = use_shared_prompt(cfg)  # each group's prompt once in every forward of the loss
    logprobs = partial(group_sequence_logprobs if shared else sequence_logprobs,
                       logprob_chunk=cfg.model.logprob_chunk)  # 0 = full logits
    algo, dcfg = cfg.algo, cfg.data
    env_factory = resolve_env(algo.env, max_turns=algo.env_max_turns) if algo.env else None
    reward = None if env_factory else GuardedReward(resolve_reward(algo.reward), max_errors=algo.max_reward_errors,
                                                    timeout_s=algo.reward_timeout_s)
    rows = load_rl_prompts(dcfg.train_path, family=dcfg.train_family, conditions=list(dcfg.train_conditions))
    single_turn = MODES.get(algo.rollout_mode)  # paired_context: each row sampled with and without its context
    single_turn.check_rows(rows)
    if algo.sft_coef > 0:  # the SFT term's targets can be built from these rows (trainer/rl/sft_rows.py)
        check_sft_rows(rows, rule=algo.sft_rows, template=algo.sft_target)
    eval_rows = load_eval_rows(cfg.eval)

    # ---- build -------------------------------------------------------------------------------------------
    ctx = setup_run(cfg, "grpo")
    acc = ctx.accelerator
    model, tokenizer = load_policy(cfg.model, seed=cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    lengths = check_prompt_lengths(rows, tokenizer, max_prompt_len=dcfg.max_prompt_len, prompt_settings=prompt)
    # the rollout budget fits the model's positions after the longest prompt, and a round fits in memory
    check_generation_budget(cfg, shape_of_model(model), max(lengths, default=0), keys=("algo.max_new_tokens",),
                            prompt_what=" (a GRPO prompt, rendered)")
    reference = Reference(model, lora=cfg.model.lora.enabled) if algo.kl_beta > 0 else None
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, max_steps=cfg.trainer.max_steps)
    model, optimizer = acc.prepare(model, optimizer)
    if reference is not None:
        reference.to(acc.device)
    unwrapped = acc.unwrap_model(model)

    def backend_factory():
        return make_backend(cfg.generation, unwrapped, tokenizer, model_path=cfg.model.path, prompt_settings=prompt)

    settings = RolloutSettings.from_config(algo, num_groups=algo.prompts_per_step, grad_accum=cfg.optim.grad_accum,
                                           prompt_settings=prompt, seed=cfg.seed)
    settings.shared_prompt = shared
    old_logps_fn = partial(old_logprobs, unwrapped, acc.device, logprobs) if algo.num_iterations > 1 else None
    mode = EnvironmentMode(settings, tokenizer, env_factory) if env_factory else single_turn(settings, tokenizer, reward)
    source = RolloutSource(rows, ShuffleSampler(len(rows), seed=cfg.seed), mode, settings=settings,
                           backend_factory=backend_factory, old_logps_fn=old_logps_fn, ranks=Ranks.of(acc))
    if generation_capabilities(cfg.generation).weight_sync:  # the server samples this step's adapter, synced, probed
        source.pre_generate = rollout_sync_hook(ctx, lambda: source.backend, unwrapped, tokenizer)

    # ---- one micro-batch, then loop, evaluation, save ----------------------------------------------------
    step_fn = partial(grpo_step, algo=algo, reference=reference, policy=unwrapped, device=acc.device,
                      logprobs=logprobs, max_steps=cfg.trainer.max_steps,
                      sft_logprobs=partial(sequence_logprobs, logprob_chunk=cfg.model.logprob_chunk))
    return train_evaluate_finish(ctx, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                                 step_fn=step_fn, tokenizer=tokenizer, eval_rows=eval_rows,
                                 backend_factory=backend_factory)


@hydra.main(config_path=str(CONF_DIR), config_name="grpo", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("grpo", main)
