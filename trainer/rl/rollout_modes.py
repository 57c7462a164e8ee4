"""Rollout modes: how the groups of a GRPO rollout batch are generated and scored.

A mode turns prompt rows (and one generation seed per row) into :class:`~trainer.rl.rollout.Group` s of
``group_size`` scored samples; the batch builder (:class:`trainer.rl.rollout.RolloutSource`) does the rest,
the same for every mode: prompt sampling, the exchange of groups between ranks, the drop/refill rule,
advantages, old log-probs and micro-batching.

- :class:`SingleTurnMode`: one completion per sample, scored by a :class:`~trainer.rl.rewards.GuardedReward`.
- :class:`EnvironmentMode` (``algo.env``): a multi-turn episode per sample (``trainer.rl.envs.run_episodes``);
  reward = the episode's return, every assistant turn is a target.
- ``PairedContextMode`` (``algo.rollout_mode=paired_context``, :mod:`trainer.rl.paired_rollouts`): Knowledgeable-R1's
  paired rollouts, G completions with the row's context and G without, with advantages of their own.

The single-turn modes are a registry by name, :data:`trainer.rl.modes.MODES` (``algo.rollout_mode``); a mode's
:meth:`SingleTurnMode.check_rows` refuses rows it cannot sample.

A new mode subclasses :class:`RolloutMode` and supplies ``generate`` (the backend calls) and ``to_groups``
(tokens and rewards), and ``advantages`` where its groups are not GRPO's; the timing metrics
(``time_generation_s``, and ``time_reward_s`` for a mode that scores after generating) come from
:meth:`RolloutMode.groups`.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from selectrust.generation.prompts import prompt_messages, render_prompt

from .groups import Group, Rollout
from .rewards import judge_status
from .rollout import RolloutSettings
from selectrust.generation.backends.base import GenerationRequest
from .envs import run_episodes


class RolloutMode:
    """Generates the groups of a list of prompt rows (see the module docstring)."""

    #: the metric timing :meth:`to_groups` (None: not timed; part of generation, e.g. an episode's rewards)
    scoring_metric: str | None = None

    def __init__(self, settings: RolloutSettings, tokenizer):
        self.s, self.tokenizer = settings, tokenizer

    def groups(self, backend, items: list[dict], seeds: list[int], *, adapter: str | None,
               metrics: dict[str, Any]) -> list[Group]:
        """One group per row of ``items`` (``seeds[i]``: row ``i``'s generation seed); adds the time spent
        to ``metrics``."""
        raw = _timed(metrics, "time_generation_s", self.generate, backend, items, seeds, adapter)
        return _timed(metrics, self.scoring_metric, self.to_groups, items, raw)

    def generate(self, backend, items: list[dict], seeds: list[int], adapter: str | None) -> Any:
        raise NotImplementedError

    def to_groups(self, items: list[dict], generated: Any) -> list[Group]:
        raise NotImplementedError

    def advantages(self, groups: list[Group], rewards):
        """The advantages ``(B,)`` of a rollout batch's samples (``rewards (B,)``: theirs, the groups' samples in
        order): GRPO's group-relative ones over consecutive ``group_size`` samples (``trainer.algos.grpo``)."""
        from trainer.algos.grpo import group_advantages  # deferred: imports torch

        return group_advantages(rewards, self.s.group_size, std_scaling=self.s.std_scaling)[0]

    # -- state saved with the batch source (exact resume) and metrics of each optimizer step ----------------
    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def pop_metrics(self) -> dict:
        return {}


def _timed(metrics: dict[str, Any], key: str | None, fn: Callable, *args):
    t0 = time.time()
    out = fn(*args)
    if key is not None:
        metrics[key] = metrics.get(key, 0.0) + time.time() - t0
    return out


class SingleTurnMode(RolloutMode):
    """``group_size`` completions of each prompt in one backend call, each scored by ``reward`` (a
    :class:`~trainer.rl.rewards.GuardedReward`, whose error count is saved and logged)."""

    scoring_metric = "time_reward_s"

    def __init__(self, settings: RolloutSettings, tokenizer, reward):
        super().__init__(settings, tokenizer)
        self.reward = reward

    @classmethod
    def check_rows(cls, rows: list[dict]) -> None:
        """Refuse prompt rows this mode cannot sample (``DataError``), before any model loads; any row will do here."""

    def generate(self, backend, items, seeds, adapter):
        return backend.generate([self.request(r["prompt"], seed, adapter) for r, seed in zip(items, seeds)])

    def request(self, prompt, seed: int, adapter: str | None):
        """The backend request of ``group_size`` completions of ``prompt`` (a row's prompt) drawn with ``seed``."""
        s = self.s
        return GenerationRequest(messages=prompt_messages(prompt, s.prompt_settings), n=s.group_size,
                                 max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                 stop=list(s.stop), seed=seed, adapter=adapter)

    def to_groups(self, items, results) -> list[Group]:
        return [Group(r["item_id"], self.scored(r, res, r["prompt"])) for r, res in zip(items, results)]

    def scored(self, row: dict, res, prompt, item_id: str | None = None) -> list[Rollout]:
        """The ``group_size`` samples of ``res`` (the backend's result for ``prompt``, a prompt of ``row``), each
        scored by the reward against ``row``; ``item_id`` (default the row's) names them."""
        s = self.s
        if len(res.samples) != s.group_size:
            raise RuntimeError(f"backend returned {len(res.samples)} samples for {row['item_id']!r}, expected "
                               f"algo.group_size={s.group_size} (an empty or short group)")
        p_ids = list(res.prompt_token_ids) or render_prompt(self.tokenizer, prompt, s.prompt_settings)
        samples = []
        for smp in res.samples:
            c_ids, lps = list(smp.token_ids), list(smp.logprobs)
            if not c_ids:  # nothing generated: score the EOS so the sample still has one token
                c_ids, lps = [self.tokenizer.eos_token_id], [float("nan")]  # NaN: no rollout log-prob (IS weight 1)
            value, ok = self.reward(smp.text, row)
            samples.append(Rollout(item_id=item_id or row["item_id"], input_ids=p_ids + c_ids,
                                   completion_mask=[0] * len(p_ids) + [1] * len(c_ids), reward=value,
                                   reward_ok=ok, truncated=smp.finish_reason == "length", completion_len=len(c_ids),
                                   rollout_logps=lps if len(lps) == len(c_ids) else None,
                                   answer_status=judge_status(smp.text, row)))
        return samples

    def state_dict(self) -> dict:
        return self.reward.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.reward.load_state_dict(state)

    def pop_metrics(self) -> dict:
        return {"reward_errors": self.reward.pop_errors(), "reward_errors_total": self.reward.errors_total}


class EnvironmentMode(RolloutMode):
    """``group_size`` episodes of each prompt in the environment ``env_factory()`` makes
    (``trainer.rl.envs.run_episodes``); a sample is the whole conversation, its targets the assistant turns."""

    def __init__(self, settings: RolloutSettings, tokenizer, env_factory: Callable):
        super().__init__(settings, tokenizer)
        self.env_factory = env_factory

    def generate(self, backend, items, seeds, adapter):
        s = self.s
        return run_episodes(backend, self.env_factory, items, group_size=s.group_size,
                            max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                            stop=s.stop, seeds=seeds)

    def to_groups(self, items, episodes) -> list[Group]:
        s = self.s
        groups = []
        for i, item in enumerate(items):
            samples = []
            for ep in episodes[i * s.group_size:(i + 1) * s.group_size]:
                enc = self.tokenizer.apply_chat_template(ep.messages, tokenize=True, return_dict=True,
                                                         return_assistant_tokens_mask=True,
                                                         **dict(s.prompt_settings.chat_template_kwargs))
                ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
                samples.append(Rollout(item_id=item["item_id"], input_ids=ids, completion_mask=mask,
                                       reward=ep.reward, truncated=ep.truncated or ep.hit_length,
                                       completion_len=sum(mask)))
            groups.append(Group(item["item_id"], samples))
        return groups
