"""GRPO's rounds are bounded and stoppable (issue 51, BAD 8): ``algo.oversample_cap=1e300`` was accepted, and after a
step of all zero-variance groups the next round drew ``floor(cap * P)`` prompts, ignoring SIGTERM. The cap and a
round's size are refused at config time in one line (trainer/rl/oversample.py holds the bounds), and a stop signal
while a round draws its prompts or between its generation batches abandons the step at once."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

import dist_helpers as dh
from recipe_utils import compose
from selectrust.generation.prompts import PromptSettings
from tests.box2_fakes import ScriptedBackend
from selectrust.core.errors import ConfigError
from trainer.config import GRPOAlgoConfig, validate_grpo
from trainer.rl.oversample import MAX_OVERSAMPLE_CAP, MAX_ROUND_COMPLETIONS, first_round_size


@pytest.mark.parametrize("override", ["algo.oversample_cap=1e300", f"algo.oversample_cap={MAX_OVERSAMPLE_CAP + 0.5}"])
def test_an_oversample_cap_past_the_bound_is_one_line_exit_2(tmp_path, override):
    env = dh.env()
    env.pop("HYDRA_FULL_ERROR", None)
    p = subprocess.run(dh.command("grpo", ["recipe=grpo_tiny", override, f"trainer.run_dir={tmp_path / 'run'}"]),
                       env=env, cwd=dh.REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert lines[0].startswith("error: ") and f"algo.oversample_cap must be <= {MAX_OVERSAMPLE_CAP:g}" in lines[0]
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run starts (and any model loads)


def test_a_round_over_the_completion_bound_is_refused_naming_its_settings():
    cfg = compose("grpo", ["recipe=grpo_tiny", "algo.prompts_per_step=4096", "algo.group_size=16",
                           "algo.oversample_cap=2"])  # 8192 prompts x 16 = 131072 completions in one round
    with pytest.raises(ConfigError, match=rf"131072 completions .*limit of {MAX_ROUND_COMPLETIONS}") as e:
        validate_grpo(cfg)
    assert "algo.prompts_per_step=4096" in str(e.value) and "\n" not in str(e.value)
    validate_grpo(compose("grpo", ["recipe=grpo_tiny", "algo.prompts_per_step=2048", "algo.group_size=16",
                                   "algo.oversample_cap=2"]))  # exactly the bound: accepted


def test_the_first_round_refuses_a_cap_past_the_bound_at_run_time_too():
    assert first_round_size(8, 1.0, MAX_OVERSAMPLE_CAP) == 8 * MAX_OVERSAMPLE_CAP
    with pytest.raises(ValueError, match="oversample_cap must be >= 1 .* and <= 8"):
        first_round_size(8, 1.0, 1e300)  # was floor(8e300) prompts


# -- a stop signal inside a round ---------------------------------------------------------------------------
ROWS = [{"item_id": f"i{k}", "prompt": f"key k{k}?", "gold": k % 10, "answer_type": "numeric"} for k in range(64)]


class _SignallingSampler:
    """Draws rows in order; sends ``sig`` to this process at draw ``at`` (None: never); counts the draws."""

    def __init__(self, sig, at):
        self.sig, self.at, self.draws, self.epoch = sig, at, 0, 0

    def draw(self, n):
        out = []
        for _ in range(n):
            out.append((self.draws % len(ROWS), 1.0))
            self.draws += 1
            if self.draws - 1 == self.at:
                os.kill(os.getpid(), self.sig)
        return out


class _BatchedBackend(ScriptedBackend):
    """Generates its requests in batches of ``batch_size`` (as the HF backend does); sends ``sig`` during batch
    ``at``; records the batches it finished."""

    def __init__(self, tokenizer, sig, at, batch_size=4):
        super().__init__(tokenizer, lambda request, j, seed: str(j % 2))
        self.sig, self.at, self.batch_size, self.finished = sig, at, batch_size, []

    def generate(self, requests, *, progress=False, desc="generate"):
        out = []
        for k, start in enumerate(range(0, len(requests), self.batch_size)):
            if k == self.at:
                os.kill(os.getpid(), self.sig)
            out.extend(super().generate(requests[start:start + self.batch_size]))
            self.finished.append(k)
        return out


def _source(tokenizer, sampler, backend):
    from trainer.rl.rewards import GuardedReward, resolve_reward
    from trainer.rl.rollout import RolloutSettings, RolloutSource
    from trainer.rl.rollout_modes import SingleTurnMode

    s = RolloutSettings.from_config(GRPOAlgoConfig(group_size=2, prompts_per_step=32, oversample_cap=1.0),
                                    num_groups=32, grad_accum=1, prompt_settings=PromptSettings(), seed=0)
    mode = SingleTurnMode(s, tokenizer, GuardedReward(resolve_reward("numeric_match")))
    return RolloutSource(ROWS, sampler, mode, settings=s, backend_factory=lambda: backend)


def _stopped(src):
    from trainer.runtime import interrupt

    stops = interrupt.StopSignals().install()
    try:
        with pytest.raises(interrupt.StopRequested):
            src.next_microbatch()
        return stops.requested
    finally:
        stops.restore()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_a_round_draws_its_prompts_ends_the_step_at_once(tiny_tokenizer, sig):
    sampler, backend = _SignallingSampler(sig, at=0), _BatchedBackend(tiny_tokenizer, None, None)
    assert _stopped(_source(tiny_tokenizer, sampler, backend))
    assert sampler.draws == 1 and backend.requests == []  # the round's other 31 draws were never made


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_between_generation_batches_of_a_round_ends_the_step_at_once(tiny_tokenizer, sig):
    backend = _BatchedBackend(tiny_tokenizer, sig, at=1)  # 32 prompts: 8 batches of 4; the stop comes in the 2nd
    assert _stopped(_source(tiny_tokenizer, _SignallingSampler(None, None), backend))
    assert backend.finished == [0] and len(backend.requests) <= 8  # batches 3..8 were never generated
