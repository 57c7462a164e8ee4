"""Test doubles for the Box2 trainer tests: a scripted generation backend and test rewards.

Kept importable as ``tests.box2_fakes`` so recipe subprocesses can name the rewards by import path."""

from __future__ import annotations

import random

from selectrust.generation.backends.base import GenerationBackend, GenerationResult, Sample


class ScriptedBackend(GenerationBackend):
    """Returns ``script(request, j, seed) -> text`` for sample j of each request; token ids are the
    tokenizer's ids of the text plus EOS (``finish_reason='stop'``), or exactly ``max_new_tokens``
    ids without EOS when the text is at least that long (``'length'``). Records every request."""

    name = "scripted"

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.requests = []

    def generate(self, requests, *, progress=False, desc="generate"):
        out = []
        for r in requests:
            self.requests.append(r)
            samples = []
            for j in range(r.n):
                text = self.script(r, j, r.seed)
                ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
                if len(ids) >= r.max_new_tokens:
                    ids, finish = ids[:r.max_new_tokens], "length"
                    text = self.tokenizer.decode(ids)
                else:
                    ids, finish = ids + [self.tokenizer.eos_token_id], "stop"
                samples.append(Sample(text=text, token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason=finish))
            out.append(GenerationResult(request=r, samples=samples))
        return out

    def score_labels(self, prompts, labels):  # pragma: no cover - unused
        raise NotImplementedError


def seeded_digits(request, j, seed):
    """A random digit per sample, a function of (seed, prompt, j) only."""
    key = (request.messages or [{"content": request.prompt}])[-1]["content"]
    return str(random.Random(f"{seed}/{key}/{j}").randrange(10))


def distinct_chars_parity(completion: str, row: dict) -> float:
    """A reward with variance under a random-init model (tests only; not an outcome reward)."""
    return float(len(set(completion)) % 2)


def unanswered_by_the_judge(completion: str, row: dict) -> float:
    """1.0 when the evaluation judge reads no committed answer (``multiple``, ``hedged`` or ``no_answer``): a reward
    whose mean cross-checks a GRPO step's ``rollout/<status>`` counts (tests only)."""
    from eval_hooks.parsers import answer_status, parse_row_answer

    return float(answer_status(parse_row_answer(completion, row), row, completion) in ("multiple", "hedged",
                                                                                      "no_answer"))


def always_raises(completion: str, row: dict) -> float:
    raise ZeroDivisionError("boom")


def assert_same_microbatches(xs: list[dict], ys: list[dict],
                             keys: tuple[str, ...] = ("input_ids", "completion_mask", "advantages", "old_logps")) -> None:
    """Two runs of a rollout source gave the same micro-batches (a resumed one against the uninterrupted one)."""
    import torch

    assert len(xs) == len(ys)
    for x, y in zip(xs, ys):
        for k in keys:
            assert torch.equal(x[k], y[k]), k

