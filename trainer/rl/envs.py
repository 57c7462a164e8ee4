"""Multi-turn environments for GRPO rollouts: the interface, a deterministic toy, and a WebShop stub.

Interface (text in, text out, reward at the end)::

    env = factory()                          # one instance per episode
    obs = env.reset(item, seed=s)            # the first user turn (str)
    res = env.step(action)                   # action = the assistant's reply (str)
    res.observation, res.done, res.reward    # next user turn; reward is read only when done

An episode is a chat: ``[user: obs_0, assistant: a_1, user: obs_1, ..., assistant: a_n]``. The
policy is trained on every assistant turn (environment turns are masked), and the whole episode
gets the final ``reward`` as its outcome (docs/box2.md#rewards: environment return; never agreement with a
workflow). :func:`run_episodes` drives many episodes in lock-step through any
:class:`~selectrust.generation.backends.base.GenerationBackend`, one batched ``generate`` per turn.

Environments are named in ``algo.env``: ``toy_lookup`` (tests, CPU demo), ``webshop`` (template,
raises until you implement it), another package's entry point in group ``selectrust.environments``
(:data:`ENVIRONMENTS`) or an import path ``pkg.module:Class`` (a zero-argument callable returning an
:class:`Environment`).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Sequence

from selectrust.core.plugins import Registry
from selectrust.core.errors import ConfigError
from trainer.rl.callables import callable_registry
from selectrust.generation.backends.base import derive_seed
from selectrust.generation.backends.base import GenerationRequest


@dataclass
class StepResult:
    observation: str
    done: bool
    reward: float = 0.0  # read only when done


class Environment(ABC):
    """A text environment. Subclasses must be deterministic given ``(item, seed)`` and the actions,
    so that a resumed run that regenerates the same actions sees the same observations."""

    #: maximum assistant turns per episode; the runner stops the episode (reward 0, truncated) after it
    max_turns: int = 4

    @abstractmethod
    def reset(self, item: dict, *, seed: int) -> str:
        """Start an episode for one prompt row; return the first observation (a user turn)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the assistant's reply; return the next observation, whether the episode ended and
        (when it ended) its reward."""


class ToyLookupEnv(Environment):
    """Deterministic two-action toy used in tests: the answer is written in a notebook.

    ``reset(item)`` shows ``item["prompt"]`` plus the rules. Actions: a reply containing ``look``
    (and no number) -> the observation ``notebook: <gold>`` on the first look, ``notebook: empty``
    afterwards; a reply with a number -> the episode ends with reward 1.0 iff the number equals
    ``item["gold"]``; anything else -> a reminder of the rules. Episodes run at most ``max_turns``
    assistant turns.
    """

    RULES = "Reply 'look' to read the notebook, or 'answer <number>' to finish."

    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns
        self.item: dict | None = None
        self.looked = False

    def reset(self, item: dict, *, seed: int) -> str:
        self.item = item
        self.looked = False
        return f"{item['prompt']}\n{self.RULES}"

    def step(self, action: str) -> StepResult:
        assert self.item is not None, "reset() first"
        m = re.search(r"-?\d+", action)
        if m:
            ok = int(m.group()) == int(self.item["gold"])
            return StepResult(observation="", done=True, reward=1.0 if ok else 0.0)
        if "look" in action.lower():
            text = "notebook: empty" if self.looked else f"notebook: {self.item['gold']}"
            self.looked = True
            return StepResult(observation=text, done=False)
        return StepResult(observation=self.RULES, done=False)


class WebShopEnv(Environment):
    """Template for a WebShop-style environment (Yao et al. 2022). It is a stub: it raises until
    you implement it. What you must supply:

    1. ``reset(item, seed)``: ``item`` is one row of ``data.train_path`` (``{item_id, prompt, ...}``;
       put the instruction/goal id you need in extra fields). Start a WebShop session for that goal
       (a local WebShop server or the simulator package) and return the first page as text,
       e.g. ``"Instruction: ...\\n[Search]"``. Seed any randomness of the site with ``seed``.
    2. ``step(action)``: parse the assistant's reply into one WebShop action
       (``search[<query>]`` or ``click[<button>]``; anything else: return the page again with an
       "invalid action" note, ``done=False``), apply it, and return the new page text. When the
       agent clicks ``Buy Now`` return ``done=True`` with ``reward`` = the WebShop score in [0, 1]
       (attribute/option/price match), never a reward for following the workflow.
    3. ``max_turns``: the episode step budget (the paper uses 15).
    4. Determinism: the same (item, seed, actions) must give the same pages, or exact resume breaks.
    Register it with ``algo.env=my_pkg.webshop:MyWebShopEnv`` (a zero-argument callable).
    """

    max_turns = 15
    MESSAGE = __doc__

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("WebShopEnv is a template; implement it as described:\n" + self.MESSAGE)

    def reset(self, item: dict, *, seed: int) -> str:  # pragma: no cover - template
        raise NotImplementedError(self.MESSAGE)

    def step(self, action: str) -> StepResult:  # pragma: no cover - template
        raise NotImplementedError(self.MESSAGE)


ENTRY_POINT_GROUP = "selectrust.environments"
BUILTIN: dict[str, Callable[[], Environment]] = {"toy_lookup": ToyLookupEnv, "webshop": WebShopEnv}


def _accepted() -> str:
    return f"one of {', '.join(sorted(ENVIRONMENTS))}, or an import path 'pkg.module:Class'"


def _unknown(name: str, known: list[str]) -> Exception:
    return ConfigError(f"algo.env={name!r} is not a known environment ({_accepted()})")


def _bad_path(name: str, e: Exception | None) -> Exception:
    why = e if e is not None else "not a zero-argument callable"
    return ConfigError(f"algo.env={name!r} cannot be loaded ({why}); accepted: {_accepted()}")


#: ``algo.env`` names: :data:`BUILTIN`, ``ENVIRONMENTS.register(name, cls)`` in code, an installed package's entry
#: point in group :data:`ENTRY_POINT_GROUP` (``maze = "my_pkg.maze:MazeEnv"``), or an import path
#: ``pkg.module:Class``; each a zero-argument callable returning an :class:`Environment`.
ENVIRONMENTS: Registry[Callable[[], Environment]] = callable_registry(
    "environment", "env", ENTRY_POINT_GROUP, BUILTIN, unknown=_unknown, bad_path=_bad_path)


def resolve_env(name: str, *, max_turns: int | None = None) -> Callable[[], Environment]:
    """``algo.env`` -> a zero-argument factory. Checked (and, for the template, instantiated once so
    that its NotImplementedError surfaces) before any model loads. ``max_turns`` (``algo.env_max_turns``)
    replaces the environment's own ``max_turns``; None keeps it."""
    cls = ENVIRONMENTS.get(name)

    def factory() -> Environment:
        env = cls()
        if max_turns is not None:
            env.max_turns = max_turns
        return env

    factory()  # fail now (e.g. the WebShop template), not after the model has loaded
    return factory


@dataclass
class Episode:
    item: dict
    messages: list[dict] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    truncated: bool = False  # ran out of turns (or a reply hit max_new_tokens on the last turn)
    turns: int = 0
    hit_length: bool = False  # some assistant turn stopped at max_new_tokens


def episode_seed(item_seed: int, episode: int, turn: int) -> int:
    """Request seed of one episode's turn: a stable hash of (the item's seed, episode index, turn)."""
    return derive_seed("episode", item_seed, episode, turn)


def run_episodes(backend, factory: Callable[[], Environment], items: Sequence[dict], *, group_size: int,
                 max_new_tokens: int, temperature: float, top_p: float, stop: Sequence[str],
                 seeds: Sequence[int]) -> list[Episode]:
    """Play ``group_size`` episodes per item (item-major: the episodes of item i are contiguous).

    Every turn sends one request per live episode in a single ``backend.generate`` call; episode ``k``
    of item ``i`` is seeded with ``episode_seed(seeds[i], k, turn)`` (every episode its own stream, as
    backends give equal samples to equal prompts with equal seeds) and its environment is reset with
    ``seeds[i]``. So an item's episodes are a function of (weights, item, its seed) alone, whatever
    other items share the call.
    """
    if len(seeds) != len(items):
        raise ValueError(f"run_episodes: {len(seeds)} seeds for {len(items)} items (one per item)")
    episodes, envs, keys = [], [], []
    for item, item_seed in zip(items, seeds):
        for k in range(group_size):
            env = factory()
            obs = env.reset(item, seed=item_seed)
            episodes.append(Episode(item=item, messages=[{"role": "user", "content": obs}]))
            envs.append(env)
            keys.append((item_seed, k))
    turn = 0
    while True:
        live = [i for i, e in enumerate(episodes) if not e.done]
        if not live:
            break
        reqs = [GenerationRequest(messages=list(episodes[i].messages), n=1, max_new_tokens=max_new_tokens,
                                  temperature=temperature, top_p=top_p, stop=list(stop),
                                  seed=episode_seed(*keys[i], turn))
                for i in live]
        results = backend.generate(reqs)
        for i, res in zip(live, results):
            ep, env = episodes[i], envs[i]
            sample = res.samples[0]
            ep.messages.append({"role": "assistant", "content": sample.text})
            ep.turns += 1
            ep.hit_length |= sample.finish_reason == "length"
            out = env.step(sample.text)
            if out.done:
                ep.done, ep.reward = True, float(out.reward)
            elif ep.turns >= env.max_turns:
                ep.done, ep.truncated, ep.reward = True, True, 0.0
            else:
                ep.messages.append({"role": "user", "content": out.observation})
        turn += 1
    return episodes
