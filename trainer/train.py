"""The tail every trainer shares: the optimizer-step loop (:func:`trainer.runtime.loop.train_loop`), the
epoch-end matched evaluation (``trainer/eval_bridge/``) and the finish (``<run_dir>/final``,
``run_complete.json``).

It sits above ``trainer/runtime/`` because the epoch-end evaluation (``trainer/eval_bridge/``, with its adapter sync
to a generation server, ``trainer/eval_bridge/weight_sync.py``) is not part of the shared loop machinery;
``core`` imports neither ``rl`` nor ``distill``.
"""

from __future__ import annotations

from typing import Any, Callable

from trainer.runtime.loop import BatchSource, LoopResult, train_loop
from trainer.runtime.errors import RewardError
from trainer.runtime.run import finish_run
from trainer.eval_bridge import make_epoch_eval, server_errors
from selectrust.model import save_policy


def train_evaluate_finish(ctx, *, model, optimizer, scheduler, source: BatchSource, step_fn, tokenizer,
                          eval_rows: list[dict] | None, backend_factory: Callable[[], Any],
                          on_epoch_end: Callable[[int, int], dict | None] | None = None) -> LoopResult:
    """The tail every trainer shares: train (:func:`train_loop`, checkpointing on generation-server errors),
    evaluate (the epoch-end evaluation hook), finish — only for a run that reached ``max_steps`` — with the
    trained weights/adapter in ``<run_dir>/final`` and ``run_complete.json``. ``on_epoch_end`` (optional)
    replaces the generation-based matched evaluation of ``eval_rows``."""
    unwrapped = ctx.accelerator.unwrap_model(model)
    if on_epoch_end is None:
        on_epoch_end = make_epoch_eval(ctx, eval_rows, backend_factory, policy=unwrapped, tokenizer=tokenizer)
    try:
        result = train_loop(ctx, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                            step_fn=step_fn, on_epoch_end=on_epoch_end,
                            checkpoint_on=(*server_errors(ctx.cfg.generation), RewardError))
        if ctx.is_main and not result.stopped_early:
            save_policy(unwrapped, ctx.run_dir / "final")
            tokenizer.save_pretrained(str(ctx.run_dir / "final"))
        ctx.accelerator.wait_for_everyone()
        if not result.preempted:
            finish_run(ctx, result.step, result.final_metrics, stopped_early=result.stopped_early)
    finally:
        ctx.release()  # the run directory's lock (the kernel drops it too if this process dies)
    return result
