"""The optimizer-step loop every trainer shares.

A recipe supplies a *batch source* (where micro-batches come from: a sampler over a dataset, or
rollouts) and a *step function* ``step_fn(model, microbatch) -> (loss, metrics)``. This module does
the rest, identically for DPO, SFT and GRPO:

- gradient accumulation (``no_sync`` on all but the last micro-batch), clipping, LR schedule;
- numerical guards: a NaN/Inf loss or gradient skips the step with weights, optimizer, scheduler and
  data position untouched; after ``max_consecutive_skips`` the run stops naming the step and item ids;
  loss spikes are logged;
- ``metrics.jsonl`` lines, a progress bar, epoch-end evaluation (in a forked RNG so evaluation never
  changes the training stream), atomic checkpoints, exact resume;
- preemption: SIGTERM/SIGUSR1/SIGINT set a flag; all ranks agree on it after the current step, save one
  checkpoint and return (the recipe then exits 0; 130 after SIGINT). A signal during a reward call or
  GRPO's rollout generation abandons the step in progress and checkpoints the last completed one (``trainer.runtime.interrupt``).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import signal
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Protocol

import torch

from trainer.runtime.checkpoint import CheckpointManager, step_of
from trainer.runtime.distributed import all_gather_object, any_rank, uses_deepspeed
from trainer.runtime.interrupt import StopRequested, StopSignals
from trainer.runtime.run import write_config


class BatchSource(Protocol):
    epoch: int  # number of completed passes over the data

    def next_microbatch(self) -> dict: ...  # must carry "item_ids": list[str]
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class NumericalError(RuntimeError):
    pass


@dataclass
class LoopState:
    """What the loop carries from step to step besides the step count; saved in every checkpoint's
    ``trainer_state.json`` (beside ``step`` and the data source's ``source``) and restored on resume."""

    epoch_done: int = 0                # passes over the data completed (and evaluated)
    skipped_total: int = 0             # steps skipped for a NaN/Inf loss or gradient
    loss_ema: float | None = None      # running mean of the loss (loss-spike detection)
    last_eval_step: int = -1           # the step of the last evaluation (no second one at the end)

    def load(self, saved: dict) -> None:
        """Take the saved values (a checkpoint's ``trainer_state.json`` less ``step`` and ``source``)."""
        for f in fields(self):
            if f.name in saved:
                setattr(self, f.name, saved[f.name])


@dataclass
class LoopResult:
    step: int
    preempted: bool
    final_metrics: dict[str, Any] = field(default_factory=dict)
    stopped_early: bool = False  # preempted, or stop_at_step before max_steps: the run is not finished
    # a stop signal that arrived after the last step's look at it (during the final save or evaluation): the run
    # finished; a runner of several stages stops before the next one (recipes/stages/)
    late_stop: int | None = None


def _to_float(v) -> float:
    return float(v.detach().float().item()) if isinstance(v, torch.Tensor) else float(v)


def _mean_dicts(dicts: list[dict]) -> dict[str, float]:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            sums[k] = sums.get(k, 0.0) + _to_float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def _order_hash(per_micro_ids: list[list[str]], gathered: list[list[list[str]]]) -> str:
    """A hash of the step's item ids in the order one process with the global batch would draw them
    (micro-batch by micro-batch, rank slices in rank order; ``gathered``: every rank's ``per_micro_ids``),
    so runs on 1 or N ranks, and a resumed run, can be compared step by step for an identical data order."""
    order = [x for i in range(len(per_micro_ids)) for rank_ids in gathered for x in rank_ids[i]]
    return hashlib.sha1("\x1f".join(map(str, order)).encode()).hexdigest()[:16]


def _forward_backward(acc, model, source: BatchSource, step_fn, *, grad_accum: int, deepspeed: bool):
    """Forward and backward over the ``grad_accum`` micro-batches of one optimizer step (gradients
    accumulate; DDP syncs on the last one only). Returns (mean loss (), per-micro-batch metrics,
    per-micro-batch item ids)."""
    micro_metrics, per_micro_ids, losses = [], [], []
    for i in range(grad_accum):
        mb = source.next_microbatch()
        per_micro_ids.append(list(mb.get("item_ids", [])))
        sync = i == grad_accum - 1
        if deepspeed:
            # The engine owns accumulation, clipping and the update: engine.backward scales by
            # 1/gradient_accumulation_steps itself, and on the last micro-batch engine.step()
            # runs (its ZeRO optimizer skips the update when the gradients are not finite).
            with acc.autocast():
                loss, metrics = step_fn(model, mb)
                acc.deepspeed_engine_wrapped.backward(loss, sync_gradients=sync)
        else:
            ctx_mgr = acc.no_sync(model) if not sync and acc.num_processes > 1 else contextlib.nullcontext()
            with ctx_mgr, acc.autocast():
                loss, metrics = step_fn(model, mb)
                acc.backward(loss / grad_accum)
        losses.append(loss.detach().float())
        micro_metrics.append(metrics)
    return torch.stack(losses).mean(), micro_metrics, per_micro_ids


def _grad_norm(acc, model, *, max_grad_norm: float, deepspeed: bool) -> float | None:
    """The step's pre-clipping gradient norm (clipping to ``max_grad_norm`` when > 0); None when the
    backend reports none (not a reason to skip the step)."""
    if deepspeed:
        norm = model.get_global_grad_norm()  # of the step DeepSpeed just took (or inf)
    elif max_grad_norm > 0:
        norm = acc.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grads = [p.grad.detach().float().norm() for p in model.parameters() if p.grad is not None]
        norm = torch.stack(grads).norm() if grads else torch.tensor(0.0)
    return _to_float(norm) if norm is not None else None


def _step_record(ctx, state: LoopState, source: BatchSource, *, step: int, micro_metrics: list[dict], loss_value,
                 lr: float, grad_norm: float | None, per_micro_ids: list[list[str]], t0: float) -> tuple[dict, float]:
    """The metrics line of a completed step (averaged over micro-batches and ranks), with the data
    hash, timing and a ``loss_spike`` flag (loss > ``trainer.spike_factor`` x its running mean, after
    step ``trainer.spike_warmup_steps``), and the loss; updates ``state.loss_ema`` (decay
    ``trainer.spike_ema_decay``)."""
    acc, tcfg = ctx.accelerator, ctx.cfg.trainer
    local = {**_mean_dicts(micro_metrics), "loss": _to_float(loss_value)}
    gathered = all_gather_object(acc, (local, per_micro_ids))  # one collective: every rank's metrics and item ids
    metrics = local if acc.num_processes == 1 else _mean_dicts([m for m, _ in gathered])
    loss_f, ema = metrics["loss"], state.loss_ema
    spike = ema is not None and step > tcfg.spike_warmup_steps and loss_f > tcfg.spike_factor * max(ema, 1e-8)
    decay = tcfg.spike_ema_decay
    state.loss_ema = loss_f if ema is None else decay * ema + (1 - decay) * loss_f
    extra = source.pop_metrics() if hasattr(source, "pop_metrics") else {}
    last = {**metrics, **extra, "lr": lr, "grad_norm": grad_norm, "epoch": source.epoch,
            "data_hash": _order_hash(per_micro_ids, [ids for _, ids in gathered]),
            "step_seconds": round(time.time() - t0, 4), "skipped_total": state.skipped_total}
    if spike:
        last["loss_spike"] = 1
        if ctx.is_main:
            print(f"[selectrust] loss spike at step {step}: {loss_f:.4g} vs running mean {ema:.4g}", flush=True)
    return last, loss_f


def _start(ctx, ckpt, state: LoopState, *, model, optimizer, scheduler, source) -> int:
    """Load the checkpoint to resume from (``ctx.resume_from``, chosen and verified by ``setup_run``
    before any model loaded) into model, optimizer, scheduler, data source and ``state``; write the run's
    ``config.yaml``; drop metrics lines past the starting step. Returns the starting step."""
    step = 0
    if ctx.resume_from is not None:
        loaded = ckpt.load(ctx.resume_from, model=model, optimizer=optimizer, scheduler=scheduler)
        step = loaded.pop("step")
        source.load_state_dict(loaded.pop("source"))
        state.load(loaded)
        if ctx.is_main:
            print(f"[selectrust] resumed from {ctx.resume_from} at step {step}", flush=True)
    write_config(ctx)  # training is about to start: a failed start before here leaves no config.yaml
    # Drop lines logged after the starting point (a killed run's steps past its last complete checkpoint,
    # or all steps when no complete checkpoint exists): they are logged again, once.
    ctx.logger.truncate_after(step)
    return step


def _skip_step(ctx, state: LoopState, *, optimizer, source, snapshot: dict, step: int, loss_value, grad_norm,
               consecutive: int, item_ids: list[str]) -> None:
    """A NaN/Inf loss or gradient: drop the gradients, rewind the data source to the step's start and log
    the skip; after ``trainer.max_consecutive_skips`` in a row, stop naming the step and item ids."""
    optimizer.zero_grad(set_to_none=True)
    source.load_state_dict(snapshot)
    state.skipped_total += 1
    ctx.logger.log(step, {"skipped_nonfinite": 1, "skipped_total": state.skipped_total,
                          "loss": _to_float(loss_value), "grad_norm": grad_norm})
    if consecutive >= ctx.cfg.trainer.max_consecutive_skips:
        raise NumericalError(
            f"{consecutive} consecutive steps skipped for a NaN/Inf loss or gradient at "
            f"optimizer step {step + 1}; item ids of the last batch: {item_ids[:32]}")


def _end_of_epoch(ctx, state: LoopState, on_epoch_end, epoch: int, step: int, last: dict) -> None:
    """When the data source finished a pass: note it and evaluate (``trainer.eval_every_epoch``)."""
    if epoch > state.epoch_done:
        state.epoch_done = epoch
        if on_epoch_end is not None and ctx.cfg.trainer.eval_every_epoch:
            _run_eval(ctx, on_epoch_end, epoch, step, last)
            state.last_eval_step = step


def _try_step(ctx, state: LoopState, *, model, optimizer, scheduler, source, step_fn, snapshot: dict, step: int,
              consecutive: int, deepspeed: bool):
    """One optimizer step's forward/backward passes, gradient norm and update. A NaN/Inf loss or gradient on any
    rank skips it (:func:`_skip_step`, ``consecutive`` counting this one) and returns None; otherwise returns
    ``(loss_value, micro_metrics, per_micro_ids, grad_norm, lr)``, ``lr`` the rate the update used."""
    acc, ocfg = ctx.accelerator, ctx.cfg.optim
    loss_value, micro_metrics, per_micro_ids = _forward_backward(
        acc, model, source, step_fn, grad_accum=ocfg.grad_accum, deepspeed=deepspeed)
    item_ids = [i for ids in per_micro_ids for i in ids]
    grad_norm = _grad_norm(acc, model, max_grad_norm=ocfg.max_grad_norm, deepspeed=deepspeed)
    bad = any_rank(acc, not (math.isfinite(_to_float(loss_value))
                             and (grad_norm is None or math.isfinite(grad_norm))))
    if bad:
        _skip_step(ctx, state, optimizer=optimizer, source=source, snapshot=snapshot, step=step,
                   loss_value=loss_value, grad_norm=grad_norm, consecutive=consecutive, item_ids=item_ids)
        return None
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_value, micro_metrics, per_micro_ids, grad_norm, lr


def train_loop(ctx, *, model, optimizer, scheduler, source: BatchSource,
               step_fn: Callable[[Any, dict], tuple[torch.Tensor, dict]],
               on_epoch_end: Callable[[int, int], dict | None] | None = None,
               checkpoint_on: tuple[type[BaseException], ...] = ()) -> LoopResult:
    """Run optimizer steps until ``trainer.max_steps`` (or ``stop_at_step``/``epochs_cap``/preemption).

    ``checkpoint_on``: exception types (e.g. a dead generation server) after which the last completed
    step is checkpointed (data position rewound to that step) before the exception propagates, so the
    run resumes from there. Every rank must raise it (the save is collective); recipes make sure of that.
    """
    from tqdm.auto import tqdm  # deferred: imports tqdm

    acc, tcfg = ctx.accelerator, ctx.cfg.trainer
    nodes = getattr(ctx, "nodes", None)
    ckpt = CheckpointManager(ctx.run_dir, acc, keep_last=tcfg.keep_last, node_local=bool(nodes and nodes.node_local))
    state = LoopState()

    def save(at_step: int):  # a checkpoint of the step just completed: the loop's state beside the data position
        ckpt.save(at_step, model=model, optimizer=optimizer, scheduler=scheduler,
                  train_state={**asdict(state), "source": source.state_dict()})

    step = _start(ctx, ckpt, state, model=model, optimizer=optimizer, scheduler=scheduler, source=source)

    stop_at = min(tcfg.max_steps, tcfg.stop_at_step or tcfg.max_steps)
    preempt = StopSignals()
    preempt.install()
    bar = tqdm(total=stop_at, initial=step, desc=ctx.recipe, disable=not (tcfg.progress and ctx.is_main),
               unit="step", dynamic_ncols=True)
    consecutive_skips = 0
    last: dict[str, Any] = {}
    preempted = False
    deepspeed = uses_deepspeed(acc)

    snapshot = None  # source state at the start of the step in progress (None between steps)
    stop_signal = None
    try:
        while step < stop_at:
            t0 = time.time()
            snapshot = source.state_dict()
            model.train()
            outcome = _try_step(ctx, state, model=model, optimizer=optimizer, scheduler=scheduler, source=source,
                                step_fn=step_fn, snapshot=snapshot, step=step, consecutive=consecutive_skips + 1,
                                deepspeed=deepspeed)
            if outcome is None:
                consecutive_skips += 1
                continue
            consecutive_skips = 0
            loss_value, micro_metrics, per_micro_ids, grad_norm, lr = outcome
            step += 1
            snapshot = None
            bar.update(1)

            last, loss_f = _step_record(ctx, state, source, step=step, micro_metrics=micro_metrics,
                                        loss_value=loss_value, lr=lr, grad_norm=grad_norm,
                                        per_micro_ids=per_micro_ids, t0=t0)
            if step % tcfg.log_every == 0 or step == stop_at:
                ctx.logger.log(step, last)
            bar.set_postfix(loss=f"{loss_f:.4f}", refresh=False)

            preempted, done_epochs = _after_step(ctx, state, on_epoch_end, source, save, step=step, stop_at=stop_at,
                                                 last=last, requested=preempt.requested)
            if preempted or done_epochs:
                break
        if (not preempted and on_epoch_end is not None and tcfg.eval_at_end and step >= tcfg.max_steps
                and state.last_eval_step != step):
            _run_eval(ctx, on_epoch_end, "final", step, last)
    except (StopRequested, *checkpoint_on) as e:
        _save_last_completed(ctx, ckpt, save, source, snapshot, step, e)
        if not isinstance(e, StopRequested):
            raise
        preempted = True
    finally:
        bar.close()
        stop_signal = preempt.restore()
    if preempted and stop_signal == signal.SIGINT:
        raise SystemExit(130)  # Ctrl-C: the checkpoint is saved; exit as an interrupted program does
    return _loop_result(tcfg, source, step=step, preempted=preempted, last=last, stop_signal=stop_signal)


def _after_step(ctx, state: LoopState, on_epoch_end, source, save, *, step: int, stop_at: int, last: dict,
                requested: bool) -> tuple[bool, bool]:
    """After optimizer step ``step``: the end-of-epoch evaluation, then the checkpoint when this step is preempted
    (``requested`` on any rank), the last, the end of ``trainer.epochs_cap`` or a ``trainer.save_every`` step.
    Returns ``(preempted, done_epochs)``: either stops the loop."""
    tcfg = ctx.cfg.trainer
    _end_of_epoch(ctx, state, on_epoch_end, source.epoch, step, last)
    done_epochs = tcfg.epochs_cap is not None and source.epoch >= tcfg.epochs_cap
    preempted = any_rank(ctx.accelerator, requested)
    if preempted or step == stop_at or done_epochs or (tcfg.save_every and step % tcfg.save_every == 0):
        save(step)
    if preempted and ctx.is_main:
        print(f"[selectrust] preemption signal: saved step {step}, exiting cleanly", flush=True)
    return preempted, done_epochs


def _loop_result(tcfg, source, *, step: int, preempted: bool, last: dict, stop_signal) -> LoopResult:
    """The loop's result; stopped early (``finish_run`` then writes no run_complete.json) unless it reached
    ``trainer.max_steps`` or ``trainer.epochs_cap`` without being preempted."""
    finished = step >= tcfg.max_steps or (tcfg.epochs_cap is not None and source.epoch >= tcfg.epochs_cap)
    late_stop = stop_signal if not preempted else None  # a stop that came after the last step's check
    return LoopResult(step=step, preempted=preempted, final_metrics=last, stopped_early=preempted or not finished,
                      late_stop=late_stop)


def _save_last_completed(ctx, ckpt, save, source, snapshot, step: int, error: BaseException) -> None:
    """After ``error`` inside a step: rewind the data position to the step's start and checkpoint the last
    completed step (unless that checkpoint exists)."""
    if snapshot is not None:
        source.load_state_dict(snapshot)
    latest = ckpt.latest()
    if step > 0 and (latest is None or step_of(latest) != step):  # the layout is checkpoint.py's
        save(step)
    if ctx.is_main:
        saved = f"checkpoint of step {step} in {ckpt.root} (resume with trainer.resume=auto)" if step else \
            "no step completed, nothing to checkpoint"
        print(f"[selectrust] {type(error).__name__} during step {step + 1}: {saved}; stopping", flush=True)


def _run_eval(ctx, on_epoch_end, epoch, step, last: dict) -> None:
    with torch.random.fork_rng(devices=[]):
        if ctx.is_main:
            result = on_epoch_end(epoch, step) or {}
            flat = {f"eval/{k}": v for k, v in _flatten(result).items() if isinstance(v, (int, float))}
            ctx.logger.log(step, {"eval_epoch": str(epoch), **flat})
            last.update(flat)
    ctx.barrier()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
