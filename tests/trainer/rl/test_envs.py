"""Multi-turn environments: the toy env, the episode runner, the env-rollout path, the WebShop template."""

import pytest
import torch

from selectrust.generation.prompts import PromptSettings
from tests.box2_fakes import ScriptedBackend
from selectrust.core.errors import ConfigError
from trainer.config import GRPOAlgoConfig
from trainer.data.train_data import ShuffleSampler
from trainer.rl.envs import ToyLookupEnv, WebShopEnv, episode_seed, resolve_env, run_episodes
from trainer.rl.rollout import RolloutSettings, RolloutSource
from trainer.rl.rollout_modes import EnvironmentMode

ITEM = {"item_id": "a", "prompt": "key abc?", "gold": 7, "answer_type": "numeric"}


def test_toy_env_is_deterministic_and_rewards_the_outcome():
    env = ToyLookupEnv(max_turns=3)
    obs = env.reset(ITEM, seed=0)
    assert obs.startswith("key abc?") and "look" in obs
    r = env.step("let me look")
    assert (r.observation, r.done) == ("notebook: 7", False)
    assert env.step("look again").observation == "notebook: empty"
    assert env.step("hmm").observation == ToyLookupEnv.RULES
    end = env.step("answer 7")
    assert end.done and end.reward == 1.0
    env.reset(ITEM, seed=0)
    assert env.step("answer 3").reward == 0.0
    env.reset(ITEM, seed=0)  # reset clears the notebook state
    assert env.step("look").observation == "notebook: 7"


def test_run_episodes_plays_groups_in_lockstep(tiny_tokenizer):
    calls = []

    def policy(request, j, seed):
        calls.append(seed)
        last = request.messages[-1]["content"]
        return f"answer {last.split(': ')[1]}" if last.startswith("notebook: ") else "look"

    backend = ScriptedBackend(tiny_tokenizer, policy)
    eps = run_episodes(backend, lambda: ToyLookupEnv(max_turns=3), [ITEM], group_size=2, max_new_tokens=16,
                       temperature=1.0, top_p=1.0, stop=[], seeds=[10])
    assert len(eps) == 2 and all(e.reward == 1.0 and e.turns == 2 and not e.truncated for e in eps)
    assert [m["role"] for m in eps[0].messages] == ["user", "assistant", "user", "assistant"]
    # one generate per turn; every episode has its own seed per turn (equal seeds would give equal samples)
    assert calls == [episode_seed(10, 0, 0), episode_seed(10, 1, 0), episode_seed(10, 0, 1), episode_seed(10, 1, 1)]
    assert len(set(calls)) == 4
    stuck = run_episodes(ScriptedBackend(tiny_tokenizer, lambda r, j, s: "hmm"), lambda: ToyLookupEnv(max_turns=2),
                         [ITEM], group_size=1, max_new_tokens=16, temperature=1.0, top_p=1.0, stop=[], seeds=[0])
    assert stuck[0].truncated and stuck[0].reward == 0.0 and stuck[0].turns == 2


def test_env_rollouts_train_on_assistant_turns_only(tiny_tokenizer):
    class EvenSolves(ScriptedBackend):
        """Within each generate call, even-numbered requests (sample 0 of each group) copy the notebook."""

        def generate(self, requests, **kw):
            out = []
            for i, r in enumerate(requests):
                last = r.messages[-1]["content"]
                text = ("answer " + last.split(": ")[1] if i % 2 == 0 else "answer 1") \
                    if last.startswith("notebook: ") else "look"
                self.script = lambda *a, t=text: t
                out.extend(super().generate([r]))
            return out

    rows = [dict(ITEM, item_id=f"i{k}", gold=k + 2) for k in range(3)]
    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=2, max_new_tokens=16), num_groups=2, grad_accum=1,
                                    prompt_settings=PromptSettings(), seed=0)
    src = RolloutSource(rows, ShuffleSampler(3, seed=0), EnvironmentMode(s, tiny_tokenizer, resolve_env("toy_lookup")),
                        settings=s, backend_factory=lambda: EvenSolves(tiny_tokenizer, None))
    mb = src.next_microbatch()
    assert mb["input_ids"].shape[0] == 4
    # rewards per group [1, 0] -> advantages +-0.5/(std 0.7071+1e-4)
    a = 0.5 / (2 ** -0.5 + 1e-4)
    torch.testing.assert_close(mb["advantages"], torch.tensor([a, -a, a, -a]))
    # targets are exactly the assistant turns ("look<|end|>", "answer d<|end|>"): 5 + 9 tokens
    assert mb["completion_mask"].sum(dim=1).tolist() == [14, 14, 14, 14]
    ids, cm = mb["input_ids"][0], mb["completion_mask"][0].bool()
    assert tiny_tokenizer.decode(ids[cm]) .replace("<|end|>", "|") == "look|answer " + mb_gold(rows, mb) + "|"


def mb_gold(rows, mb):
    return str(next(r["gold"] for r in rows if r["item_id"] == mb["item_ids"][0]))


def test_webshop_template_and_unknown_envs_fail_before_training():
    with pytest.raises(NotImplementedError, match="What you must supply"):
        resolve_env("webshop")
    with pytest.raises(NotImplementedError, match="search\\[<query>\\]"):
        WebShopEnv()
    with pytest.raises(ConfigError, match="algo.env='shop' is not a known environment"):
        resolve_env("shop")
    with pytest.raises(ConfigError, match="cannot be loaded"):
        resolve_env("trainer.rl.envs:Nope")
    assert resolve_env("trainer.rl.envs:ToyLookupEnv", max_turns=5)().max_turns == 5


def test_the_environments_max_turns_holds_unless_the_config_sets_one(monkeypatch):
    from recipe_utils import compose
    from trainer.config import validate_grpo

    class Patient(ToyLookupEnv):
        max_turns = 9  # a class-level budget, as an environment package would write it

        def __init__(self):
            super().__init__(max_turns=Patient.max_turns)

    assert GRPOAlgoConfig().env_max_turns is None
    cfg = compose("grpo", ["recipe=grpo_env_tiny"])
    assert cfg.algo.env_max_turns is None  # the recipe leaves it to the environment
    assert resolve_env(cfg.algo.env, max_turns=cfg.algo.env_max_turns)().max_turns == 3  # ToyLookupEnv's own
    cfg = compose("grpo", ["recipe=grpo_env_tiny", "algo.env_max_turns=2"])
    assert resolve_env(cfg.algo.env, max_turns=cfg.algo.env_max_turns)().max_turns == 2
    import trainer.rl.envs as envs

    monkeypatch.setitem(envs.ENVIRONMENTS.registered, "patient", Patient)
    assert resolve_env("patient")().max_turns == 9 and resolve_env("patient", max_turns=4)().max_turns == 4
    with pytest.raises(ConfigError, match="env_max_turns must be >= 1"):
        validate_grpo(compose("grpo", ["recipe=grpo_env_tiny", "algo.env_max_turns=0"]))


def test_a_rollout_mode_is_a_generator_of_groups_with_the_shared_timing(tiny_tokenizer):
    """Both modes are driven the same way (RolloutMode.groups): rows + seeds in, one group of group_size
    scored samples per row out; generation is timed by the one shared helper, and only the single-turn mode
    (which scores after generating) adds time_reward_s."""
    from trainer.rl.rewards import GuardedReward, resolve_reward
    from trainer.rl.rollout_modes import SingleTurnMode

    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=2, max_new_tokens=8), num_groups=1, grad_accum=1,
                                    prompt_settings=PromptSettings(), seed=0)
    rows = [dict(ITEM, item_id="a"), dict(ITEM, item_id="b", gold=3)]
    backend = ScriptedBackend(tiny_tokenizer, lambda r, j, seed: "answer 7")
    single, env = SingleTurnMode(s, tiny_tokenizer, GuardedReward(resolve_reward("numeric_match"))), \
        EnvironmentMode(s, tiny_tokenizer, resolve_env("toy_lookup"))
    for mode, timed in ((single, {"time_generation_s", "time_reward_s"}), (env, {"time_generation_s"})):
        metrics: dict = {}
        groups = mode.groups(backend, rows, [11, 12], adapter=None, metrics=metrics)
        assert [g.item_id for g in groups] == ["a", "b"] and all(len(g.samples) == 2 for g in groups)
        # "answer 7" everywhere: right for a (gold 7), wrong for b (gold 3)
        assert [g.rewards for g in groups] == [[1.0, 1.0], [0.0, 0.0]], type(mode).__name__
        assert set(metrics) == timed and all(v >= 0 for v in metrics.values())
    assert single.pop_metrics() == {"reward_errors": 0, "reward_errors_total": 0} and env.pop_metrics() == {}
