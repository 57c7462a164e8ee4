"""GRPO rollouts as a resumable batch source for ``trainer.runtime.loop.train_loop``.

One *rollout batch* per ``num_iterations`` optimizer steps:

    prompts (sampler; round 0 over-sampled from the zero-variance rate, trainer/rl/oversample.py; prompts whose last
             group had zero variance passed over with algo.zero_variance_skip, trainer/rl/zero_variance_skip.py)
        --backend.generate(n=G)--> completions --rewards (guarded)--> groups
        --drop zero-variance groups, refill (<= max_refill_rounds extra rounds)--> B = P*G samples
        --group advantages (trainer.algos.grpo)--> [old log-probs if num_iterations > 1]
        --> grad_accum micro-batches, replayed num_iterations times

or, with ``algo.env`` set, G multi-turn episodes per prompt through ``trainer.rl.envs.run_episodes``
(reward = the episode's return; every assistant turn is a target). How the groups of one round are generated and
scored, and their advantages, is the *rollout mode* (``trainer/rl/rollout_modes.py``: single turn, environment,
paired context); everything else here (the batch builder :class:`RolloutSource`) is the same for every mode.

Seeds: prompt ``k`` of generation round ``r`` of rollout batch ``n`` is sampled with its own seed
``prompt_seed(seed, n, r, k)`` (``k`` = its position in the round's *global* draw), and the backend
draws each of its G samples from a stream of its own (``selectrust.generation.backends.base.GenerationRequest``).
So the completions depend on (weights, prompt, seed, n, r, k) only: not on the number of ranks, on
which rank generates the prompt, or on its batch.

Several ranks (``world > 1``) build one *global* batch, exactly the batch one process would build: every rank draws
the same global prompts of a round, generates its contiguous share, and the groups are exchanged (``all_gather``) so
every rank holds all of them; the drop/refill decision (:func:`fill_batch`), the advantages and the token count of
``token_mean`` (the global step's, divided by ``grad_accum * world``) are then the same on every rank. Rank ``r``
trains on its slice of every global micro-batch (:func:`rank_rows`, the order the loop's ``data_hash`` lists), so a
W-rank run equals a 1-rank run with the same global batch (tests/trainer/runtime/test_distributed.py).

Exact resume: the state is (sampler position, rollout index, cursor into the batch, reward error count, the
zero-variance rate and each prompt's last outcome) plus, only when a checkpoint falls inside the ``num_iterations``
replays of one batch, the global batch itself (the policy that generated it no longer exists). A resumed run
regenerates identical rollouts from identical weights.

Departures from TRL's GRPOTrainer, on purpose: zero-variance groups are dropped and refilled (verl/OpenRLHF
dynamic sampling); still short after ``max_refill_rounds``, the batch is topped up with dropped groups (advantage 0)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from selectrust.generation.prompts import PromptSettings

from trainer.runtime.interrupt import interruptible
# The prompt rows, the groups and the ranks live in their own modules; this module exports their public names too
# (``from trainer.rl.rollout import Group, load_rl_prompts, ...`` keeps working).
from trainer.rl.groups import Group, Rollout, fill_batch
from trainer.rl.oversample import ZeroVarianceRate, first_round_size
from trainer.rl.prompt_rows import check_prompt_lengths, load_rl_prompts
from trainer.rl.ranks import Ranks, prompt_seed, rank_rows, share
from trainer.rl.rewards import status_counts
from trainer.rl.sft_rows import sft_batch, sft_microbatch
from trainer.rl.zero_variance_skip import ZeroVarianceMemory, draw_prompts
import pickle
from trainer.logprobs.logprobs import right_pad
from trainer.logprobs.group_packing import packed_token_counts, report_unshared_groups

__all__ = ["Group", "Ranks", "Rollout", "RolloutSettings", "RolloutSource", "check_prompt_lengths", "fill_batch",
           "load_rl_prompts", "prompt_seed", "rank_rows", "share"]


# ---------------------------------------------------------------------------------------------------
# The batch source
# ---------------------------------------------------------------------------------------------------
@dataclass
class RolloutSettings:
    """What the source needs to know, all required: the defaults live in the schema
    (:class:`trainer.config.GRPOAlgoConfig`), so build one with :meth:`from_config`."""

    group_size: int
    num_groups: int                 # groups (prompts) per optimizer step, over all ranks
    grad_accum: int
    num_iterations: int
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: list[str]
    std_scaling: str
    drop_zero_variance: bool
    max_refill_rounds: int
    oversample_cap: float
    zero_variance_skip: float
    mask_truncated: bool
    prompt_settings: PromptSettings
    seed: int
    shared_prompt: bool  # the loss runs each group's prompt once: report the groups that cannot share it
    sft_coef: float  # > 0: the SFT rows of each batch (trainer/rl/sft_rows.py) ride with its micro-batches
    sft_rows: str
    sft_target: str

    @classmethod
    def from_config(cls, algo, *, num_groups: int, grad_accum: int, prompt_settings: PromptSettings, seed: int):
        """``algo``: the ``algo`` group of a GRPO config (or a ``GRPOAlgoConfig``)."""
        return cls(group_size=algo.group_size, num_groups=num_groups, grad_accum=grad_accum,
                   num_iterations=algo.num_iterations, max_new_tokens=algo.max_new_tokens,
                   temperature=algo.temperature, top_p=algo.top_p, stop=list(algo.stop),
                   std_scaling=algo.std_scaling, drop_zero_variance=algo.drop_zero_variance,
                   max_refill_rounds=algo.max_refill_rounds, oversample_cap=algo.oversample_cap,
                   zero_variance_skip=algo.zero_variance_skip, mask_truncated=algo.mask_truncated,
                   prompt_settings=prompt_settings, seed=seed,
                   shared_prompt=algo.shared_prompt, sft_coef=algo.sft_coef, sft_rows=algo.sft_rows,
                   sft_target=algo.sft_target)


class RolloutSource:
    """Batch source of rollouts, the batch builder every rollout mode shares (see the module docstring).
    ``next_microbatch()`` returns::

        {"input_ids", "attention_mask", "completion_mask": (b, T) long,  # right-padded
         "advantages": (b,), "old_logps": (b, T) or None, "rollout_logps": (b, T) or None,
         "num_tokens": float,   # masked tokens of the global batch / (grad_accum * world)
         "item_ids": [...]}

    ``mode``: a :class:`trainer.rl.rollout_modes.RolloutMode` (single turn with a reward, or an environment),
    which generates and scores the groups; its tokenizer pads the micro-batches. ``ranks``: this process's
    place (:class:`Ranks`; one process by default).

    ``backend_factory()`` returns a GenerationBackend over the live policy. ``old_logps_fn(input_ids, attention_mask,
    completion_mask) -> (B, T)``: the policy's log-probs under no_grad (``num_iterations > 1``). ``pre_generate(step)``
    runs before every rollout batch (adapter sync to a server) and returns metrics, plus optionally
    ``"served_adapter"`` (the server-side name requests go to) and ``"adapter_version"`` / ``"adapter_checksum"``,
    repeated on every metrics line until the next sync (every line names the weights its rollouts came from).
    """

    def __init__(self, rows: list[dict], sampler, mode, *, settings: RolloutSettings,
                 backend_factory: Callable[[], Any], old_logps_fn: Callable | None = None,
                 pre_generate: Callable[[int], dict] | None = None, ranks: Ranks | None = None):
        ranks = ranks or Ranks()
        rank, world = ranks.rank, ranks.world
        if settings.num_iterations > 1 and old_logps_fn is None:
            raise ValueError("num_iterations > 1 needs old_logps_fn (stored old log-probs)")
        if world > 1 and ranks.all_gather is None:
            raise ValueError(f"world={world} needs all_gather (the ranks exchange their generated groups)")
        if not 0 <= rank < world:
            raise ValueError(f"rank={rank} is not in [0, world={world})")
        rank_rows(settings.num_groups * settings.group_size, rank, world, settings.grad_accum)  # raises if uneven
        self.rows, self.sampler, self.s, self.mode = rows, sampler, settings, mode
        self.tokenizer = mode.tokenizer
        self.backend_factory = backend_factory
        self._backend = None
        self.old_logps_fn, self.pre_generate = old_logps_fn, pre_generate
        self.rank, self.world = rank, world
        self.all_gather = ranks.all_gather if ranks.all_gather is not None else (lambda obj: [obj])
        self.rollout_index = 0     # rollout batches generated so far
        self.cursor = 0            # micro-batches served from the current batch (over all iterations)
        self.optimizer_steps = 0   # for pre_generate(step)
        self._batch: dict | None = None
        self._metrics: dict[str, float] = {}
        self._adapter: str | None = None
        self._adapter_info: dict[str, str] = {}  # version + checksum of the weights in use
        self._step_started = time.time()
        self._gen_time = 0.0
        self.zero_variance = ZeroVarianceRate()  # over every rollout batch so far: sizes the first round
        skip = settings.zero_variance_skip if settings.drop_zero_variance else 0.0  # algo.zero_variance_skip
        self.zero_variance_memory = ZeroVarianceMemory(skip, settings.seed)  # each prompt's last outcome

    # -- BatchSource protocol ------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.sampler.epoch

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
                 "reward": self.mode.state_dict(), "zero_variance": self.zero_variance.state_dict(),
                 "zero_variance_memory": self.zero_variance_memory.state_dict(),
                 "batch": _batch_to_json(self._batch) if mid else None}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.rollout_index = int(state["rollout_index"])
        self.cursor = int(state["cursor"])
        self.optimizer_steps = int(state.get("optimizer_steps", 0))
        self.mode.load_state_dict(state.get("reward", {}))
        self.zero_variance.load_state_dict(state.get("zero_variance", ZeroVarianceRate().state_dict()))
        self.zero_variance_memory.load_state_dict(state.get("zero_variance_memory", {}))
        self._batch = _batch_from_json(state["batch"]) if state.get("batch") else None
        if self._batch is None:
            self.cursor = self.s.grad_accum * self.s.num_iterations  # next call collects a fresh batch

    def pop_metrics(self) -> dict:
        m, self._metrics = self._metrics, {}
        m.update(self._adapter_info)
        # share of this optimizer step (first micro-batch request .. now) spent generating rollouts
        m["generation_fraction"] = round(self._gen_time / max(time.time() - self._step_started, 1e-9), 4)
        self._gen_time = 0.0
        m.update(self.mode.pop_metrics())
        return m

    # -- collection ------------------------------------------------------------------------------------
    @property
    def backend(self):
        if self._backend is None:
            self._backend = self.backend_factory()
        return self._backend

    def _generate_round(self, n: int, rnd: int) -> list[Group]:
        """The ``n`` groups of round ``rnd`` in global order: every rank draws the same ``n`` prompts, generates and
        scores its share, the shares are gathered. A stop signal while the round draws its prompts or generates (between
        or inside the backend's batches) abandons the step on every rank."""
        lo, hi = share(n, self.rank, self.world)
        t0 = time.time()
        picks, mine, failure = [], [], None  # the round's draws, this rank's groups, an error to hand on
        try:
            with interruptible():
                picks, skipped = draw_prompts(self.sampler, self.zero_variance_memory, n, max_skips=len(self.rows),
                                              rollout_index=self.rollout_index, round_index=rnd)
                m = self._metrics
                m["groups_skipped_zero_variance"] = m.get("groups_skipped_zero_variance", 0.0) + skipped
                seeds = [prompt_seed(self.s.seed, self.rollout_index, rnd, k) for k in range(lo, hi)]
                if hi > lo:
                    mine = self.mode.groups(self.backend, [self.rows[i] for i in picks[lo:hi]], seeds,
                                            adapter=self._adapter, metrics=self._metrics)
        except Exception as e:  # noqa: BLE001 - re-raised below, on every rank
            if self.world == 1:
                raise
            failure = e
        self._gen_time += time.time() - t0
        gathered = self.all_gather((mine, _portable(failure, self.rank)))
        if failure is not None:
            raise failure
        # A failure on one rank (dead server, too many reward errors) stops every rank with that exception
        # (same type: a collective checkpoint-on-error save then runs on all ranks) instead of a hang.
        for r, (_, err) in enumerate(gathered):
            if err is not None:
                if hasattr(err, "add_note"):
                    err.add_note(f"(raised on rank {r} while generating its share of the rollouts)")
                raise err
        parts = [p for p, _ in gathered]
        if len(parts) != self.world or [len(p) for p in parts] != [share(n, r, self.world)[1] - share(n, r, self.world)[0]
                                                                   for r in range(self.world)]:
            raise RuntimeError(f"all_gather returned shares of {[len(p) for p in parts]} groups; expected the "
                               f"{self.world} ranks' shares of {n} groups")
        groups = [g for part in parts for g in part]
        for i, g in zip(picks, groups):
            self.zero_variance_memory.record(i, g.zero_variance)
        return groups

    def _collect(self) -> dict:
        import torch  # deferred: imports torch

        s = self.s
        if self.pre_generate is not None:
            extra = dict(self.pre_generate(self.optimizer_steps) or {})
            self._adapter = extra.pop("served_adapter", self._adapter)
            self._adapter_info.update({k: extra[k] for k in ("adapter_version", "adapter_checksum") if k in extra})
            self._metrics.update({k: v for k, v in extra.items() if isinstance(v, (int, float, str))})
        first_round: list[float] = []
        generated: list[Group] = []  # every round's groups, dropped ones included (the SFT term's rows)

        def generate_round(n: int, rnd: int) -> list[Group]:
            groups = self._generate_round(n, rnd)
            generated.extend(groups)
            if rnd == 0:
                first_round.extend(x for g in groups for x in g.rewards)
            return groups

        first = (first_round_size(s.num_groups, self.zero_variance.rate, s.oversample_cap) if s.drop_zero_variance
                 else s.num_groups)
        groups, stats = fill_batch(generate_round, num_groups=s.num_groups, max_refill_rounds=s.max_refill_rounds,
                                   drop_zero_variance=s.drop_zero_variance, first_round=first)
        self.zero_variance.update(stats)
        samples = [x for g in groups for x in g.samples]
        rewards = torch.tensor([x.reward for x in samples], dtype=torch.float32)
        advantages = self.mode.advantages(groups, rewards)  # GRPO's group advantages, unless the mode has its own
        masks = []
        for x in samples:
            m = list(x.completion_mask)
            if s.mask_truncated and x.truncated:
                m = [0] * len(m)
            masks.append(m)
        # the global batch: the same on every rank (each trains on rank_rows of it)
        batch = {"samples": samples, "masks": masks, "advantages": advantages.tolist(), "old_logps": None, "sft": None}
        if s.sft_coef > 0:
            batch["sft"] = sft_batch(generated, self.rows, rule=s.sft_rows, template=s.sft_target,
                                     tokenizer=self.tokenizer, prompt_settings=s.prompt_settings)
            self._metrics.update({"sft/rows": len(batch["sft"]["item_ids"]), "sft/tokens": batch["sft"]["tokens"]})
        if s.num_iterations > 1:
            batch["old_logps"] = self._old_logps(samples, masks)
        n_tok = sum(sum(m) for m in masks)
        batch["num_tokens"] = n_tok / (s.grad_accum * self.world)
        self.rollout_index += 1
        tokens = self._token_metrics(samples, masks)

        rt = torch.tensor(first_round, dtype=torch.float64)
        lens = [x.completion_len for x in samples]
        self._metrics.update({
            "reward_mean": float(rt.mean()), "reward_std": float(rt.std()) if rt.numel() > 1 else 0.0,
            "reward_mean_trained": float(rewards.mean()),
            "completion_len_mean": sum(lens) / len(lens), "completion_len_max": max(lens),
            "truncated_frac": sum(x.truncated for x in samples) / len(samples),
            "rollout_index": self.rollout_index, **{k: float(v) for k, v in stats.items()},
            "groups_generated_per_kept": stats["groups_generated"] / s.num_groups, **tokens,
        })
        self._metrics.update(status_counts(x.answer_status for g in generated for x in g.samples))  # all rounds
        return batch

    def _token_metrics(self, samples: list[Rollout], masks: list[list[int]]) -> dict[str, float]:
        """``tokens_per_step`` (every row whole) and, with ``shared_prompt``, ``tokens_per_step_shared`` (each
        micro-batch's groups packed) and ``prompt_token_fraction_saved``; logs the groups that cannot share."""
        unshared = sum(len(x.input_ids) for x in samples)
        if not self.s.shared_prompt:
            return {"tokens_per_step": float(unshared)}
        per = len(samples) // (self.s.grad_accum * self.world)  # global micro-batches: consecutive chunks
        chunks = [range(i, i + per) for i in range(0, len(samples), per)]
        packed = sum(packed_token_counts([samples[k].input_ids for k in c], [masks[k] for k in c])[0] for c in chunks)
        fallbacks = sum(report_unshared_groups([samples[k].input_ids for k in c], [masks[k] for k in c],
                                               [samples[k].item_id for k in c]) for c in chunks)
        return {"tokens_per_step": float(unshared), "tokens_per_step_shared": float(packed),
                "prompt_token_fraction_saved": 1.0 - packed / max(unshared, 1),
                "shared_prompt_fallback_groups": float(fallbacks)}

    def _micro_rows(self, n: int) -> list[list[int]]:
        """This rank's rows of an ``n``-sample global batch (:func:`rank_rows`), one list per micro-batch."""
        rows = rank_rows(n, self.rank, self.world, self.s.grad_accum)
        per = len(rows) // self.s.grad_accum
        return [rows[i * per:(i + 1) * per] for i in range(self.s.grad_accum)]

    def _old_logps(self, samples: list[Rollout], masks: list[list[int]]) -> list[list[float]]:
        """Old log-probs of the global batch: each rank computes its own micro-batches', then they are
        gathered (so the stored batch is the same on every rank)."""
        computed: list[list[float]] = []
        for rows in self._micro_rows(len(samples)):
            ids, att, cm = _pad([samples[k].input_ids for k in rows], [masks[k] for k in rows], self.tokenizer)
            lp = self.old_logps_fn(ids, att, cm)
            for row, k in enumerate(rows):
                computed.append([float(v) for v in lp[row, :len(samples[k].input_ids)].tolist()])
        out: list[list[float] | None] = [None] * len(samples)
        for r, part in enumerate(self.all_gather(computed)):
            for k, lp_row in zip(rank_rows(len(samples), r, self.world, self.s.grad_accum), part):
                out[k] = lp_row
        if any(x is None for x in out):
            raise RuntimeError("old log-probs: the gathered shares do not cover the batch")
        return out  # type: ignore[return-value]

    def _microbatch(self, index: int) -> dict:
        import torch  # deferred: imports torch

        b = self._batch
        picked = self._micro_rows(len(b["samples"]))[index]
        samples, masks = [b["samples"][k] for k in picked], [b["masks"][k] for k in picked]
        ids, att, cm = _pad([x.input_ids for x in samples], masks, self.tokenizer)
        T = ids.shape[1]

        def padded(rows):
            t = torch.zeros((len(rows), T), dtype=torch.float32)
            for i, r in enumerate(rows):
                t[i, :len(r)] = torch.tensor(r, dtype=torch.float32)
            return t

        old = padded([b["old_logps"][k] for k in picked]) if b["old_logps"] is not None else None
        rollout = None
        if all(x.rollout_logps is not None for x in samples) and samples:
            rows = [[0.0] * (len(x.input_ids) - len(x.rollout_logps)) + x.rollout_logps for x in samples]
            rollout = padded(rows)
        return {"input_ids": ids, "attention_mask": att, "completion_mask": cm,
                "advantages": torch.tensor([b["advantages"][k] for k in picked], dtype=torch.float32),
                "old_logps": old, "rollout_logps": rollout, "num_tokens": b["num_tokens"],
                "item_ids": [x.item_id for x in samples], "step": self.optimizer_steps,  # the SFT term's rows:
                "sft": sft_microbatch(b.get("sft"), index, rank=self.rank, world=self.world,
                                      grad_accum=self.s.grad_accum, tokenizer=self.tokenizer)}


def _portable(err: BaseException | None, rank: int) -> BaseException | None:
    """``err`` if it survives pickling (to be sent to the other ranks), else a RuntimeError naming it."""
    if err is None:
        return None

    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001 - an exception type that does not pickle
        return RuntimeError(f"rank {rank}: {type(err).__name__}: {err}")


def _pad(rows: list[list[int]], masks: list[list[int]], tokenizer):
    return right_pad(rows, masks, tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                     else tokenizer.eos_token_id)


def _batch_to_json(batch: dict | None) -> dict | None:
    if batch is None:
        return None
    return {**batch, "samples": [x.to_json() for x in batch["samples"]]}


def _batch_from_json(state: dict) -> dict:
    return {**state, "samples": [Rollout(**x) for x in state["samples"]]}
