"""The synthetic ``toy`` task: a key -> digit task for the embedded CPU demo, and its data source.

A tiny byte-level Llama learns it in about a minute of one CPU core, and it has every ingredient of
the selective-trust problem: the model *knows* the answers for some keys, a hint in the prompt can be
right or wrong, and only the model's own knowledge can tell which, because right and wrong hints are
written in exactly one format (only the digit differs).

Task
----
``make_toy_task(seed)`` shuffles the alphabet into 20 *rule letters* and 6 *reserved letters* and
draws a digit for every rule letter (the rule). It then draws ``n_keys`` distinct keys (``key_len``
lowercase letters, e.g. ``kqz``; no digits, so a key never looks like an answer; every character is
one token of the byte tokenizer), each with a gold digit and a different wrong digit (the value used
by every misleading hint, Box2 bad step and rejected response of that key). The keys are split into

- ``train``:   start with a rule letter, gold = ``rule[first letter]``; taught by SFT; the base's
  outputs on them are mined for DPO pairs and the Box2 counterfactual SFT / GRPO data are built on them;
- ``heldout``: start with a rule letter, gold = ``rule[first letter]``; taught by SFT, never used by
  any later training stage; evaluation of SCOPE and Box2;
- ``unseen``:  start with a reserved letter, random gold; never appear in any training file; only a
  hint can answer them, so the ``correct`` condition on them measures context use;
- ``untaught``: the never-learned *training* keys of knowledge-aware SCOPE: like ``unseen`` (a reserved
  first letter, random gold, never in the SFT mix, so the base does not know them) but disjoint from it;
  only ``mist_train_knowledge.jsonl`` (train + untaught) holds them, so the unknown pools can be mined
  while no evaluated unseen key is ever trained on.

Why a rule and not one digit memorised per key: the experiments behind that choice are in
docs/demo.md#why-a-rule-not-a-digit-per-key.

Prompts (the user message; the completion is the digit alone, then EOS)::

    clean       key kqz?
    misleading  note: kqz=7. key kqz?       (wrong digit)
    correct     note: kqz=4. key kqz?       (gold digit, the same format)
    irrelevant  note: owls hoot. key kqz?   (a filler sentence from a small pool, no digits)

SFT mix (``write_sft_mix``)
---------------------------
Chat examples ``{"messages": [{"role": "user", ...}, {"role": "assistant", "content": "4"}]}``
where every hint and every workflow is right. Parts (fractions are keyword arguments):

- clean and filler prompts over ``train`` + ``heldout`` keys: the rule;
- correct hints over known keys: hints agree with the rule;
- correct hints over *nonce* keys: fresh random keys (never any task key) with a random digit each
  time, so the only way to get them right is to copy the hint. This is what makes the base a hint
  follower. We use nonce keys rather than the ``unseen`` keys so that ``unseen`` stays truly unseen
  (a hinted example also teaches its key's digit) and clean accuracy on it stays at chance;
- good Box2 workflows (all 3 steps or a prefix of 1-2) over known and nonce keys, so that the base
  also follows workflows and the Box2 stage has a bad-workflow effect to remove (a Box2 example
  without a hint renders as the clean prompt itself).

``cross_fraction`` (default 0.3): right hints about a *different* known key, so the model checks
which key a hint is about and keeps its knowledge in use when a hint is present.

Box2 toy workflows (``write_box2_items``)
-----------------------------------------
``task`` = the clean prompt; ``good_steps`` = ``["kqz is 4", "check 4", "answer 4"]``; the bad workflow states the wrong digit in the same words; change points
k in {0, 1, 2}: ``bad_continuations[k]`` = the bad steps k+1..3, so ``mixed_k`` = k good steps then
the wrong digit. Items set ``prompt_style: "plain"``, so the Box2 loader renders a prompt as the task
then one step per line (``key kqz?\nkqz is 7\ncheck 7\nanswer 7``; condition none is exactly the
clean MIST prompt); :func:`render_box2_prompt` calls that same renderer, so the SFT mix, the
counterfactual SFT data, the GRPO prompts and the evaluation rows are rendered identically.

Deviation from Box2's no-leakage rule: in Box2 a workflow is a plan and must not state the answer.
The toy task has no inner trajectory besides the lookup itself, so a good step that does not state
the digit ("recall kqz") carries no information: S_G would equal S_0 by construction and a
bad workflow that does not state a digit could not mislead. Toy good workflows therefore state the
gold, and bad ones state a wrong digit; what we do keep is that a bad step never contains the gold
digit, so only a good prefix (partial_k, mixed_k with k >= 1) can leak it.

Pair file format (``write_toy_pairs``; the pair-mining recipe writes the same format)
-------------------------------------------------------------------------------------
One JSON object per line::

    {"pair_id": "toy-kqz", "item_id": "toy-kqz", "condition": "misleading",
     "prompt": "note: kqz=7. key kqz?", "chosen": "4", "rejected": "7", "source": "synthetic"}

- ``pair_id`` names one (chosen, rejected) pair; SCOPE places it under all four conditions, so the
  4 lines of a quartet share ``pair_id``, ``item_id``, ``chosen`` and ``rejected`` and differ in
  ``condition`` (clean|misleading|correct|irrelevant) and ``prompt``. ``(pair_id, condition)`` is
  unique in a file. A misleading-only (Standard-DPO) file keeps just the ``misleading`` lines.
- ``prompt`` is the user message (the recipe applies the chat template); ``chosen`` / ``rejected``
  are assistant completions without EOS.
- ``source``: ``synthetic`` here (chosen = gold, rejected = the misleading wrong digit; nothing is
  mined); the mining recipe writes ``mined`` (and may add fields such as ``chosen_origin``).

Data source ``toy:<seed>/<file>``
----------------------------------
:func:`resolve_source` is the resolver of the ``toy`` data source (:mod:`selectrust.core.data_sources`; declared
in ``pyproject.toml``'s entry-point group ``selectrust.data_sources``): ``toy:0/mist_heldout.jsonl`` in
any config is the file of :data:`OUTPUT_FILES` for seed 0, written once by :func:`write_all` into
``cache_root()/toy/v<FORMAT_VERSION>/seed_<seed>`` (``selectrust.model.cache_root``).

CLI: ``python -m demos.toy.task --out DIR --seed S`` writes every file of
:data:`OUTPUT_FILES` plus ``task.json``. Same seed -> byte-identical files.

This module imports only ``eval_hooks`` and the standard library (tests/repo/test_import_rules.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from selectrust.core.io import DataError, write_jsonl_atomic, write_text_atomic
from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING, MIST_CONDITIONS as CONDITIONS
from selectrust.model import cache_root

#: The data-source scheme: ``toy:<seed>/<file>`` (:func:`resolve_source`).
SCHEME = "toy"
SPLITS = ("train", "heldout", "unseen", "untaught")
CHANNEL = "note"
SOURCE = "toy"
BOX2_CHANGE_POINTS = (0, 1, 2)
# The Box2 loader's compact rendering (task, then one step per line). Its full template (~110 extra
# characters of instructions) made the tiny model ~3x slower per step and left condition none at
# chance after 75 CPU-seconds of SFT; with ``plain``, none is the clean MIST prompt itself.
BOX2_PROMPT_STYLE = "plain"

# Irrelevant context: short, no digits, no '=' (nothing that looks like an answer), no key.
FILLERS = (
    "owls hoot", "sky is blue", "tea is hot", "rain is wet", "cats nap", "snow is cold",
    "fish swim", "bees buzz", "moss is soft", "wind blows", "ice melts", "frogs leap",
)

# Bump when a default or a format changes, so that cached copies (keyed by seed) are rebuilt.
FORMAT_VERSION = 7
# First letters kept out of the rule: the unseen keys start with them.
RESERVED_LETTERS = 6
# One epoch at batch 64 is ~750 steps: enough for the 126k-parameter tiny model to learn the mix.
DEFAULT_N_SFT = 48000

OUTPUT_FILES = {
    "sft_mix": "sft_mix.jsonl",
    "mist_train": "mist_train.jsonl",
    "mist_heldout": "mist_heldout.jsonl",
    "mist_unseen": "mist_unseen.jsonl",
    "mist_untaught": "mist_untaught.jsonl",
    "mist_train_knowledge": "mist_train_knowledge.jsonl",
    "box2_heldout": "box2_heldout.jsonl",
    "box2_sft": "box2_sft.jsonl",
    "grpo_prompts": "grpo_prompts.jsonl",
    "toy_pairs": "toy_pairs.jsonl",
}


# -- the task -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToyTask:
    """A drawn toy task. ``gold[key]`` / ``wrong[key]``: digits (ints, never equal);
    ``splits[name]``: the keys of split ``train|heldout|unseen|untaught`` (disjoint, in draw order);
    ``rule[letter]``: the gold digit of every train/heldout key starting with ``letter``."""

    seed: int
    key_len: int
    gold: dict[str, int]
    wrong: dict[str, int]
    splits: dict[str, tuple[str, ...]]
    rule: dict[str, int]                 # first letter -> digit, for train and heldout keys
    reserved_letters: tuple[str, ...]    # first letters of the unseen and untaught keys (not in ``rule``)

    def keys(self, split: str) -> tuple[str, ...]:
        if split not in self.splits:
            raise ValueError(f"unknown toy split {split!r}; accepted: {', '.join(SPLITS)}")
        return self.splits[split]

    @property
    def known_keys(self) -> tuple[str, ...]:
        """Keys the SFT mix teaches (train + heldout)."""
        return self.splits["train"] + self.splits["heldout"]

    def to_json(self) -> dict:
        return {
            "family": "toy",
            "format_version": FORMAT_VERSION,
            "seed": self.seed,
            "key_len": self.key_len,
            "counts": {s: len(self.splits[s]) for s in SPLITS},
            "splits": {s: list(self.splits[s]) for s in SPLITS},
            "gold": {k: self.gold[k] for s in SPLITS for k in self.splits[s]},
            "wrong": {k: self.wrong[k] for s in SPLITS for k in self.splits[s]},
            "rule": dict(sorted(self.rule.items())),
            "reserved_letters": list(self.reserved_letters),
            "templates": {c: _template_example(c) for c in CONDITIONS},
            "fillers": list(FILLERS),
        }


def _rng(seed: int, *parts: object) -> random.Random:
    """An RNG that depends only on (seed, parts): stable across processes (no ``hash()``)."""
    blob = json.dumps([seed, *[str(p) for p in parts]]).encode()
    return random.Random(int.from_bytes(hashlib.sha256(blob).digest()[:8], "big"))


def _random_key(rng: random.Random, key_len: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(key_len))


def make_toy_task(seed: int, *, n_keys: int = 400, n_heldout: int = 100, n_unseen: int = 100,
                  key_len: int = 3, n_reserved_letters: int = RESERVED_LETTERS, n_untaught: int = 100) -> ToyTask:
    """Draw the letter rule, ``n_keys`` distinct keys and their gold and wrong digits.

    The alphabet is shuffled; its first ``n_reserved_letters`` letters start the ``unseen`` keys (each
    with a random gold digit: nothing in training determines it), the other letters start the
    ``train`` (n_keys - n_heldout - n_unseen) and ``heldout`` keys, whose gold digit is
    ``rule[first letter]``. Train keys cycle through every rule letter before repeating one (so does
    heldout), hence every held-out key's rule letter is taught by some train key. The ``n_untaught``
    keys (reserved letters, random gold, not counted in ``n_keys``) are drawn last, so the other splits
    do not depend on ``n_untaught``."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if key_len < 2:
        raise ValueError(f"key_len must be >= 2, got {key_len}")
    if not 1 <= n_reserved_letters <= 25:
        raise ValueError(f"n_reserved_letters must be in [1, 25], got {n_reserved_letters}")
    n_train = n_keys - n_heldout - n_unseen
    n_rule = 26 - n_reserved_letters
    if min(n_heldout, n_unseen) < 1 or n_train < n_rule:
        raise ValueError(f"need n_heldout >= 1, n_unseen >= 1 and n_keys - n_heldout - n_unseen >= {n_rule} (one "
                         f"train key per rule letter); got n_keys={n_keys}, n_heldout={n_heldout}, n_unseen={n_unseen}")
    # Leave most of the key space free for the nonce keys of the SFT mix.
    tail = 26 ** (key_len - 1)
    if n_untaught < 0:
        raise ValueError(f"n_untaught must be >= 0, got {n_untaught}")
    if (n_train + n_heldout) * 4 > n_rule * tail or (n_unseen + n_untaught) * 4 > n_reserved_letters * tail:
        raise ValueError(f"too many keys for key_len={key_len}: at most {n_rule * tail // 4} train + heldout and "
                         f"{n_reserved_letters * tail // 4} unseen + untaught")
    rng = _rng(seed, "keys")
    letters = list(string.ascii_lowercase)
    rng.shuffle(letters)
    reserved, rule_letters = letters[:n_reserved_letters], letters[n_reserved_letters:]
    rule = {letter: rng.randrange(10) for letter in rule_letters}
    seen: set[str] = set()

    def draw(n: int, firsts: list[str], cycle: bool) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            first = firsts[len(out) % len(firsts)] if cycle else rng.choice(firsts)
            k = first + _random_key(rng, key_len - 1)
            if k not in seen:
                seen.add(k)
                out.append(k)
        return out

    train, heldout = draw(n_train, rule_letters, True), draw(n_heldout, rule_letters, True)
    unseen = draw(n_unseen, reserved, False)
    gold, wrong = {}, {}
    for k in train + heldout + unseen:
        g = rule[k[0]] if k[0] in rule else rng.randrange(10)
        gold[k] = g
        wrong[k] = rng.choice([d for d in range(10) if d != g])
    untaught = draw(n_untaught, reserved, False)  # after every other draw: the other splits stay as they were
    for k in untaught:
        gold[k] = rng.randrange(10)
        wrong[k] = rng.choice([d for d in range(10) if d != gold[k]])
    splits = {"train": tuple(train), "heldout": tuple(heldout), "unseen": tuple(unseen), "untaught": tuple(untaught)}
    return ToyTask(seed=seed, key_len=key_len, gold=gold, wrong=wrong, splits=splits, rule=rule,
                   reserved_letters=tuple(reserved))


# -- prompts ------------------------------------------------------------------------------------

def clean_prompt(key: str) -> str:
    return f"key {key}?"


def hint_prompt(key: str, digit: int) -> str:
    """The one hint format, for right and wrong hints alike."""
    return f"{CHANNEL}: {key}={digit}. {clean_prompt(key)}"


def filler_prompt(key: str, filler: str) -> str:
    return f"{CHANNEL}: {filler}. {clean_prompt(key)}"


def _filler_for(task: ToyTask, key: str) -> str:
    return _rng(task.seed, "filler", key).choice(FILLERS)


def mist_prompt(task: ToyTask, key: str, condition: str) -> str:
    if condition == CLEAN:
        return clean_prompt(key)
    if condition == MISLEADING:
        return hint_prompt(key, task.wrong[key])
    if condition == CORRECT:
        return hint_prompt(key, task.gold[key])
    if condition == IRRELEVANT:
        return filler_prompt(key, _filler_for(task, key))
    raise ValueError(f"unknown MIST condition {condition!r}; accepted: {', '.join(CONDITIONS)}")


def _template_example(condition: str) -> str:
    key = "kqz"
    return {CLEAN: clean_prompt(key), MISLEADING: hint_prompt(key, 7),
            CORRECT: hint_prompt(key, 4), IRRELEVANT: filler_prompt(key, FILLERS[0])}[condition]


def good_steps(key: str, digit: int) -> list[str]:
    return [f"{key} is {digit}", f"check {digit}", f"answer {digit}"]


def bad_steps(key: str, wrong_digit: int) -> list[str]:
    """The bad workflow: the good one's words with the wrong digit (never the gold)."""
    return good_steps(key, wrong_digit)


def render_box2_prompt(task: str, steps: Sequence[str]) -> str:
    """The user message of a toy Box2 prompt (``steps`` empty: condition none).

    This is the Box2 family loader's own renderer (``eval_hooks.families.box2``) in the ``plain`` style
    that every toy item asks for, so the SFT mix, the counterfactual SFT data, the GRPO prompts and the
    evaluation rows are rendered identically."""
    from eval_hooks.families.box2 import render_box2_prompt as loader_render  # deferred: imports numpy

    return loader_render(task, list(steps) or None, "numeric", style=BOX2_PROMPT_STYLE)


# -- writers ------------------------------------------------------------------------------------

def _chat(prompt: str, answer: int) -> dict:
    return {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": str(answer)}]}


def write_sft_mix(task: ToyTask, path: str | os.PathLike, *, n_examples: int = DEFAULT_N_SFT,
                  hint_fraction: float = 0.3, copy_fraction: float = 0.5,
                  workflow_fraction: float = 0.15, filler_fraction: float = 0.3,
                  cross_fraction: float = 0.3) -> Path:
    """The SFT mix where every hint is right (see the module docstring). Per example, independently:

    - format: with probability ``workflow_fraction`` the Box2 rendering (:func:`render_box2_prompt`),
      otherwise the MIST prompts;
    - with probability ``hint_fraction`` the context states the answer (MIST: a right hint; Box2: a
      random prefix of 1-3 good steps); such an example is about a nonce key with a random digit with
      probability ``copy_fraction`` (copying is the only way to answer), else about a known key;
    - otherwise a known key with no answer-bearing context: the clean prompt, or with probability
      ``filler_fraction`` its filler prompt, or with probability ``cross_fraction`` a right hint about
      a *different* known key (MIST format; Box2 format: condition none). Cross-key hints make the
      model check which key a hint is about, so its memory stays active when a hint is present.
    Known keys are drawn uniformly from train + heldout; unseen keys never occur.
    """
    for name, v in (("hint_fraction", hint_fraction), ("copy_fraction", copy_fraction),
                    ("workflow_fraction", workflow_fraction), ("filler_fraction", filler_fraction),
                    ("cross_fraction", cross_fraction)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {v}")
    if filler_fraction + cross_fraction > 1.0:
        raise ValueError(f"filler_fraction + cross_fraction must be <= 1, got {filler_fraction + cross_fraction}")
    if n_examples < 1:
        raise ValueError(f"n_examples must be >= 1, got {n_examples}")
    rng = _rng(task.seed, "sft", n_examples, hint_fraction, copy_fraction, workflow_fraction, filler_fraction,
               cross_fraction)
    known = task.known_keys
    taken = set(task.gold)

    def nonce() -> str:
        while True:
            k = _random_key(rng, task.key_len)
            if k not in taken:
                return k

    def gen():
        for _ in range(n_examples):
            box2 = rng.random() < workflow_fraction
            if rng.random() < hint_fraction:
                if rng.random() < copy_fraction:
                    key, digit = nonce(), rng.randrange(10)
                else:
                    key = rng.choice(known)
                    digit = task.gold[key]
                if box2:
                    steps = good_steps(key, digit)[:rng.randint(1, len(good_steps(key, digit)))]
                    yield _chat(render_box2_prompt(clean_prompt(key), steps), digit)
                else:
                    yield _chat(hint_prompt(key, digit), digit)
            else:
                key = rng.choice(known)
                if box2:
                    yield _chat(render_box2_prompt(clean_prompt(key), []), task.gold[key])
                    continue
                u = rng.random()
                if u < filler_fraction:
                    yield _chat(filler_prompt(key, rng.choice(FILLERS)), task.gold[key])
                elif u < filler_fraction + cross_fraction:
                    other = rng.choice(known)
                    while other == key:
                        other = rng.choice(known)
                    yield _chat(f"{CHANNEL}: {other}={task.gold[other]}. {clean_prompt(key)}", task.gold[key])
                else:
                    yield _chat(clean_prompt(key), task.gold[key])

    return write_jsonl_atomic(path, gen())


def mist_item_id(key: str) -> str:
    return f"toy-{key}"


def box2_item_id(key: str) -> str:
    return f"toywf-{key}"


def mist_rows(task: ToyTask, split: str) -> list[dict]:
    rows = []
    for key in task.keys(split):
        for cond in CONDITIONS:
            rows.append({
                "item_id": mist_item_id(key),
                "condition": cond,
                "prompt": mist_prompt(task, key, cond),
                "answer_type": "numeric",
                "gold": task.gold[key],
                "wrong_value": task.wrong[key],
                "source": SOURCE,
                "source_id": key,
                "channel": CHANNEL if cond in (MISLEADING, CORRECT) else ("filler" if cond == IRRELEVANT else "none"),
                "split": split,
            })
    return rows


def write_mist_items(task: ToyTask, path: str | os.PathLike, *, split: str = "heldout") -> Path:
    """MIST rows (4 per key of ``split``): ``item_id, condition, prompt, answer_type="numeric", gold,
    wrong_value, source, source_id, channel, split``."""
    return write_jsonl_atomic(path, mist_rows(task, split))


def box2_items(task: ToyTask, split: str) -> list[dict]:
    items = []
    for key in task.keys(split):
        bad = bad_steps(key, task.wrong[key])
        items.append({
            "item_id": box2_item_id(key),
            "task": clean_prompt(key),
            "answer_type": "numeric",
            "gold": task.gold[key],
            "good_steps": good_steps(key, task.gold[key]),
            "bad_continuations": {str(k): bad[k:] for k in BOX2_CHANGE_POINTS},
            "prompt_style": BOX2_PROMPT_STYLE,
            "wrong_value": task.wrong[key],
            "source": SOURCE,
            "source_id": key,
            "split": split,
        })
    return items


def write_box2_items(task: ToyTask, path: str | os.PathLike, *, split: str = "heldout") -> Path:
    """Box2 items (one per key of ``split``): ``item_id, task, answer_type, gold, good_steps,
    bad_continuations`` (k -> steps after the first k good ones), plus ``wrong_value, source,
    source_id, split``."""
    return write_jsonl_atomic(path, box2_items(task, split))


def write_box2_sft(task: ToyTask, path: str | os.PathLike, *, split: str = "train") -> Path:
    """Counterfactual SFT (Box2 §Training 1): prompt = task + bad workflow, target = the gold digit."""
    def gen():
        for key in task.keys(split):
            bad = bad_steps(key, task.wrong[key])
            yield _chat(render_box2_prompt(clean_prompt(key), bad), task.gold[key])
    return write_jsonl_atomic(path, gen())


def write_grpo_prompts(task: ToyTask, path: str | os.PathLike, *, split: str = "train") -> Path:
    """RL prompts with the bad workflow: ``{item_id, prompt, gold, answer_type}`` per key."""
    def gen():
        for key in task.keys(split):
            yield {
                "item_id": box2_item_id(key),
                "prompt": render_box2_prompt(clean_prompt(key), bad_steps(key, task.wrong[key])),
                "gold": task.gold[key],
                "answer_type": "numeric",
            }
    return write_jsonl_atomic(path, gen())


def toy_pairs(task: ToyTask, split: str = "train") -> list[dict]:
    rows = []
    for key in task.keys(split):
        item_id = mist_item_id(key)
        for cond in CONDITIONS:
            rows.append({
                "pair_id": item_id,
                "item_id": item_id,
                "condition": cond,
                "prompt": mist_prompt(task, key, cond),
                "chosen": str(task.gold[key]),
                "rejected": str(task.wrong[key]),
                "source": "synthetic",
            })
    return rows


def write_toy_pairs(task: ToyTask, path: str | os.PathLike, *, split: str = "train") -> Path:
    """Ready-made SCOPE quartets (chosen = gold, rejected = the misleading wrong digit), in the pair
    file format of the module docstring."""
    return write_jsonl_atomic(path, toy_pairs(task, split))


def write_all(out_dir: str | os.PathLike, *, seed: int, n_sft: int = DEFAULT_N_SFT, **task_kwargs) -> dict[str, Path]:
    """Every file of :data:`OUTPUT_FILES` plus ``task.json`` into ``out_dir``; returns name -> path.

    Each file is written atomically and ``task.json`` last, so its presence marks a complete set."""
    out = Path(out_dir)
    task = make_toy_task(seed, **task_kwargs)
    paths = {
        "sft_mix": write_sft_mix(task, out / OUTPUT_FILES["sft_mix"], n_examples=n_sft),
        "mist_train": write_mist_items(task, out / OUTPUT_FILES["mist_train"], split="train"),
        "mist_heldout": write_mist_items(task, out / OUTPUT_FILES["mist_heldout"], split="heldout"),
        "mist_unseen": write_mist_items(task, out / OUTPUT_FILES["mist_unseen"], split="unseen"),
        "mist_untaught": write_mist_items(task, out / OUTPUT_FILES["mist_untaught"], split="untaught"),
        "mist_train_knowledge": write_jsonl_atomic(out / OUTPUT_FILES["mist_train_knowledge"],
                                                   mist_rows(task, "train") + mist_rows(task, "untaught")),
        "box2_heldout": write_box2_items(task, out / OUTPUT_FILES["box2_heldout"], split="heldout"),
        "box2_sft": write_box2_sft(task, out / OUTPUT_FILES["box2_sft"], split="train"),
        "grpo_prompts": write_grpo_prompts(task, out / OUTPUT_FILES["grpo_prompts"], split="train"),
        "toy_pairs": write_toy_pairs(task, out / OUTPUT_FILES["toy_pairs"], split="train"),
    }
    meta = task.to_json()
    meta["files"] = dict(OUTPUT_FILES)
    meta["n_sft"] = n_sft
    task_path = out / "task.json"
    write_text_atomic(task_path, json.dumps(meta, indent=1, ensure_ascii=True) + "\n")
    paths["task"] = task_path
    return paths


def cache_dir(seed: int) -> Path:
    """Where :func:`resolve_source` keeps the files of ``seed`` (a format change regenerates them)."""
    return cache_root() / "toy" / f"v{FORMAT_VERSION}" / f"seed_{int(seed)}"


def resolve_source(spec: str) -> str:
    """The ``toy`` data source: ``spec`` = ``<seed>/<file>`` (the path ``toy:<seed>/<file>`` without its
    scheme) -> that file of the toy task, written by :func:`write_all` into :func:`cache_dir` on first use."""
    path = f"{SCHEME}:{spec}"
    seed_str, _, name = spec.partition("/")
    if not seed_str.lstrip("-").isdigit() or not name:
        raise DataError(f"data source {path!r} must look like {SCHEME}:<seed>/<file>, e.g. {SCHEME}:0/toy_pairs.jsonl")
    out = cache_dir(int(seed_str))
    if not (out / "task.json").exists():
        write_all(out, seed=int(seed_str))
    target = out / name
    if not target.exists():
        raise DataError(f"data source {path!r}: the toy task has no file {name!r}; "
                        f"have {sorted(p.name for p in out.iterdir())}")
    return str(target)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demos.toy.task",
                                 description="Write the synthetic toy task files (deterministic from --seed).")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0, help="task seed (default 0)")
    ap.add_argument("--n-keys", type=int, default=400, help="keys in all splits (default 400)")
    ap.add_argument("--n-heldout", type=int, default=100, help="SFT-known keys held out for evaluation")
    ap.add_argument("--n-unseen", type=int, default=100, help="keys never seen in SFT")
    ap.add_argument("--n-untaught", type=int, default=100, help="never-learned training keys (knowledge-aware SCOPE)")
    ap.add_argument("--n-sft", type=int, default=DEFAULT_N_SFT, help=f"examples in sft_mix.jsonl (default {DEFAULT_N_SFT})")
    args = ap.parse_args(argv)
    try:
        paths = write_all(args.out, seed=args.seed, n_sft=args.n_sft, n_keys=args.n_keys,
                          n_heldout=args.n_heldout, n_unseen=args.n_unseen, n_untaught=args.n_untaught)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, p in paths.items():
        print(f"{name}: {p}")
    return 0


if __name__ == "__main__":  # the contract of every entry point (eval_hooks/cli_contract.py)
    from eval_hooks.cli_contract import end_process, run_with_contract, split_debug

    _debug, _argv = split_debug(sys.argv[1:])
    end_process(run_with_contract(lambda: main(_argv), debug=_debug))
