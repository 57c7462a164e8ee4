"""GRPO rollouts as a resumable batch source for ``trainer.loop.train_loop``.

One *rollout batch* per ``num_iterations`` optimizer steps:

    prompts (sampler) --backend.generate(n=G)--> completions --rewards (guarded)--> groups
        --drop zero-variance groups, refill (<= max_refill_rounds extra rounds)--> B = P*G samples
        --group advantages (trainer.algos.grpo)--> [old log-probs if num_iterations > 1]
        --> grad_accum micro-batches, replayed num_iterations times

or, with ``algo.env`` set, G multi-turn episodes per prompt through ``trainer.envs.run_episodes``
(reward = the episode's return; every assistant turn is a target).

Exact resume: generation round ``r`` of rollout batch ``n`` is seeded with ``round_seed(seed, n, r,
rank)``, so the state is just (sampler position, rollout index, cursor into the batch, reward error
count) plus, only when a checkpoint falls inside the ``num_iterations`` replays of one batch, the
batch itself (token ids, advantages, old log-probs: the policy that generated it no longer exists).
A resumed run regenerates identical rollouts from identical weights.

Departures from TRL's GRPOTrainer, on purpose: zero-variance groups are dropped and refilled
(verl/OpenRLHF dynamic sampling); if still short after ``max_refill_rounds`` the batch is topped up
with dropped groups (advantage 0, so no policy-gradient signal) to keep its size; with several ranks
each rank generates and normalises its own slice (``std_scaling=batch`` uses the rank's batch).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from eval_hooks.io import DataError


# ---------------------------------------------------------------------------------------------------
# Prompt rows
# ---------------------------------------------------------------------------------------------------
def load_rl_prompts(path: str, *, family: str | None = None, conditions: Sequence[str] = ()) -> list[dict]:
    """RL prompt rows ``{item_id, prompt, gold, answer_type, [choices]}``.

    ``family=None``: a JSONL/Parquet file of such rows (``toy:<seed>/grpo_prompts.jsonl`` works).
    ``family='box2'`` (or any eval family): an items file expanded by ``eval_hooks.load_rows``, keeping
    only ``conditions`` (e.g. ``["bad"]``: train on bad-workflow inputs, SPEC §2).
    """
    from eval_hooks.io import read_records
    from eval_hooks.parsers import normalize_gold

    from .data import resolve_data_path

    real = resolve_data_path(path)
    if family:
        from eval_hooks import load_rows

        rows = load_rows(family, real)
        if conditions:
            rows = [r for r in rows if r["condition"] in set(conditions)]
        out = [{**r, "item_id": r["row_id"]} for r in rows]
        if not out:
            raise DataError(f"no rows with conditions {list(conditions)} in this {family} file", path=real,
                            field="condition")
        return out
    out, seen = [], {}
    for line, rec in read_records(real):
        for f in ("prompt", "gold", "answer_type"):
            if rec.get(f) is None:
                raise DataError("missing field", path=real, line=line, field=f,
                                accepted="{item_id, prompt, gold, answer_type[, choices]}")
        if not isinstance(rec["prompt"], str) or not rec["prompt"].strip():
            raise DataError("empty prompt", path=real, line=line, field="prompt", accepted="a non-empty string")
        if normalize_gold(rec["gold"], rec["answer_type"], choices=rec.get("choices")) is None:
            raise DataError(f"gold {rec['gold']!r} is not a valid {rec['answer_type']} answer", path=real,
                            line=line, field="gold")
        item_id = str(rec.get("item_id", f"line{line}"))
        if item_id in seen:
            raise DataError(f"duplicate item_id {item_id!r} (first on line {seen[item_id]})", path=real,
                            line=line, field="item_id")
        seen[item_id] = line
        out.append({**rec, "item_id": item_id, "_line": line, "_path": real})
    return out


def check_prompt_lengths(rows: Sequence[dict], tokenizer, *, max_prompt_len: int, use_chat_template: bool) -> list[int]:
    """Token length of every rendered prompt; a prompt over ``max_prompt_len`` raises (before any
    generation) naming the row. Returns the lengths."""
    lengths = []
    for r in rows:
        n = len(render_prompt_ids(tokenizer, r["prompt"], use_chat_template))
        if n > max_prompt_len:
            raise DataError(f"prompt of {r['item_id']!r} has {n} tokens > data.max_prompt_len={max_prompt_len}",
                            path=r.get("_path"), line=r.get("_line"), field="prompt",
                            accepted="shorter prompts, or raise data.max_prompt_len (RL prompts are never truncated)")
        lengths.append(n)
    return lengths


def render_prompt_ids(tokenizer, prompt: str, use_chat_template: bool) -> list[int]:
    if use_chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt + "\n", add_special_tokens=False)["input_ids"])


def round_seed(seed: int, rollout_index: int, round_index: int, rank: int) -> int:
    """Generation seed of one round: a stable hash of (seed, rollout batch, refill round, rank)."""
    blob = f"{seed}/{rollout_index}/{round_index}/{rank}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------------
# Groups and the drop/refill rule (pure python; tested with a fake generator)
# ---------------------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One sample: the tokens to train on and its outcome."""

    item_id: str
    input_ids: list[int]
    completion_mask: list[int]
    reward: float
    reward_ok: bool = True
    truncated: bool = False
    completion_len: int = 0
    rollout_logps: list[float] | None = None  # backend log-probs at the completion_mask positions

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Group:
    item_id: str
    samples: list[Rollout]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @property
    def zero_variance(self) -> bool:
        r = self.rewards
        return all(x == r[0] for x in r)


def fill_batch(generate_round: Callable[[int, int], list[Group]], *, num_groups: int, max_refill_rounds: int,
               drop_zero_variance: bool, reduce_max: Callable[[int], int] = lambda x: x) -> tuple[list[Group], dict]:
    """Collect ``num_groups`` groups. ``generate_round(n, r)`` returns ``n`` fresh groups for round ``r``.

    Round 0 asks for ``num_groups``; with ``drop_zero_variance`` the groups whose rewards all agree are
    dropped and rounds 1..``max_refill_rounds`` each ask for the number still missing (``reduce_max``
    makes all ranks agree on that number, so their prompt samplers stay in step; surplus groups are
    discarded). If still short, dropped groups top the batch up (advantage 0). Returns the groups
    (kept first, in generation order) and counts: ``groups_generated``, ``groups_dropped``,
    ``groups_refilled`` (kept groups that came from refill rounds), ``refill_rounds``,
    ``groups_padded_zero_variance``, ``zero_variance_frac`` (of round 0).
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    kept: list[Group] = []
    dropped: list[Group] = []
    stats = {"groups_generated": 0, "groups_dropped": 0, "groups_refilled": 0, "refill_rounds": 0,
             "groups_padded_zero_variance": 0, "zero_variance_frac": 0.0}
    for rnd in range(max_refill_rounds + 1):
        need = reduce_max(num_groups - len(kept))
        if need <= 0:
            break
        groups = generate_round(need, rnd)
        if len(groups) != need:
            raise RuntimeError(f"generation round {rnd} returned {len(groups)} groups, expected {need}")
        stats["groups_generated"] += len(groups)
        if rnd > 0:
            stats["refill_rounds"] += 1
        zv = [g.zero_variance for g in groups]
        if rnd == 0:
            stats["zero_variance_frac"] = sum(zv) / len(groups)
        for g, z in zip(groups, zv):
            if drop_zero_variance and z:
                dropped.append(g)
                stats["groups_dropped"] += 1
            elif len(kept) < num_groups:
                kept.append(g)
                stats["groups_refilled"] += rnd > 0
        if not drop_zero_variance:
            break
    if len(kept) < num_groups:
        pad = dropped[:num_groups - len(kept)]
        stats["groups_padded_zero_variance"] = len(pad)
        kept.extend(pad)
    return kept, stats


# ---------------------------------------------------------------------------------------------------
# The batch source
# ---------------------------------------------------------------------------------------------------
@dataclass
class RolloutSettings:
    group_size: int
    num_groups: int                 # groups per optimizer step on this rank
    grad_accum: int
    num_iterations: int = 1
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    std_scaling: str = "group"
    drop_zero_variance: bool = True
    max_refill_rounds: int = 2
    mask_truncated: bool = False
    use_chat_template: bool = True
    seed: int = 0

    @classmethod
    def from_config(cls, algo, *, num_groups: int, grad_accum: int, use_chat_template: bool, seed: int):
        return cls(group_size=algo.group_size, num_groups=num_groups, grad_accum=grad_accum,
                   num_iterations=algo.num_iterations, max_new_tokens=algo.max_new_tokens,
                   temperature=algo.temperature, top_p=algo.top_p, stop=list(algo.stop),
                   std_scaling=algo.std_scaling, drop_zero_variance=algo.drop_zero_variance,
                   max_refill_rounds=algo.max_refill_rounds, mask_truncated=algo.mask_truncated,
                   use_chat_template=use_chat_template, seed=seed)


class RolloutSource:
    """Batch source of rollouts (see the module docstring). ``next_microbatch()`` returns::

        {"input_ids", "attention_mask", "completion_mask": (b, T) long,  # right-padded
         "advantages": (b,), "old_logps": (b, T) or None, "rollout_logps": (b, T) or None,
         "num_tokens": float,   # masked tokens of the whole batch / grad_accum (token-mean over the window)
         "item_ids": [...]}

    ``backend_factory()`` returns a GenerationBackend over the live policy; ``reward`` is a
    :class:`~trainer.rewards.GuardedReward` (single-turn) and ``env_factory`` a zero-argument
    environment factory (multi-turn; then ``reward`` is unused). ``old_logps_fn(input_ids,
    attention_mask, completion_mask) -> (B, T)`` computes the policy's log-probs under no_grad (needed
    when ``num_iterations > 1``). ``pre_generate(step)`` runs before every rollout batch (adapter sync
    to a generation server) and returns metrics (numbers and strings, logged with that step), plus
    optionally ``"served_adapter"`` (the server-side name later requests are sent to) and
    ``"adapter_version"`` / ``"adapter_checksum"``, which are repeated on every later metrics line until
    the next sync (so every line names the weights its rollouts came from).
    """

    def __init__(self, rows: list[dict], sampler, *, settings: RolloutSettings, tokenizer,
                 backend_factory: Callable[[], Any], reward=None, env_factory=None,
                 old_logps_fn: Callable | None = None, pre_generate: Callable[[int], dict] | None = None,
                 rank: int = 0, world: int = 1, reduce_max: Callable[[int], int] = lambda x: x):
        if reward is None and env_factory is None:
            raise ValueError("RolloutSource needs a reward function or an environment")
        if settings.num_iterations > 1 and old_logps_fn is None:
            raise ValueError("num_iterations > 1 needs old_logps_fn (stored old log-probs)")
        self.rows, self.sampler, self.s = rows, sampler, settings
        self.tokenizer = tokenizer
        self.backend_factory = backend_factory
        self._backend = None
        self.reward, self.env_factory = reward, env_factory
        self.old_logps_fn, self.pre_generate = old_logps_fn, pre_generate
        self.rank, self.world, self.reduce_max = rank, world, reduce_max
        self.rollout_index = 0     # rollout batches generated so far
        self.cursor = 0            # micro-batches served from the current batch (over all iterations)
        self.optimizer_steps = 0   # for pre_generate(step)
        self._batch: dict | None = None
        self._metrics: dict[str, float] = {}
        self._adapter: str | None = None
        self._adapter_info: dict[str, str] = {}  # version + checksum of the weights in use
        self._step_started = time.time()
        self._gen_time = 0.0

    # -- BatchSource protocol ------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def micro_per_batch(self) -> int:
        return self.s.grad_accum

    def next_microbatch(self) -> dict:
        total = self.s.grad_accum * self.s.num_iterations
        if self.cursor % self.s.grad_accum == 0:
            self._step_started = time.time()
        if self._batch is None or self.cursor >= total:
            self._batch = self._collect()
            self.cursor = 0
        mb = self._microbatch(self.cursor % self.s.grad_accum)
        self.cursor += 1
        if self.cursor % self.s.grad_accum == 0:
            self.optimizer_steps += 1
        return mb

    def state_dict(self) -> dict:
        total = self.s.grad_accum * self.s.num_iterations
        mid = self._batch is not None and 0 < self.cursor < total
        state = {"sampler": self.sampler.state_dict(), "rollout_index": self.rollout_index, "cursor": self.cursor,
                 "optimizer_steps": self.optimizer_steps,
                 "reward": self.reward.state_dict() if self.reward is not None else {},
                 "batch": _batch_to_json(self._batch) if mid else None}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.rollout_index = int(state["rollout_index"])
        self.cursor = int(state["cursor"])
        self.optimizer_steps = int(state.get("optimizer_steps", 0))
        if self.reward is not None:
            self.reward.load_state_dict(state.get("reward", {}))
        self._batch = _batch_from_json(state["batch"]) if state.get("batch") else None
        if self._batch is None:
            self.cursor = self.s.grad_accum * self.s.num_iterations  # next call collects a fresh batch

    def pop_metrics(self) -> dict:
        m, self._metrics = self._metrics, {}
        m.update(self._adapter_info)
        # share of this optimizer step (first micro-batch request .. now) spent generating rollouts
        m["generation_fraction"] = round(self._gen_time / max(time.time() - self._step_started, 1e-9), 4)
        self._gen_time = 0.0
        if self.reward is not None:
            m["reward_errors"] = self.reward.pop_errors()
            m["reward_errors_total"] = self.reward.errors_total
        return m

    # -- collection ------------------------------------------------------------------------------------
    @property
    def backend(self):
        if self._backend is None:
            self._backend = self.backend_factory()
        return self._backend

    def _draw(self, n: int) -> list[dict]:
        draws = self.sampler.draw(n * self.world)
        mine = draws[self.rank * n:(self.rank + 1) * n]
        return [self.rows[i] for i, _ in mine]

    def _generate_round(self, n: int, rnd: int) -> list[Group]:
        items = self._draw(n)
        seed = round_seed(self.s.seed, self.rollout_index, rnd, self.rank)
        t0 = time.time()
        if self.env_factory is not None:
            groups = self._env_groups(items, seed)
        else:
            groups = self._single_turn_groups(items, seed)
        self._gen_time += time.time() - t0
        return groups

    def _single_turn_groups(self, items: list[dict], seed: int) -> list[Group]:
        from eval_hooks.backends.base import GenerationRequest

        s = self.s
        reqs = []
        for r in items:
            kw = dict(n=s.group_size, max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                      stop=list(s.stop), seed=seed, adapter=self._adapter)
            if s.use_chat_template:
                reqs.append(GenerationRequest(messages=[{"role": "user", "content": r["prompt"]}], **kw))
            else:
                reqs.append(GenerationRequest(prompt=r["prompt"] + "\n", **kw))
        t0 = time.time()
        results = self.backend.generate(reqs)
        self._metrics["time_generation_s"] = self._metrics.get("time_generation_s", 0.0) + time.time() - t0
        t1 = time.time()
        groups = []
        for r, res in zip(items, results):
            if len(res.samples) != s.group_size:
                raise RuntimeError(f"backend returned {len(res.samples)} samples for {r['item_id']!r}, expected "
                                   f"algo.group_size={s.group_size} (an empty or short group)")
            p_ids = list(res.prompt_token_ids) or render_prompt_ids(self.tokenizer, r["prompt"], s.use_chat_template)
            samples = []
            for smp in res.samples:
                c_ids, lps = list(smp.token_ids), list(smp.logprobs)
                if not c_ids:  # nothing generated: score the EOS so the sample still has one token
                    c_ids, lps = [self.tokenizer.eos_token_id], [float("nan")]  # NaN: no rollout log-prob (IS weight 1)
                value, ok = self.reward(smp.text, r)
                samples.append(Rollout(item_id=r["item_id"], input_ids=p_ids + c_ids,
                                       completion_mask=[0] * len(p_ids) + [1] * len(c_ids), reward=value,
                                       reward_ok=ok, truncated=smp.finish_reason == "length",
                                       completion_len=len(c_ids),
                                       rollout_logps=lps if len(lps) == len(c_ids) else None))
            groups.append(Group(r["item_id"], samples))
        self._metrics["time_reward_s"] = self._metrics.get("time_reward_s", 0.0) + time.time() - t1
        return groups

    def _env_groups(self, items: list[dict], seed: int) -> list[Group]:
        from .envs import run_episodes

        s = self.s
        t0 = time.time()
        episodes = run_episodes(self.backend, self.env_factory, items, group_size=s.group_size,
                                max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                stop=s.stop, seed=seed)
        self._metrics["time_generation_s"] = self._metrics.get("time_generation_s", 0.0) + time.time() - t0
        groups = []
        for i, item in enumerate(items):
            samples = []
            for ep in episodes[i * s.group_size:(i + 1) * s.group_size]:
                enc = self.tokenizer.apply_chat_template(ep.messages, tokenize=True, return_dict=True,
                                                         return_assistant_tokens_mask=True)
                ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
                samples.append(Rollout(item_id=item["item_id"], input_ids=ids, completion_mask=mask,
                                       reward=ep.reward, truncated=ep.truncated or ep.hit_length,
                                       completion_len=sum(mask)))
            groups.append(Group(item["item_id"], samples))
        return groups

    def _collect(self) -> dict:
        import torch

        from .algos.grpo import group_advantages

        s = self.s
        if self.pre_generate is not None:
            extra = dict(self.pre_generate(self.optimizer_steps) or {})
            self._adapter = extra.pop("served_adapter", self._adapter)
            self._adapter_info.update({k: extra[k] for k in ("adapter_version", "adapter_checksum") if k in extra})
            self._metrics.update({k: v for k, v in extra.items() if isinstance(v, (int, float, str))})
        first_round: list[float] = []

        def generate_round(n: int, rnd: int) -> list[Group]:
            groups = self._generate_round(n, rnd)
            if rnd == 0:
                first_round.extend(x for g in groups for x in g.rewards)
            return groups

        groups, stats = fill_batch(generate_round, num_groups=s.num_groups, max_refill_rounds=s.max_refill_rounds,
                                   drop_zero_variance=s.drop_zero_variance, reduce_max=self.reduce_max)
        samples = [x for g in groups for x in g.samples]
        rewards = torch.tensor([x.reward for x in samples], dtype=torch.float32)
        advantages, _ = group_advantages(rewards, s.group_size, std_scaling=s.std_scaling)
        masks = []
        for x in samples:
            m = list(x.completion_mask)
            if s.mask_truncated and x.truncated:
                m = [0] * len(m)
            masks.append(m)
        batch = {"samples": samples, "masks": masks, "advantages": advantages.tolist(), "old_logps": None}
        if s.num_iterations > 1:
            batch["old_logps"] = self._old_logps(samples, masks)
        n_tok = sum(sum(m) for m in masks)
        batch["num_tokens"] = n_tok / s.grad_accum
        self.rollout_index += 1

        rt = torch.tensor(first_round, dtype=torch.float64)
        lens = [x.completion_len for x in samples]
        self._metrics.update({
            "reward_mean": float(rt.mean()), "reward_std": float(rt.std()) if rt.numel() > 1 else 0.0,
            "reward_mean_trained": float(rewards.mean()),
            "completion_len_mean": sum(lens) / len(lens), "completion_len_max": max(lens),
            "truncated_frac": sum(x.truncated for x in samples) / len(samples),
            "rollout_index": self.rollout_index, **{k: float(v) for k, v in stats.items()},
        })
        return batch

    def _old_logps(self, samples: list[Rollout], masks: list[list[int]]) -> list[list[float]]:
        out: list[list[float]] = []
        per = max(1, math.ceil(len(samples) / self.s.grad_accum))
        for start in range(0, len(samples), per):
            ids, att, cm = _pad([x.input_ids for x in samples[start:start + per]], masks[start:start + per],
                                self.tokenizer)
            lp = self.old_logps_fn(ids, att, cm)
            for row, x in enumerate(samples[start:start + per]):
                out.append([float(v) for v in lp[row, :len(x.input_ids)].tolist()])
        return out

    def _microbatch(self, index: int) -> dict:
        import torch

        b = self._batch
        n = len(b["samples"])
        per = math.ceil(n / self.s.grad_accum)
        lo, hi = index * per, min(n, (index + 1) * per)
        samples, masks = b["samples"][lo:hi], b["masks"][lo:hi]
        ids, att, cm = _pad([x.input_ids for x in samples], masks, self.tokenizer)
        T = ids.shape[1]

        def padded(rows):
            t = torch.zeros((len(rows), T), dtype=torch.float32)
            for i, r in enumerate(rows):
                t[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
            return t

        old = padded(b["old_logps"][lo:hi]) if b["old_logps"] is not None else None
        rollout = None
        if all(x.rollout_logps is not None for x in samples) and samples:
            rows = [[0.0] * (len(x.input_ids) - len(x.rollout_logps)) + x.rollout_logps for x in samples]
            rollout = padded(rows)
        return {"input_ids": ids, "attention_mask": att, "completion_mask": cm,
                "advantages": torch.tensor(b["advantages"][lo:hi], dtype=torch.float32),
                "old_logps": old, "rollout_logps": rollout, "num_tokens": b["num_tokens"],
                "item_ids": [x.item_id for x in samples]}


def _pad(rows: list[list[int]], masks: list[list[int]], tokenizer):
    from trainer.logprobs import right_pad

    return right_pad(rows, masks, tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                     else tokenizer.eos_token_id)


def _batch_to_json(batch: dict | None) -> dict | None:
    if batch is None:
        return None
    return {**batch, "samples": [x.to_json() for x in batch["samples"]]}


def _batch_from_json(state: dict) -> dict:
    return {**state, "samples": [Rollout(**x) for x in state["samples"]]}
