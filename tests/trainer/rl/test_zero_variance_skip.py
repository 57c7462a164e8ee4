"""algo.zero_variance_skip (trainer/rl/zero_variance_skip.py): a prompt whose last group had zero variance is passed
over with the set probability; one with signal, or never drawn, always generates; the decisions are seeded (every
rank and a resumed run take the same) and saved with the batch source."""

import json

import pytest

from selectrust.generation.prompts import PromptSettings
from tests.box2_fakes import ScriptedBackend
from trainer.config import GRPOAlgoConfig
from trainer.data.train_data import ShuffleSampler
from trainer.rl.rewards import GuardedReward, resolve_reward
from trainer.rl.rollout import RolloutSettings, RolloutSource
from trainer.rl.rollout_modes import SingleTurnMode
from trainer.rl.zero_variance_skip import ZeroVarianceMemory, draw_prompts


def test_only_a_prompt_whose_last_group_had_zero_variance_is_skipped():
    mem = ZeroVarianceMemory(1.0, seed=0)
    assert not mem.skip(3, 0, 0)  # never drawn
    mem.record(3, True)
    mem.record(4, False)
    assert mem.skip(3, 0, 0) and not mem.skip(4, 0, 0)
    mem.record(3, False)  # its next group had signal
    assert not mem.skip(3, 1, 0)
    off = ZeroVarianceMemory(0.0, seed=0)
    off.record(3, True)
    assert not off.skip(3, 0, 0)
    with pytest.raises(ValueError, match=r"zero_variance_skip must be in \[0, 1\]"):
        ZeroVarianceMemory(1.5, seed=0)


def test_the_coin_is_seeded_and_its_rate_is_the_probability():
    mem = ZeroVarianceMemory(0.3, seed=7)
    for i in range(2000):
        mem.record(i, True)
    coins = [mem.skip(i, 5, 1) for i in range(2000)]
    assert coins == [mem.skip(i, 5, 1) for i in range(2000)]  # a pure function of (seed, batch, round, prompt)
    assert 0.26 < sum(coins) / 2000 < 0.34
    other = ZeroVarianceMemory(0.3, seed=8)
    other.load_state_dict(json.loads(json.dumps(mem.state_dict())))
    assert other.last == mem.last and [other.skip(i, 5, 1) for i in range(2000)] != coins


class _Sampler:
    def __init__(self, order):
        self.order, self.k = list(order), 0

    def draw(self, n):
        out = [(self.order[(self.k + j) % len(self.order)], 1.0) for j in range(n)]
        self.k += n
        return out


def test_draw_prompts_passes_over_skipped_draws_and_stops_skipping_after_max_skips():
    mem = ZeroVarianceMemory(1.0, seed=0)
    for i in (0, 1, 3):
        mem.record(i, True)
    picks, skipped = draw_prompts(_Sampler(range(6)), mem, 3, rollout_index=0, round_index=0, max_skips=6)
    assert picks == [2, 4, 5] and skipped == 3
    for i in range(6):
        mem.record(i, True)  # every prompt had zero variance: after one epoch of skips, draws are generated
    picks, skipped = draw_prompts(_Sampler(range(6)), mem, 2, rollout_index=0, round_index=0, max_skips=6)
    assert picks == [0, 1] and skipped == 6


ROWS = [{"item_id": f"i{k}", "prompt": f"key k{k}?", "gold": k, "answer_type": "numeric"} for k in range(8)]


def _script(request, j, seed):
    """gold 0-3: every sample right (zero variance); otherwise only sample 0 is right."""
    gold = int(request.messages[-1]["content"][5])
    return str(gold) if (gold < 4 or j == 0) else "x"


def _source(tokenizer, skip: float):
    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=4, zero_variance_skip=skip, oversample_cap=1.0,
                                                   max_refill_rounds=4), num_groups=2, grad_accum=1,
                                    prompt_settings=PromptSettings(), seed=0)
    backend = ScriptedBackend(tokenizer, _script)
    mode = SingleTurnMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    return RolloutSource(ROWS, ShuffleSampler(len(ROWS), seed=0), mode, settings=s, backend_factory=lambda: backend)


def _steps(src, n):
    out = []
    for _ in range(n):
        mb = src.next_microbatch()
        m = {k: v for k, v in src.pop_metrics().items() if not k.startswith("time_") and k != "generation_fraction"}
        out.append((sorted(set(mb["item_ids"])), m))
    return out


def test_the_source_skips_known_zero_variance_prompts_after_the_first_epoch_and_resumes_exactly(tiny_tokenizer):
    plain = _steps(_source(tiny_tokenizer, 0.0), 8)
    src = _source(tiny_tokenizer, 1.0)
    first = _steps(src, 2)
    state = json.loads(json.dumps(src.state_dict()))
    later = _steps(src, 6)
    skipping = first + later
    gen = lambda steps: sum(m["groups_generated"] for _, m in steps)  # noqa: E731
    zv = lambda steps: sum(m["zero_variance_groups"] for _, m in steps)  # noqa: E731
    assert all(m.get("groups_skipped_zero_variance", 0) == 0 for _, m in plain)
    assert sum(m["groups_skipped_zero_variance"] for _, m in skipping) > 0
    # the same trained groups come from fewer generated ones: the zero-variance prompts are not generated again
    assert zv(skipping) < zv(plain) and gen(skipping) < gen(plain)
    assert all(ids and all(int(i[1:]) >= 4 for i in ids) for ids, _ in skipping)  # only groups with signal trained
    assert state["zero_variance_memory"]["last"]  # the outcomes are saved with the source
    resumed = _source(tiny_tokenizer, 1.0)
    resumed.load_state_dict(state)
    assert _steps(resumed, 6) == later


def test_the_config_refuses_a_probability_outside_0_1():
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas, validate_grpo
    from selectrust.core.errors import ConfigError

    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(Path(__file__).resolve().parents[3] / "conf"), version_base=None):
        assert compose(config_name="grpo", overrides=["recipe=grpo_tiny"]).algo.zero_variance_skip == 0.0
        validate_grpo(compose(config_name="grpo", overrides=["recipe=grpo_tiny", "algo.zero_variance_skip=0.5"]))
        with pytest.raises(ConfigError, match=r"algo.zero_variance_skip is a probability in \[0, 1\]"):
            validate_grpo(compose(config_name="grpo", overrides=["recipe=grpo_tiny", "algo.zero_variance_skip=1.5"]))
