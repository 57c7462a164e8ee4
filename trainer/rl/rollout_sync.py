"""GRPO's adapter sync before each rollout batch through a generation server that takes the adapter (capability
``weight_sync``): the collective hook over :mod:`trainer.eval_bridge.weight_sync`, which the epoch-end evaluation
of every trainer uses too."""

from __future__ import annotations

from trainer.eval_bridge.weight_sync import StaleWeightsError, adapter_root, lazy_adapter_sync
from selectrust.generation.backends.transport import ServerError


def rollout_sync_hook(ctx, get_backend, policy, tokenizer):
    """``pre_generate(step) -> metrics`` for GRPO rollouts through a generation server.

    The server must sample from *this* step's adapter: every ``generation.sync_every`` steps the main
    process saves it atomically, loads it on the server under a new name and probes it; the other ranks
    wait at the barrier, then route their requests to it. Every rank then agrees on success, so a failure
    on the main process (stale weights, refused load) stops all ranks together (and the loop checkpoints
    collectively). ``get_backend()`` is the rollout backend (built on first use)."""
    from trainer.runtime.distributed import reduce_max  # deferred: imports torch

    acc, gen = ctx.accelerator, ctx.cfg.generation
    get_sync = lazy_adapter_sync(get_backend, adapter_root(ctx), every_k_steps=gen.sync_every, tokenizer=tokenizer,
                                 probe_threshold=gen.probe_threshold, main_process=acc.is_main_process)

    def sync_before_rollouts(step: int) -> dict:
        sync = get_sync()
        error, metrics = None, {}
        try:
            metrics = sync.maybe_sync(policy, step, barrier=acc.wait_for_everyone)
        except (ServerError, StaleWeightsError) as e:
            error = e
            if isinstance(e, StaleWeightsError) and ctx.is_main:  # the probe difference is logged every time
                ctx.logger.log(step + 1, {"sync_failed": 1, **{k: v for k, v in e.metrics.items()
                                                               if isinstance(v, (int, float, str))}})
        if reduce_max(acc, 1 if error is not None else 0):
            raise error if error is not None else ServerError(
                f"rank {acc.process_index}: the adapter sync failed on another rank (see its error); stopping")
        return {**metrics, **sync.current(), "served_adapter": sync.backend.current_adapter}

    return sync_before_rollouts
