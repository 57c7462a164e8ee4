"""The micro-batch steps of the distillation trainer (``recipes/distill.py``): teacher sampling, stage-1 KL
(teacher-written or on-policy tokens), stage-2 calibration, the teacher top-K cache, epoch-end evaluation."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Sequence

import torch

from selectrust.generation.backends.base import derive_seed

from trainer.algos.distill import choice_ce, choice_kl, gathered_forward_kl
from trainer.distill.aligned import aligned_logits, sample_positions
from trainer.distill.evaluation import evaluate_views
from trainer.distill.gathered import DEFAULT_LOGPROB_CHUNK, distill_logprobs, teacher_topk_logprobs
from trainer.distill.generation import generate_reasoning
from trainer.distill.stages import STAGE_STEPS
from trainer.distill.views import ForkView, has_choice_position
from selectrust.generation.prompts import render_prompt
from selectrust.core.io import write_json_atomic


class DistillSteps:
    """Everything a step needs (config, tokenizer, prompt settings, teacher context), and the steps."""

    def __init__(self, cfg, *, model, tokenizer, prompt, reference, answer_ids, choice_ids, device):
        self.cfg, self.a = cfg, cfg.algo
        self.policy, self.tokenizer, self.prompt = model, tokenizer, prompt
        self.reference, self.answer_ids, self.choice_ids, self.device = reference, answer_ids, choice_ids, device
        # The teacher top-K cache (algo.teacher_cache): view id -> (values (n, K) float32, indices (n, K) int32),
        # the teacher's top-K log-probs at every reasoning position; and its choice-token log-probs (C,).
        self.cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.choice_cache: dict[str, torch.Tensor] = {}
        self.chunk = cfg.model.logprob_chunk or DEFAULT_LOGPROB_CHUNK  # LM-head positions per chunk
        self._ids: dict[tuple[str, bool], list[int]] = {}
        self.gen = dict(max_new_tokens=self.a.max_reasoning_tokens, end=self.a.reasoning_end)
        # MIST views (OPSD) have no A/B choice position: the loss is the token KL alone (token_kl_step)
        self.has_choice = has_choice_position(cfg.data.prompt_style)

    # ---- prompts and models -----------------------------------------------------------------------------
    def prompt_ids(self, view: ForkView, teacher: bool) -> list[int]:
        key = (view.view_id, teacher)
        if key not in self._ids:
            self._ids[key] = render_prompt(self.tokenizer, view.teacher_prompt if teacher else view.student_prompt,
                                           self.prompt)
        return self._ids[key]

    @contextlib.contextmanager
    def teacher_model(self):
        """The teacher's network: the starting weights (adapter disabled) or the current policy; no grad."""
        with torch.no_grad():
            if self.a.teacher == "initial":
                with self.reference.context(self.policy) as m:
                    yield m
            else:
                yield self.policy

    def student_reasoning(self, views: Sequence[ForkView], epoch: int, tag: str) -> list[list[int]]:
        """The student's sampled reasoning (seeded by seed, stage, epoch and the views: resumable)."""
        prompts = [self.prompt_ids(v, False) for v in views]
        seed = derive_seed(self.cfg.seed, tag, epoch, *[v.view_id for v in views])
        out = generate_reasoning(self.policy, self.tokenizer, prompts, temperature=self.a.student_temperature,
                                 seed=seed, device=self.device, **self.gen)
        return [r for r, _ in out]

    def step(self, stage: str):
        """The step of ``algo.stage`` (:data:`trainer.distill.stages.STAGE_STEPS`); ValueError for another name."""
        if stage not in STAGE_STEPS:
            raise ValueError(f"unknown distillation stage {stage!r}; known: {' | '.join(STAGE_STEPS)}")
        return getattr(self, STAGE_STEPS[stage])

    # ---- stage 1 -----------------------------------------------------------------------------------------
    def kl_step(self, model, mb: dict):
        if not self.has_choice:
            return self.token_kl_step(model, mb)
        views, epoch = mb["views"], mb["epoch"]
        if self.a.mode == "on_policy":
            reasoning = self.student_reasoning(views, epoch, "on_policy")
        else:
            reasoning = [v.reasoning for v in views]
        completions = [list(r) + self.answer_ids for r in reasoning]
        positions = [sample_positions(len(r), self.a.max_positions, seed=self.cfg.seed, view_id=v.view_id,
                                      epoch=epoch) + [len(c)] for v, r, c in zip(views, reasoning, completions)]
        return self.kl_terms(model, views, completions, positions)

    def kl_terms(self, model, views, completions, positions):
        """The stage-1 loss and metrics of ``views`` whose completions are ``completions``; ``positions[b]``: the
        sampled reasoning positions of row b, then its choice position ``len(completions[b])``.

        Teacher and student are reduced to their log-probs on the support and at the choice tokens
        (``trainer/distill/gathered.py:distill_logprobs``, the LM head ``model.logprob_chunk`` positions at a time), so
        neither model's ``(B, P, V)`` logits exist. The choice KL gets ``T * log p_T`` of the two choice tokens,
        whose 2-way softmax at temperature T is that of the choice logits."""
        a, temp = self.a, self.a.kl_temperature
        token_positions = [list(p[:-1]) for p in positions]
        lp = distill_logprobs(model, self.teacher_model, [self.prompt_ids(v, False) for v in views],
                              [self.prompt_ids(v, True) for v in views], completions, token_positions,
                              pad_id=self.tokenizer.pad_token_id, device=self.device, choice_ids=self.choice_ids,
                              k=a.topk, support=a.topk_support, temperature=temp, chunk=self.chunk,
                              teacher_cached=self.teacher_from_cache(views, token_positions) if self.cache else None)
        tok = (lp["teacher"], lp["student"], lp["valid"], lp["mask"])
        z_t, z_s = temp * lp["teacher_choice"], temp * lp["student_choice"]
        tok_loss, tok_m = gathered_forward_kl(*tok, vocab=lp["vocab"])
        ch_loss, ch_m = choice_kl(z_t, z_s, temperature=temp)
        loss = a.token_kl_weight * tok_loss + a.choice_kl_weight * ch_loss
        metrics = {"token_kl": tok_m["kl"], "choice_kl": ch_m["kl"], "agreement": ch_m["agreement"],
                   "teacher_mass": tok_m["teacher_mass"], "student_mass": tok_m["student_mass"],
                   "positions": tok_m["num_positions"],
                   "student_accuracy": ((z_s[:, 0] < z_s[:, 1]).long().cpu() == _labels(views)).float().mean()}
        with torch.no_grad():
            for cell in sorted({v.cell for v in views}):
                sel = torch.tensor([v.cell == cell for v in views], device=z_s.device)
                t_c, s_c, valid_c, mask_c = (x[sel] for x in tok)
                metrics[f"token_kl/{cell}"] = gathered_forward_kl(t_c, s_c.detach(), valid_c, mask_c,
                                                                  vocab=lp["vocab"])[1]["kl"]
                metrics[f"choice_kl/{cell}"] = choice_kl(z_t[sel], z_s[sel].detach(), temperature=temp)[1]["kl"]
        return loss, metrics

    def token_kl_step(self, model, mb: dict):
        """OPSD on views without a choice position (``data.prompt_style=mist``): the student samples its
        completion on its own prompt; ``L = token_kl_weight * mean_{positions} KL_S(p_T || p_S)`` over the
        completion's positions ``0..n`` (position n, after the last sampled token, is where the student
        stopped: its end-of-sequence prediction), the teacher reading the same tokens after its prompt.

        Through :func:`distill_logprobs` like :meth:`kl_terms`: the completion gets one placeholder token so
        that position n is an ordinary position (causal: it sees only the n sampled tokens); the choice
        position after the placeholder is computed and ignored."""
        views, epoch = mb["views"], mb["epoch"]
        completions = self.student_reasoning(views, epoch, "on_policy")
        positions = [sample_positions(len(c) + 1, self.a.max_positions, seed=self.cfg.seed, view_id=v.view_id,
                                      epoch=epoch) for v, c in zip(views, completions)]
        pad = self.tokenizer.pad_token_id
        lp = distill_logprobs(model, self.teacher_model, [self.prompt_ids(v, False) for v in views],
                              [self.prompt_ids(v, True) for v in views], [list(c) + [pad] for c in completions],
                              positions, pad_id=pad, device=self.device, choice_ids=[pad], k=self.a.topk,
                              support=self.a.topk_support, temperature=self.a.kl_temperature, chunk=self.chunk)
        tok_loss, tok_m = gathered_forward_kl(lp["teacher"], lp["student"], lp["valid"], lp["mask"], vocab=lp["vocab"])
        metrics = {"token_kl": tok_m["kl"], "teacher_mass": tok_m["teacher_mass"],
                   "student_mass": tok_m["student_mass"], "positions": tok_m["num_positions"],
                   "completion_tokens": sum(len(c) for c in completions) / max(1, len(completions))}
        return self.a.token_kl_weight * tok_loss, metrics

    def teacher_from_cache(self, views, positions) -> dict:
        """The cached teacher at reasoning ``positions`` (rows of each view's cache), in ``distill_logprobs``'s
        ``teacher_cached`` form: ``values, indices (N, K)`` row-major over views, ``choice (B, C)``."""
        values = torch.cat([self.cache[v.view_id][0][list(ps)] for v, ps in zip(views, positions)])
        indices = torch.cat([self.cache[v.view_id][1][list(ps)] for v, ps in zip(views, positions)])
        choice = torch.stack([self.choice_cache[v.view_id] for v in views])
        return {"values": values.to(self.device), "indices": indices.to(self.device).long(),
                "choice": choice.to(self.device)}

    def fill_teacher_cache(self, views: Sequence[ForkView], batch_size: int = 32) -> None:
        """Once per view, exactly what the gathered KL needs from the teacher: its top-K log-probs (at
        ``algo.kl_temperature``) and token ids at every reasoning position, and its log-probs of the choice
        tokens at the choice position. ``K x (4 + 4)`` bytes per reasoning token; no ``V``-sized tensor."""
        for start in range(0, len(views), batch_size):
            chunk = views[start:start + batch_size]
            completions = [list(v.reasoning) + self.answer_ids for v in chunk]
            positions = [list(range(len(v.reasoning))) for v in chunk]
            with self.teacher_model() as m:
                t = teacher_topk_logprobs(m, [self.prompt_ids(v, True) for v in chunk], completions, positions,
                                          pad_id=self.tokenizer.pad_token_id, device=self.device,
                                          choice_ids=self.choice_ids, k=self.a.topk,
                                          temperature=self.a.kl_temperature, chunk=self.chunk)
            offset = 0
            for b, v in enumerate(chunk):
                n = len(positions[b])
                self.cache[v.view_id] = (t["values"][offset:offset + n].float().cpu(),
                                         t["indices"][offset:offset + n].to(torch.int32).cpu())
                self.choice_cache[v.view_id] = t["choice"][b].float().cpu()
                offset += n

    # ---- stage 2 -----------------------------------------------------------------------------------------
    def calibration_step(self, model, mb: dict):
        views = mb["views"]
        reasoning = self.student_reasoning(views, mb["epoch"], "calibration")
        completions = [list(r) + self.answer_ids for r in reasoning]
        logits, _ = aligned_logits(model, [self.prompt_ids(v, False) for v in views], completions,
                                   [[len(c)] for c in completions], self.tokenizer.pad_token_id, self.device)
        z = logits[:, 0, self.choice_ids]
        labels = _labels(views).to(z.device)
        loss, m = choice_ce(z, labels, temperature=self.a.calibration_temperature)
        metrics = {"calibration_ce": m["ce"], "accuracy": m["accuracy"], "p_label": m["p_label"]}
        with torch.no_grad():
            for cell in sorted({v.cell for v in views}):
                sel = torch.tensor([v.cell == cell for v in views], device=z.device)
                metrics[f"calibration_ce/{cell}"] = choice_ce(z[sel].detach(), labels[sel],
                                                              temperature=self.a.calibration_temperature)[1]["ce"]
        return loss, metrics

    # ---- evaluation ----------------------------------------------------------------------------------------
    def evaluate(self, model, views, *, teacher: bool, batch_size: int = 64) -> dict:
        return evaluate_views(model, self.tokenizer, views, teacher=teacher, settings=self.prompt, gen=self.gen,
                              answer_ids=self.answer_ids, choice_ids=self.choice_ids,
                              temperature=self.a.calibration_temperature, batch_size=batch_size,
                              seed=self.cfg.seed, device=self.device)

    def epoch_eval(self, ctx, views):
        """Held-out evaluation of the student at epoch ends: writes ``eval/epoch_<e>/metrics.json``."""
        def on_epoch_end(epoch, step: int) -> dict:
            result = self.evaluate(self.policy, views, teacher=False)
            out = Path(ctx.run_dir) / "eval" / f"epoch_{epoch}"
            write_json_atomic(out / "metrics.json", {k: v for k, v in result.items() if k != "log_odds"})
            keep = ("strict", "mean", "ece", "average", "well_formed")
            flat = {k: result[k] for k in keep if k in result}
            for cell, m in result.get("per_cell", {}).items():
                for k in ("strict", "mean"):
                    if k in m:
                        flat[f"{cell}/{k}"] = m[k]
            return flat

        return on_epoch_end


def _labels(views) -> torch.Tensor:
    return torch.tensor([0 if v.gold == "A" else 1 for v in views])


def sample_teacher(steps: DistillSteps, views: list[ForkView], path: Path, *, batch_size: int = 64):
    """The teacher's reasoning for both views of every item (seeded; read back from ``path`` on resume).

    A view survives when its block ends with ``algo.reasoning_end`` and has at least
    ``algo.min_reasoning_tokens`` tokens before that; an item is kept only when both its views survive.
    Returns (kept views with ``reasoning`` set, counts for ``data_stats.json``)."""
    a = steps.a
    if path.exists():
        saved = {r["view_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    else:
        saved = {}
        for start in range(0, len(views), batch_size):
            chunk = views[start:start + batch_size]
            prompts = [steps.prompt_ids(v, True) for v in chunk]
            seed = derive_seed(steps.cfg.seed, "teacher", start)
            with steps.teacher_model() as m:
                out = generate_reasoning(m, steps.tokenizer, prompts, temperature=a.teacher_temperature, seed=seed,
                                         device=steps.device, **steps.gen)
            for v, (ids, ended) in zip(chunk, out):
                saved[v.view_id] = {"view_id": v.view_id, "reasoning": ids, "well_formed": ended}
        from selectrust.core.io import write_jsonl_atomic

        write_jsonl_atomic(path, list(saved.values()))
    end_len = len(steps.tokenizer(a.reasoning_end, add_special_tokens=False)["input_ids"])
    reasons: dict[str, int] = {}
    ok_view = {}
    for v in views:
        r = saved[v.view_id]
        why = None if r["well_formed"] else "no_reasoning_end"
        if why is None and len(r["reasoning"]) - end_len < a.min_reasoning_tokens:
            why = "too_short"
        if why:
            reasons[why] = reasons.get(why, 0) + 1
        ok_view[v.view_id] = why is None
    by_item: dict[str, list[ForkView]] = {}
    for v in views:
        by_item.setdefault(v.item_id, []).append(v)
    kept = []
    for item_views in by_item.values():
        if all(ok_view[v.view_id] for v in item_views):
            for v in item_views:
                v.reasoning = list(saved[v.view_id]["reasoning"])
                kept.append(v)
    stats = {"items": len(by_item), "views": len(views), "views_dropped": reasons,
             "items_kept": len(kept) // 2, "items_dropped": len(by_item) - len(kept) // 2, "views_kept": len(kept)}
    return kept, stats
