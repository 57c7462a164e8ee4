"""A toy Taste-Bench fork task for the CPU proof of privileged-teacher distillation (docs/taste.md#toy-fork-task).

Every fork is a task that failed in some *failure mode* and two candidate next steps, each running one
check. The right direction follows a rule shared by all tasks: failure mode ``m`` needs check
``rule[m]``. ``make_taste_toy(seed)`` draws

- 12 *rule modes* (letters), each with its check (one of four digits): the right candidate runs
  ``rule[m]``, the other a different digit. A model can learn this from labelled forks of other tasks;
- 4 *open modes*: the two checks are random and so is the label (the recorded outcome decided it;
  nothing in the prompt predicts it). A well-calibrated student says 50 % on them.

Tasks are keys of three letters (``qvx``); each has ``forks_per_task`` forks with distinct modes, so
a task-disjoint split (``eval_hooks.folds.split_task_folds``) puts every task's forks in one fold
while both folds share the rule.

Prompts are *compact* (a line of ~35 byte tokens, so the tiny model trains in seconds)::

    student  task qvx, failure c. A=3 B=7
    teacher  task qvx, failure c. A=3 B=7 hint: A=3 not B=7

and a response is a short reasoning line, then the answer line: ``need 3\\nANSWER: A``.

``base_sft_mix`` writes the chat examples that make the random-init model a *demonstration follower
with a position bias* (the starting point of the proof): prompts with a hint are answered with the
hinted check and letter (copied); prompts without one with the check of candidate A and ``A``. All its
modes, checks and task keys are random (nonce), so it teaches no rule: before distillation the student
always answers A (strict accuracy 0), and the teacher (the same weights with the hint) copies the hint.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

TASK_LETTERS = "qrstuvwxyz"
MODE_LETTERS = "abcdefghijklmnop"
CHECKS = "1234"
N_RULE_MODES = 12


def compact_prompt(task: str, first: str, second: str) -> str:
    """The student's (= evaluation) prompt of the compact style."""
    return f"{task}. A={first} B={second}"


def compact_demonstration(right: str, wrong: str, right_letter: str) -> str:
    """What the teacher's compact prompt adds after the student's (one space in between); the letters are
    those of the view (the demonstration names the right candidate as it is presented)."""
    wrong_letter = "B" if right_letter == "A" else "A"
    return f"hint: {right_letter}={right} not {wrong_letter}={wrong}"


def toy_response(check: str, letter: str) -> str:
    return f"need {check}\nANSWER: {letter}"


@dataclass
class TasteToy:
    seed: int
    rule: dict[str, str]      # rule mode -> check digit
    open_modes: list[str]
    items: list[dict]         # taste items (with task_id and the extra field ``mode``)


def _candidate(check: str) -> str:
    return check


def make_taste_toy(seed: int, *, n_tasks: int = 80, forks_per_task: int = 4) -> TasteToy:
    rng = random.Random(f"taste-toy/{seed}")
    modes = list(MODE_LETTERS)
    rng.shuffle(modes)
    rule = {m: rng.choice(CHECKS) for m in modes[:N_RULE_MODES]}
    open_modes = sorted(modes[N_RULE_MODES:])
    keys: set[str] = set()
    while len(keys) < n_tasks:
        keys.add("".join(rng.choice(TASK_LETTERS) for _ in range(3)))
    items = []
    for key in sorted(keys):
        for j, mode in enumerate(rng.sample(modes, forks_per_task)):
            if mode in rule:
                right = rule[mode]
                wrong = rng.choice([c for c in CHECKS if c != right])
            else:
                right, wrong = rng.sample(CHECKS, 2)
            label = rng.choice("AB")
            a, b = (right, wrong) if label == "A" else (wrong, right)
            items.append({"item_id": f"toy-{key}-{j}", "task_id": key, "task": f"task {key}, failure {mode}",
                          "prefix": "", "candidate_a": _candidate(a), "candidate_b": _candidate(b), "label": label,
                          "construction": "parallel" if j % 2 == 0 else "detour", "domain": "engineering",
                          "horizon": None, "mode": mode})
    return TasteToy(seed=seed, rule=rule, open_modes=open_modes, items=items)


def base_sft_mix(seed: int, n: int = 8000, *, hint_fraction: float = 0.7) -> list[dict]:
    """Chat examples (``{"messages": [...]}``) of a demonstration follower with a position bias (module docstring)."""
    rng = random.Random(f"taste-toy-sft/{seed}")
    rows = []
    for _ in range(n):
        key = "".join(rng.choice(TASK_LETTERS) for _ in range(3))
        mode = rng.choice(string.ascii_lowercase[:16])
        a, b = rng.sample(CHECKS, 2)
        task = f"task {key}, failure {mode}"
        prompt = compact_prompt(task, _candidate(a), _candidate(b))
        if rng.random() < hint_fraction:
            letter = rng.choice("AB")
            right, wrong = (a, b) if letter == "A" else (b, a)
            prompt = f"{prompt} {compact_demonstration(_candidate(right), _candidate(wrong), letter)}"
            reply = toy_response(right, letter)
        else:
            reply = toy_response(a, "A")
        rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]})
    return rows
