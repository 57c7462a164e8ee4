"""Privileged-teacher distillation on Taste forks (docs/taste.md#distillation-trainer): views, teacher
sampling, the aligned (gathered) log-probs helper, the position sampler and the logit-based evaluation.

A *view* is one presentation of a fork item (``seeded`` or ``reversed``): the student's prompt (exactly
the evaluation prompt), the teacher's prompt (the same plus a demonstration naming the right candidate)
and the gold letter. A *completion* is reasoning ids (ending in ``algo.reasoning_end``) followed by the
ids of ``algo.answer_prefix``; the *choice position* is the position after the completion, where the
logits of ``algo.choice_tokens`` (A, B) are read.

Alignment: prompts are left-padded and completions right-padded, so completion token ``j`` sits in column
``Lp + j`` of every row, whatever the prompt's length; teacher and student batches differ only in ``Lp``.
Stage 1 (:func:`distill_logprobs`) never builds logits: each model's final hidden states are captured at
the needed columns (the sampled positions and the choice position, :func:`aligned_hidden`) and projected
through the LM head ``chunk`` positions at a time (``trainer/model/chunked_logprobs.py``), keeping only the
log-probs of the top-K support and of the choice tokens, so neither model's ``(B, T, V)`` (or ``(B, P, V)``)
logits exist; with a teacher top-K cache the teacher is not run at all. Evaluation and stage 2 read the
choice position's logits with :func:`aligned_logits` (``logits_to_keep`` = the needed columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from eval_hooks.backends.base import derive_seed
from eval_hooks.io import DataError

from trainer.algos.distill import topk_support_index
from trainer.model.chunked_logprobs import chunked_gather_logprobs, chunked_topk_logprobs, completion_hidden_states

__all__ = ["ForkView", "load_fork_views", "load_mist_views", "load_views", "has_choice_position", "check_task_disjoint", "choice_token_ids",
           "sample_positions", "aligned_logits", "aligned_hidden", "distill_logprobs", "teacher_topk_logprobs",
           "build_batch", "generate_reasoning", "evaluate_views", "expected_calibration_error",
           "eval_settings", "advice_from_log_odds"]


@dataclass
class ForkView:
    view_id: str
    item_id: str
    task_id: str | None
    condition: str
    gold: str                       # "A" | "B"
    student_prompt: str
    teacher_prompt: str
    row: dict                       # the evaluation row (taste family), for scoring
    reasoning: list[int] = field(default_factory=list)  # teacher-written reasoning ids (stage 1)

    @property
    def cell(self) -> str:
        if "construction" not in self.row:  # a MIST view (load_mist_views): one cell per condition
            return self.condition
        return f"{self.row['construction']}_{self.row['domain']}"


def load_fork_views(path, *, style: str, demonstration: str, require_task_id: bool = True) -> list[ForkView]:
    """Views of every item of a taste file (validated by the taste family: errors name file, line, field).

    ``style``: ``taste`` (the evaluation prompt of ``eval_hooks/families/taste/family.py``; the teacher's prompt
    adds a blank line and ``demonstration.format(right=..., wrong=...)``) or ``compact`` (the toy's
    one-line prompt, ``eval_hooks/builders/taste_toy.py``)."""
    from eval_hooks.builders.taste_toy import compact_demonstration, compact_prompt
    from eval_hooks.families import get_family
    from eval_hooks.io import read_records

    records = read_records(path)
    rows = get_family("taste").expand_records(records, path)
    by_id = {str(rec["item_id"]): (line, rec) for line, rec in records}
    views = []
    for row in rows:
        line, rec = by_id[row["item_id"]]
        if require_task_id and row.get("task_id") is None:
            raise DataError("missing task_id: distillation trains and tests on task-disjoint folds", path=path,
                            line=line, field="task_id", accepted="a non-empty string or an integer")
        a, b = rec["candidate_a"], rec["candidate_b"]
        first, second = (a, b) if row["condition"] == "seeded" else (b, a)
        right, wrong = (a, b) if rec["label"] == "A" else (b, a)
        if style == "compact":
            student = compact_prompt(rec["task"], first, second)
            teacher = f"{student} {compact_demonstration(right, wrong, row['gold'])}"
        else:
            student = row["prompt"]
            teacher = f"{student}\n\n{demonstration.format(right=right.strip(), wrong=wrong.strip())}"
        views.append(ForkView(view_id=row["row_id"], item_id=row["item_id"], task_id=row.get("task_id"),
                              condition=row["condition"], gold=row["gold"], student_prompt=student,
                              teacher_prompt=teacher, row=row))
    return views


def load_mist_views(path) -> list[ForkView]:
    """OPSD views of a MIST quartet file (SCOPE's on-policy self-distillation baseline): one per item, the
    student's prompt = the item's ``misleading`` row prompt, the teacher's = its ``clean`` row prompt.

    The rows come from the same loader as the matched evaluation (``eval_hooks.load_rows`` on
    ``trainer.data.train_data.resolve_data_path(path)``, so registered data sources work), with its quartet
    checks (errors name file, line and field); the prompts are the rows' ``prompt`` strings, which the
    trainer renders with the same :func:`eval_hooks.prompts.render_prompt` settings as evaluation. A MIST
    view has no choice position: ``gold`` is the item's answer (not a letter)."""
    from eval_hooks import load_rows

    from trainer.data.train_data import resolve_data_path

    rows = load_rows("mist", resolve_data_path(str(path)))
    by_item: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_item.setdefault(row["item_id"], {})[row["condition"]] = row
    views = []
    for item_id, conds in by_item.items():
        mis, clean = conds["misleading"], conds["clean"]
        views.append(ForkView(view_id=mis["row_id"], item_id=item_id, task_id=None, condition="misleading",
                              gold=str(mis["gold"]), student_prompt=mis["prompt"], teacher_prompt=clean["prompt"],
                              row=mis))
    if not views:
        raise DataError("no MIST item: OPSD needs at least one quartet", path=path)
    return views


def has_choice_position(style: str) -> bool:
    """Whether views of ``data.prompt_style`` end in an A/B choice position (and an answer prefix): every style
    but ``mist``, whose OPSD views are scored on the student's own answer tokens alone."""
    return style != "mist"


def load_views(path, *, style: str, demonstration: str) -> list[ForkView]:
    """:func:`load_mist_views` for ``style=mist``, else :func:`load_fork_views`."""
    if style == "mist":
        return load_mist_views(path)
    return load_fork_views(path, style=style, demonstration=demonstration)


def check_task_disjoint(train: Sequence[ForkView], test_path, test: Sequence[ForkView]) -> None:
    """Raise a DataError naming the test file, line and field when a test item shares a task with training."""
    from eval_hooks.io import read_records

    train_tasks = {v.task_id for v in train}
    shared = {v.item_id for v in test if v.task_id in train_tasks}
    if shared:
        for line, rec in read_records(test_path):
            if str(rec["item_id"]) in shared:
                raise DataError(f"task_id {rec['task_id']!r} is also in the training fold ({len(shared)} item(s) "
                                f"share a task): the folds must be task-disjoint", path=test_path, line=line,
                                field="task_id", accepted="task ids that no training item has")


def choice_token_ids(tokenizer, tokens: Sequence[str], key: str = "algo.choice_tokens") -> list[int]:
    """The single token id of each choice string; a ConfigError naming ``key`` when one is not one token."""
    from trainer.config import ConfigError

    out = []
    for t in tokens:
        ids = tokenizer(t, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ConfigError(f"{key}: {t!r} is {len(ids)} tokens for this tokenizer; each choice must be one token")
        out.append(int(ids[0]))
    return out


def sample_positions(n: int, max_positions: int, *, seed: int, view_id: str, epoch: int) -> list[int]:
    """At most ``max_positions`` of ``range(n)`` (sorted), drawn without replacement by a generator seeded
    with ``(seed, view_id, epoch)``: a pure function of its arguments, so a resumed run draws the same
    positions with no sampler state to save (<= 0 keeps all)."""
    if max_positions <= 0 or n <= max_positions:
        return list(range(n))
    g = torch.Generator().manual_seed(derive_seed(seed, "positions", view_id, epoch))
    return sorted(torch.randperm(n, generator=g)[:max_positions].tolist())


def build_batch(prompts: Sequence[list[int]], completions: Sequence[list[int]], pad_id: int) -> dict:
    """Left-padded prompts + right-padded completions: ``input_ids, attention_mask, position_ids`` ``(B, Lp + C)``
    and ``prompt_width`` Lp (completion token j of every row is in column Lp + j)."""
    lp = max(len(p) for p in prompts)
    c = max(len(x) for x in completions)
    ids = torch.full((len(prompts), lp + c), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, (p, x) in enumerate(zip(prompts, completions)):
        ids[i, lp - len(p):lp] = torch.tensor(p, dtype=torch.long)
        ids[i, lp:lp + len(x)] = torch.tensor(x, dtype=torch.long)
        att[i, lp - len(p):lp + len(x)] = 1
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    return {"input_ids": ids, "attention_mask": att, "position_ids": pos, "prompt_width": lp}


def aligned_logits(model, prompts: Sequence[list[int]], completions: Sequence[list[int]],
                   positions: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at completion-relative positions, with only those columns through the LM head.

    ``positions[b]``: positions ``j`` in ``[0, len(completions[b])]`` of row b; the logits at ``j`` are the
    distribution of completion token j (``j = len(completion)`` is the choice position). Returns
    ``(logits (B, P, V), mask (B, P))`` with ``P = max_b len(positions[b])`` (padding entries masked).
    Both teacher and student call this with their own prompts and the same completions and positions,
    so entry ``[b, p]`` of the two results is the same completion position."""
    batch = build_batch(prompts, completions, pad_id)
    lp = batch["prompt_width"]
    cols = sorted({lp - 1 + j for ps in positions for j in ps})
    index = {c: i for i, c in enumerate(cols)}
    width = max(len(ps) for ps in positions)
    gather = torch.zeros(len(positions), width, dtype=torch.long)
    mask = torch.zeros(len(positions), width)
    for b, ps in enumerate(positions):
        for p, j in enumerate(ps):
            gather[b, p] = index[lp - 1 + j]
            mask[b, p] = 1.0
    out = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                position_ids=batch["position_ids"].to(device), logits_to_keep=torch.tensor(cols, device=device),
                use_cache=False)
    logits = out.logits  # (B, len(cols), V)
    picked = logits.gather(1, gather.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    return picked, mask.to(device)


DEFAULT_LOGPROB_CHUNK = 1024  # positions per LM-head chunk when model.logprob_chunk is 0


def aligned_hidden(model, prompts: Sequence[list[int]], completions: Sequence[list[int]],
                   positions: Sequence[Sequence[int]], pad_id: int, device):
    """Final hidden states at completion-relative positions and at the choice position, no logits.

    ``positions[b]``: strictly increasing positions ``j`` in ``[0, len(completions[b]))`` of row b (the hidden
    state at ``j`` gives the distribution of completion token j); the choice position ``len(completions[b])``
    is always added. Returns ``(tokens (N, H), choice (B, H), head_weight (V, H), mask (B, P))``: ``tokens`` in
    row-major order of ``mask``'s ones (``N = sum_b len(positions[b])``, ``P = max_b len(positions[b])``).
    The batch layout is :func:`build_batch`'s plus one padding column (so the longest row's choice
    position exists); the model runs with ``logits_to_keep=1`` (``completion_hidden_states``)."""
    batch = build_batch(prompts, completions, pad_id)
    lp = batch["prompt_width"]
    ids = torch.nn.functional.pad(batch["input_ids"], (0, 1), value=pad_id)
    att = torch.nn.functional.pad(batch["attention_mask"], (0, 1))
    comp = torch.zeros_like(ids)  # comp[b, c] = 1: the hidden state of column c - 1 is kept
    width = max([len(ps) for ps in positions] + [0])
    mask = torch.zeros(len(positions), width)
    for b, (ps, c) in enumerate(zip(positions, completions)):
        ps = list(ps)
        if ps != sorted(set(ps)) or (ps and (ps[0] < 0 or ps[-1] >= len(c))):
            raise ValueError(f"positions[{b}] must be strictly increasing in [0, {len(c)}); got {ps}")
        comp[b, [lp + j for j in ps] + [lp + len(c)]] = 1
        mask[b, :len(ps)] = 1.0
    try:
        hidden, head = completion_hidden_states(model, ids.to(device), att.to(device), comp.to(device))
    except ValueError as e:  # lm_head_of: a head the chunked projection cannot reproduce
        raise ValueError(f"distillation projects hidden states through the LM head itself "
                         f"(trainer/model/chunked_logprobs.py) and needs a plain nn.Linear head without bias or "
                         f"soft-capping (keep lm_head out of model.lora.target_modules): {e}") from e
    counts = torch.tensor([len(ps) + 1 for ps in positions])
    is_choice = torch.zeros(int(counts.sum()), dtype=torch.bool)
    is_choice[counts.cumsum(0) - 1] = True  # each row's choice position is its last (largest) column
    is_choice = is_choice.to(hidden.device)
    return hidden[~is_choice], hidden[is_choice], head.weight, mask.to(hidden.device)


def _rows_to_batch(x: torch.Tensor, mask: torch.Tensor, fill=0) -> torch.Tensor:
    """``(N, S)`` rows in row-major order of ``mask (B, P)``'s ones -> ``(B, P, S)`` (``fill`` elsewhere)."""
    out = torch.full((*mask.shape, x.shape[-1]), fill, dtype=x.dtype, device=x.device)
    return out.masked_scatter(mask.bool().unsqueeze(-1), x)


def _topk(hidden, weight, k: int, *, temperature: float, chunk: int):
    if hidden.shape[0] == 0:
        dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        return (torch.zeros(0, k, dtype=dtype, device=hidden.device),
                torch.zeros(0, k, dtype=torch.long, device=hidden.device))
    return chunked_topk_logprobs(hidden, weight, k, temperature=temperature, chunk=chunk)


def _gather(hidden, weight, index, *, temperature: float, chunk: int) -> torch.Tensor:
    return chunked_gather_logprobs(hidden, weight, index.long(), temperature=temperature, chunk=chunk)[0]


def _choice_logprobs(choice, weight, choice_ids: Sequence[int], *, temperature: float, chunk: int) -> torch.Tensor:
    """``(B, C)`` log-probs of ``choice_ids`` from the choice positions' hidden states ``choice (B, H)``."""
    index = torch.tensor([list(choice_ids)] * choice.shape[0], device=choice.device)
    return _gather(choice, weight, index, temperature=temperature, chunk=chunk)


@torch.no_grad()
def teacher_topk_logprobs(model, prompts, completions, positions, *, pad_id, device, choice_ids: Sequence[int],
                          k: int, temperature: float, chunk: int, index: torch.Tensor | None = None) -> dict:
    """The teacher's side of :func:`distill_logprobs` (no grad): at every position of ``positions`` (see
    :func:`aligned_hidden`) its top-``k`` tokens' log-probs and ids, ``values, indices (N, k)`` (``k = 0``:
    none), with ``index (N, K')`` also its log-probs at those tokens, ``at_index (N, K')``, and ``choice (B, C)``:
    its log-probs of ``choice_ids`` at the choice position. All log-probs are full-vocabulary
    ``log softmax(logits / temperature)``, computed ``chunk`` positions at a time (no ``(N, V)`` tensor)."""
    tokens, choice, weight, mask = aligned_hidden(model, prompts, completions, positions, pad_id, device)
    kw = dict(temperature=temperature, chunk=chunk)
    out = {"mask": mask, "vocab": weight.shape[0]}
    if k:
        out["values"], out["indices"] = _topk(tokens, weight, min(k, weight.shape[0]), **kw)
    if index is not None:
        out["at_index"] = _gather(tokens, weight, index, **kw)
    out["choice"] = _choice_logprobs(choice, weight, choice_ids, **kw)
    return out


def distill_logprobs(student, teacher, student_prompts, teacher_prompts, completions, positions, *, pad_id, device,
                     choice_ids: Sequence[int], k: int, support: str, temperature: float = 1.0,
                     chunk: int = DEFAULT_LOGPROB_CHUNK, teacher_cached: dict | None = None) -> dict:
    """Teacher and student on their own prompts, aligned by completion position, reduced to what the KL needs.

    ``student``: the model being trained (gradients flow); ``teacher``: a zero-argument callable returning a
    context manager that yields the teacher model under no-grad (``DistillSteps.teacher_model``);
    ``positions[b]``: the reasoning positions of row b (strictly increasing, ``< len(completions[b])``); the
    choice position ``len(completions[b])`` is added. ``support`` (``algo.topk_support``): whose top-``k``
    tokens the token KL covers (``trainer/algos/distill.py:topk_support_index``). ``teacher_cached``
    (support ``teacher`` only; the teacher top-K cache): ``values, indices (N, k)`` and ``choice (B, C)`` of the
    teacher at these positions, in place of its forward.

    Returns (log-probs at ``temperature``, i.e. ``log softmax(logits / T)`` over the full vocabulary):
    ``teacher, student (B, P, S)`` on the support, ``valid (B, P, S)`` (False: a union duplicate or
    padding), ``mask (B, P)``, ``teacher_choice, student_choice (B, C)`` at the choice position, ``vocab``.
    ``gathered_forward_kl(teacher, student, valid, mask, vocab=vocab)`` is then ``topk_forward_kl`` of the two
    models' logits; ``choice_kl(T * teacher_choice, T * student_choice, temperature=T)`` is ``choice_kl`` of
    their choice logits (``softmax`` over ``{log p_A, log p_B}`` equals ``softmax`` over ``{z_A / T, z_B / T}``).

    Memory: no ``(B, T, V)`` or ``(N, V)`` logits of either model exist, only ``chunk x V`` at a time. Order:
    with the teacher's support, the teacher runs first and is reduced to ``(N, k)`` before the student's
    forward; the student's or the union's support needs the student's top-K first, so the student's hidden
    states (kept anyway for its backward) are alive while the teacher runs and is reduced.
    """
    if teacher_cached is not None and support != "teacher":
        raise ValueError(f"a cached teacher top-K is the support only with support='teacher'; got {support!r}")
    kw = dict(temperature=temperature, chunk=chunk)
    args = (completions, positions)
    side = dict(pad_id=pad_id, device=device, choice_ids=choice_ids, temperature=temperature, chunk=chunk)
    if support == "teacher":
        if teacher_cached is not None:
            t = teacher_cached
        else:
            with teacher() as m:
                t = teacher_topk_logprobs(m, teacher_prompts, *args, k=k, **side)
        tokens, choice, weight, mask = aligned_hidden(student, student_prompts, *args, pad_id, device)
        index, valid = topk_support_index(t["indices"].to(tokens.device).long(), None, support)
        logp_t = t["values"].to(tokens.device)
    else:
        tokens, choice, weight, mask = aligned_hidden(student, student_prompts, *args, pad_id, device)
        with torch.no_grad():
            s_idx = _topk(tokens.detach(), weight, min(k, weight.shape[0]), **kw)[1]
        with teacher() as m:
            t = teacher_topk_logprobs(m, teacher_prompts, *args, k=k if support == "union" else 0, index=s_idx,
                                      **side)
        if support == "student":
            index, valid, logp_t = *topk_support_index(None, s_idx, support), t["at_index"]
        else:
            index, valid = topk_support_index(t["indices"], s_idx, support)
            logp_t = torch.cat([t["values"], t["at_index"]], dim=-1)
    logp_s = _gather(tokens, weight, index, **kw)
    choice_s = _choice_logprobs(choice, weight, choice_ids, **kw)
    return {"teacher": _rows_to_batch(logp_t.to(mask.device), mask), "student": _rows_to_batch(logp_s, mask),
            "valid": _rows_to_batch(valid.to(mask.device), mask, fill=False), "mask": mask,
            "teacher_choice": t["choice"].to(choice_s.device), "student_choice": choice_s, "vocab": weight.shape[0]}


def truncate_at(tokenizer, ids: list[int], end: str) -> tuple[list[int], bool]:
    """``ids`` up to and including the token whose decoding first completes ``end``; (ids, found)."""
    text = ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[:i + 1], skip_special_tokens=False)
        if end in text:
            return ids[:i + 1], True
    return list(ids), False


@torch.no_grad()
def generate_reasoning(model, tokenizer, prompts: Sequence[list[int]], *, max_new_tokens: int, temperature: float,
                       end: str, seed: int, device) -> list[tuple[list[int], bool]]:
    """Reasoning of each prompt (greedy when ``temperature`` is 0), cut after ``end``: ``[(ids, well_formed)]``.
    Sampling is seeded with ``seed`` inside a forked RNG (the training stream is untouched)."""
    batch = build_batch(prompts, [[] for _ in prompts], tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else \
            dict(do_sample=False)
        out = model.generate(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, **kw)
    if was_training:
        model.train()
    lp = batch["input_ids"].shape[1]
    results = []
    for row in out[:, lp:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[:row.index(tokenizer.eos_token_id)]
        results.append(truncate_at(tokenizer, row, end))
    return results


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """ECE with ``bins`` equal-width confidence bins: sum_b (n_b / N) |accuracy_b - mean confidence_b|."""
    n = len(confidence)
    if n == 0:
        return float("nan")
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(confidence) if (lo < c <= hi) or (b == 0 and c == 0.0)]
        if idx:
            acc = sum(bool(correct[i]) for i in idx) / len(idx)
            conf = sum(confidence[i] for i in idx) / len(idx)
            total += len(idx) / n * abs(acc - conf)
    return total


@torch.no_grad()
def choice_logits_after(model, tokenizer, prompts, reasonings, *, answer_ids: list[int], choice_ids: list[int],
                        device) -> torch.Tensor:
    """``(B, 2)`` logits of the choice tokens at the choice position after ``reasoning + answer prefix``."""
    completions = [list(r) + answer_ids for r in reasonings]
    logits, _ = aligned_logits(model, prompts, completions, [[len(c)] for c in completions],
                               tokenizer.pad_token_id, device)
    return logits[:, 0, choice_ids].float()


def evaluate_views(model, tokenizer, views: Sequence[ForkView], *, teacher: bool, settings, gen: dict,
                   answer_ids: list[int], choice_ids: list[int], temperature: float, batch_size: int,
                   seed: int, device) -> dict[str, Any]:
    """The model writes its reasoning (greedy) for every view, then answers by the larger choice logit.

    Returns the taste metrics (``strict``, ``mean``, per cell/domain, ...) plus ``ece`` of the choice
    probability ``softmax(z / temperature)`` (confidence = probability of the chosen letter, 10 bins),
    ``well_formed`` (fraction of reasoning blocks that ended properly) and per-view ``log_odds``
    (log p(A) - log p(B), for advice)."""
    from eval_hooks.families import get_family
    from eval_hooks.metrics import compute_metrics
    from eval_hooks.prompts import render_prompt

    family = get_family("taste")
    scores, conf, correct, log_odds, formed = [], [], [], {}, 0
    for start in range(0, len(views), batch_size):
        chunk = views[start:start + batch_size]
        prompts = [render_prompt(tokenizer, v.teacher_prompt if teacher else v.student_prompt, settings)
                   for v in chunk]
        reasoning = generate_reasoning(model, tokenizer, prompts, temperature=0.0, seed=seed, device=device, **gen)
        formed += sum(ok for _, ok in reasoning)
        z = choice_logits_after(model, tokenizer, prompts, [r for r, _ in reasoning], answer_ids=answer_ids,
                                choice_ids=choice_ids, device=device)
        probs = torch.softmax(z / temperature, dim=-1)
        for v, zi, pi in zip(chunk, z, probs):
            letter = "A" if zi[0] >= zi[1] else "B"
            scores.append(family.score_row(v.row, f"ANSWER: {letter}"))
            conf.append(float(pi.max()))
            correct.append(letter == v.gold)
            log_odds[v.view_id] = float(zi[0] - zi[1])
    metrics = compute_metrics("taste", scores)
    metrics["ece"] = expected_calibration_error(conf, correct)
    metrics["well_formed"] = formed / max(1, len(views))
    metrics["log_odds"] = log_odds
    return metrics


def advice_from_log_odds(views: Sequence[ForkView], log_odds: dict[str, float], items: dict[str, dict],
                         template: str) -> list[dict]:
    """One advice row per item: the student's A-vs-B log-odds summed over both orders, in the stored
    candidates' terms (``score = lo(seeded) - lo(reversed)``: the reversed view shows candidate_b as A),
    the favoured candidate (``candidate_a`` when score >= 0) and ``template`` rendered with ``favoured``,
    ``other`` (candidate texts) and ``score``."""
    by_item: dict[str, dict[str, float]] = {}
    for v in views:
        by_item.setdefault(v.item_id, {})[v.condition] = log_odds[v.view_id]
    rows = []
    for item_id, lo in by_item.items():
        rec = items[item_id]
        score = lo.get("seeded", 0.0) - lo.get("reversed", 0.0)
        letter = "A" if score >= 0 else "B"
        favoured, other = (rec["candidate_a"], rec["candidate_b"])[::1 if letter == "A" else -1]
        rows.append({"item_id": item_id, "task_id": rec.get("task_id"), "favoured": letter,
                     "favoured_candidate": favoured, "score": score,
                     "note": template.format(favoured=favoured.strip(), other=other.strip(), score=score)})
    return rows


def eval_settings(tokenizer, algo) -> dict[str, Any]:
    """The keyword arguments of :func:`evaluate_views` that come from the ``algo`` config node."""
    return dict(gen=dict(max_new_tokens=algo.max_reasoning_tokens, end=algo.reasoning_end),
                answer_ids=list(tokenizer(algo.answer_prefix, add_special_tokens=False)["input_ids"]),
                choice_ids=choice_token_ids(tokenizer, algo.choice_tokens), temperature=algo.calibration_temperature)
