"""One stage of Taste-Bench privileged-teacher distillation (docs/taste.md#distillation-trainer), composed from
``conf/distill.yaml``: the stage recipe ``distill`` of ``recipes/stage_recipes.py`` (what the pipelines of
``python recipes/distill.py`` and a chain's ``script: distill`` run).

:func:`run` trains one stage:

- ``algo.stage=kl``: the teacher (the same network with the demonstration in its prompt;
  ``algo.teacher=initial`` = the adapter-disabled model, ``current`` = the policy under no-grad) writes
  reasoning for both views of every training item (items whose two views do not both survive are
  dropped and counted in ``data_stats.json``). Loss per micro-batch::

      L = token_kl_weight * mean_{sampled positions} KL_S(p_T || p_S) + choice_kl_weight * mean_{views} KL_AB

  ``KL_S``: forward KL on the top-K support (``algo.topk_support``) plus a remainder bucket, token mean
  over the micro-batch's sampled reasoning positions (at most ``algo.max_positions`` per view);
  ``KL_AB``: the 2-way KL at the choice position, mean over views. ``algo.mode=on_policy``: the student
  writes the reasoning instead (sampled each step) and the same loss is taken on it.
  ``data.prompt_style=mist`` (SCOPE's OPSD, docs/scope.md#opsd): one view per MIST item, the student on
  its misleading prompt, the teacher on its clean one, no choice position: ``L = token_kl_weight * KL_S``
  on every position of the student's sampled answer.
- ``algo.stage=calibration``: the student writes its own reasoning (sampled each step); the loss is the
  cross-entropy of ``softmax(z_AB / algo.calibration_temperature)`` against the label, mean over views.
"""

from __future__ import annotations

from omegaconf import DictConfig

from selectrust.core.io import write_json_atomic
from selectrust.generation.prompts import PromptSettings
from trainer.config import register_schemas, validate_distill
from trainer.config.roots import DistillRunConfig
from trainer.config.settings import to_settings
from trainer.distill.views import check_task_disjoint, choice_token_ids, has_choice_position, load_views
from trainer.runtime.run import setup_run

register_schemas()


def run(cfg: DictConfig | DistillRunConfig):
    """Train one stage (``algo.stage``); returns the loop's ``LoopResult``. ``cfg``: the composed config (checked
    and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.runtime.checkpoint import resumable  # deferred: imports numpy
    from trainer.data.train_data import SamplerSource, ShuffleSampler  # deferred: imports numpy
    from trainer.distill.steps import DistillSteps, sample_teacher  # deferred: imports torch
    from trainer.train import train_evaluate_finish  # deferred: imports torch, numpy
    from selectrust.model import Reference, load_policy  # deferred: tests patch it
    from trainer.runtime.optim import build_optimizer, build_scheduler  # deferred: imports torch

    # ---- validate everything before any model loads -------------------------------------------------
    cfg: DistillRunConfig = to_settings(cfg, validate_distill)  # the typed settings, from here down
    a, d = cfg.algo, cfg.data
    style = dict(style=d.prompt_style, demonstration=a.demonstration)
    views = load_views(d.train_path, **style)
    eval_views = load_views(d.eval_path, **style) if d.eval_path else None
    if eval_views is not None:
        check_task_disjoint(views, d.eval_path, eval_views)

    # ---- build ------------------------------------------------------------------------------------
    ctx = setup_run(cfg, "distill")
    acc = ctx.accelerator
    model, tokenizer = load_policy(cfg.model, seed=cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    has_choice = has_choice_position(d.prompt_style)  # MIST views (OPSD): no answer prefix, no A/B position
    choice_ids = choice_token_ids(tokenizer, a.choice_tokens) if has_choice else []
    answer_ids = list(tokenizer(a.answer_prefix, add_special_tokens=False)["input_ids"]) if has_choice else []
    reference = Reference(model, lora=cfg.model.lora.enabled)
    steps = DistillSteps(cfg, model=model, tokenizer=tokenizer, prompt=prompt, reference=reference,
                         answer_ids=answer_ids, choice_ids=choice_ids, device=acc.device)
    if a.stage == "kl" and a.mode == "teacher_tokens":
        views, stats = sample_teacher(steps, views, ctx.run_dir / "teacher_samples.jsonl")
        if ctx.is_main:
            write_json_atomic(ctx.run_dir / "data_stats.json", stats)
            print(f"[selectrust] distill teacher samples: {stats}", flush=True)
        if not views:
            raise SystemExit(f"[selectrust] no training item kept both views ({ctx.run_dir / 'data_stats.json'})")
        if a.teacher_cache:
            steps.fill_teacher_cache(views)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, max_steps=cfg.trainer.max_steps)
    model, optimizer = acc.prepare(model, optimizer)
    reference.to(acc.device)
    sampler = ShuffleSampler(len(views), seed=cfg.seed)
    source = SamplerSource(sampler, lambda idx, w: {"views": [views[i] for i in idx], "epoch": sampler.epoch,
                                                    "item_ids": [views[i].view_id for i in idx]},
                           batch_size=cfg.optim.batch_size, rank=acc.process_index, world=acc.num_processes)
    step_fn = steps.step(a.stage)  # trainer/distill/stages.py STAGE_STEPS
    on_epoch_end = steps.epoch_eval(ctx, eval_views) if eval_views is not None and cfg.eval.enabled else None
    if on_epoch_end is not None and ctx.is_main and not resumable(ctx.run_dir):
        ctx.logger.log(0, {"eval_epoch": "0", **{f"eval/{k}": v for k, v in on_epoch_end(0, 0).items()}})

    # ---- loop, save ---------------------------------------------------------------------------------
    return train_evaluate_finish(ctx, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                                 step_fn=step_fn, tokenizer=tokenizer, eval_rows=None, backend_factory=lambda: None,
                                 on_epoch_end=on_epoch_end)
