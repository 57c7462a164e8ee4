"""Outcome rewards for group-relative RL: a small registry, import-path callables, and a guard.

A reward function has the signature ``fn(completion: str, row: dict) -> float`` where ``row`` is the
training prompt row (``item_id``, ``prompt``, ``gold``, ``answer_type``, optional ``choices``; for
environment rollouts the episode's return is used instead and no function is called).

Registry (docs/box2.md#rewards: the reward is the task outcome only; nothing rewards agreeing with the workflow):

- ``numeric_match``   1.0 iff the parsed final number equals ``gold`` (``eval_hooks.parsers``), else 0.0
- ``multiple_choice`` 1.0 iff the parsed option letter equals ``gold`` (letters or option text)
- ``boolean``         1.0 iff the parsed yes/no equals ``gold``
- ``answer_match``    dispatch on ``row["answer_type"]`` (any answer type, short_text included), judged as
                      evaluation judges it: the row's candidates and ``gold_aliases`` count

Another package adds one with an entry point in group ``selectrust.rewards`` (:data:`REWARDS`); any other name
must be an import path ``pkg.module:function``. :func:`resolve_reward` checks the
name before anything is generated. :class:`GuardedReward` turns a raising or non-finite reward into
an *error sample* (reward 0.0, counted, logged) and stops the run after ``max_errors`` with a message
that names the function and shows an example input.
"""

from __future__ import annotations

import math
import signal
import threading
from typing import Any, Callable

from eval_hooks.parsers import answer_status, answers_match, parse_answer, parse_row_answer, row_answer_matches
from selectrust.core.plugins import Registry
from trainer.runtime.errors import RewardError  # noqa: F401  (raised here; the loop checkpoints on it)
from selectrust.core.errors import ConfigError
from trainer.rl.callables import callable_registry
from trainer.runtime.interrupt import StopRequested, interruptible

RewardFn = Callable[[str, dict], float]


class RewardTimeout(Exception):
    """A reward call ran past ``algo.reward_timeout_s`` (counted as a reward error)."""


def call_with_timeout(fn: Callable, args: tuple, timeout_s: float):
    """``fn(*args)``, raising :class:`RewardTimeout` after ``timeout_s`` seconds (0 = no limit). In the main
    thread a SIGALRM timer interrupts the call itself; elsewhere it runs in a daemon thread that is
    abandoned on timeout (its result, if any, is discarded)."""
    if timeout_s <= 0:
        return fn(*args)
    message = f"reward call exceeded algo.reward_timeout_s={timeout_s:g}"
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise RewardTimeout(message)

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            box["error"] = e

    worker = threading.Thread(target=target, name="reward-call", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RewardTimeout(message)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _match(answer_type: str) -> RewardFn:
    def reward(completion: str, row: dict) -> float:
        parsed = parse_answer(completion, answer_type, choices=row.get("choices"))
        return 1.0 if answers_match(parsed, row["gold"], answer_type, choices=row.get("choices")) else 0.0

    reward.__name__ = f"{answer_type}_match"
    return reward


def answer_match(completion: str, row: dict) -> float:
    """1.0 iff the final answer parsed by the row's ``answer_type`` is the row's ``gold``, as evaluation judges it
    (``eval_hooks.parsers.parse_row_answer`` and ``row_answer_matches``: the row's own candidates and
    ``gold_aliases``, e.g. a short_text answer found inside a sentence)."""
    return 1.0 if row_answer_matches(parse_row_answer(completion, row), row) else 0.0


def judge_status(completion: str, row: dict) -> str | None:
    """The evaluation judge's reading of ``completion`` for ``row`` (``eval_hooks.parsers.answer_status``, what
    :func:`answer_match` scores by): ``candidate``, ``outside``, ``no_answer``, ``hedged`` or ``multiple``; None for a
    row the judge cannot read (no ``answer_type`` or ``gold``, an unknown answer type)."""
    if not isinstance(row.get("answer_type"), str) or row.get("gold") is None:
        return None
    try:
        return answer_status(parse_row_answer(completion, row), row, completion)
    except Exception:  # noqa: BLE001 - a row the judge cannot read has no status; the reward reports its own errors
        return None


def status_counts(statuses) -> dict[str, float]:
    """GRPO's per-step metrics of the judge's readings (``statuses``: :func:`judge_status` of every rollout
    generated in the step, None for one not judged): ``rollout/multiple``, ``rollout/hedged``, ``rollout/no_answer``
    (rollouts that commit to no answer, by kind: eval_hooks/FORMATS.md) and ``rollout/judged`` (how many were read);
    {} when none was."""
    read = [x for x in statuses if x is not None]
    if not read:
        return {}
    return {**{f"rollout/{k}": float(read.count(k)) for k in ("multiple", "hedged", "no_answer")},
            "rollout/judged": float(len(read))}


numeric_match = _match("numeric")
multiple_choice_match = _match("multiple_choice")
boolean_match = _match("boolean")

ENTRY_POINT_GROUP = "selectrust.rewards"
BUILTIN: dict[str, RewardFn] = {
    "numeric_match": numeric_match,
    "multiple_choice": multiple_choice_match,
    "boolean": boolean_match,
    "answer_match": answer_match,
}


def _accepted() -> str:
    return f"one of {', '.join(sorted(REWARDS))}, or an import path 'pkg.module:function'"


def _unknown(name: str, known: list[str]) -> Exception:
    return ConfigError(f"algo.reward={name!r} is not a registered reward ({_accepted()})")


def _bad_path(name: str, e: Exception | None) -> Exception:
    module_name, _, attr = name.partition(":")
    if isinstance(e, ImportError):
        return ConfigError(f"algo.reward={name!r}: cannot import module {module_name!r} ({e}); accepted: "
                            f"{_accepted()}")
    return ConfigError(f"algo.reward={name!r}: module {module_name!r} has no callable {attr!r}; accepted: "
                        f"{_accepted()}")


#: ``algo.reward`` names: :data:`BUILTIN`, ``REWARDS.register(name, fn)`` in code, an installed package's entry
#: point in group :data:`ENTRY_POINT_GROUP` (``exact = "my_pkg.rewards:exact"``), or an import path
#: ``pkg.module:function``.
REWARDS: Registry[RewardFn] = callable_registry("reward", "reward", ENTRY_POINT_GROUP, BUILTIN, unknown=_unknown,
                                                bad_path=_bad_path)
REGISTRY = REWARDS  # its name before the fourth cut

#: ``resolve_reward(name)``: a registry name or ``pkg.module:function`` -> the callable. Raises a ``ConfigError``
#: naming ``algo.reward`` and what is accepted; imports happen here, before any model loads or any rollout is
#: generated.
resolve_reward = REWARDS.get


def reward_name(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', getattr(fn, '__name__', repr(fn)))}"


class GuardedReward:
    """Calls a reward function so that one bad sample cannot crash (or silently poison) the run.

    ``__call__(completion, row) -> (reward, ok)``: a function that raises, or returns something that is
    not a finite number, scores the sample 0.0 with ``ok=False``; so does a call running past ``timeout_s`` (:class:`RewardTimeout`). Errors are counted (``errors_total``
    across the run, restored on resume; ``pop_errors()`` per logging step). When ``errors_total``
    reaches ``max_errors`` a :class:`RewardError` is raised naming the function, the error and an
    example input (the first failing completion and row gold/answer type).
    """

    def __init__(self, fn: RewardFn, *, name: str | None = None, max_errors: int = 20, timeout_s: float = 30.0):
        self.fn = fn
        self.timeout_s = timeout_s
        self.name = name or reward_name(fn)
        self.max_errors = max_errors
        self.errors_total = 0
        self._errors_since_pop = 0
        self.example: dict[str, Any] | None = None

    def __call__(self, completion: str, row: dict) -> tuple[float, bool]:
        try:
            with interruptible():  # a stop signal here abandons the step (the loop checkpoints the last one)
                value = call_with_timeout(self.fn, (completion, row), self.timeout_s)
            value = float(value)
            problem = None if math.isfinite(value) else f"non-finite reward {value!r}"
        except StopRequested:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of user code is an error sample
            problem = f"{type(e).__name__}: {e}"
        if problem is None:
            return value, True
        self.errors_total += 1
        self._errors_since_pop += 1
        if self.example is None:
            self.example = {"problem": problem, "completion": completion[:300], "item_id": row.get("item_id"),
                            "gold": row.get("gold"), "answer_type": row.get("answer_type")}
        if self.max_errors > 0 and self.errors_total >= self.max_errors:
            raise RewardError(
                f"reward function {self.name} failed {self.errors_total} times (algo.max_reward_errors="
                f"{self.max_errors}); first failure: {self.example['problem']} on input "
                f"completion={self.example['completion']!r}, row item_id={self.example['item_id']!r} "
                f"gold={self.example['gold']!r} answer_type={self.example['answer_type']!r}")
        return 0.0, False

    def pop_errors(self) -> int:
        n, self._errors_since_pop = self._errors_since_pop, 0
        return n

    def state_dict(self) -> dict:
        return {"errors_total": self.errors_total}

    def load_state_dict(self, state: dict) -> None:
        self.errors_total = int(state.get("errors_total", 0))
        self._errors_since_pop = 0
