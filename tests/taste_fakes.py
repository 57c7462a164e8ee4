"""A deterministic fake generator/judge for Taste fork mining, driven by markers in the data.

Generator (prompts from ``parallel_prompt`` / ``detour_prompt``); markers in the task text:
``[gen:garbage]`` unparsable reply, ``[gen:reject]`` rubric reject, ``[gen:badquote]`` a quote not in
its step, ``[gen:badorder]`` choice cited after success, ``[gen:nosignal]`` failure cited at a step
without a failure signal, ``[gen:missingstep]`` a cited step that does not exist. Otherwise the
candidates are the first step of each branch (parallel) or the choice/switch steps (detour), and
quotes are whitespace-collapsed prefixes of the cited steps (so verification needs normalisation).

Judges (named by the backend's model name): on the candidates-only prompt a judge picks the candidate
whose text contains ``obvious`` or ``hint-<name>``, else gives an unparsable answer. On the full
record it picks the candidate with the higher recorded outcome (abandoned = lowest), unless the task
contains ``[dispute:<name>]``, then the other one.
"""

from __future__ import annotations

import json
import re

from selectrust.generation.backends import GenerationBackend, GenerationResult, Sample
from eval_hooks.builders.taste_forks import TRIVIAL_HEADER

_STEP = re.compile(r"^\[step (\d+)\] (\w+): (.*?)(?: \[exit code (-?\d+)\])?$")


def _steps(block: str) -> list[tuple[int, str, str, int | None]]:
    out = []
    for line in block.split("\n"):
        m = _STEP.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3), None if m.group(4) is None else int(m.group(4))))
    return out


def _section(prompt: str, start: str, end: str) -> str:
    i = prompt.index(start) + len(start)
    return prompt[i:prompt.index(end, i)]


def _q(step, text=None):
    return {"step": step[0], "text": " ".join((text or step[2]).split())[:50]}


def generator_reply(prompt: str) -> str:
    if "[gen:garbage]" in prompt:
        return "I could not find a clean fork here, sorry."
    if "[gen:reject]" in prompt:
        return 'Thinking...\n{"verdict": "reject", "reason": "hindsight only"}'
    if "Continuation of the successful attempt" in prompt:
        good = _steps(_section(prompt, "Continuation of the successful attempt", "Continuation of the failed"))
        bad = _steps(_section(prompt, "Continuation of the failed attempt", "Rules:"))
        return "```json\n" + json.dumps({"verdict": "accept", "reason": "clean", "candidate_success": good[0][2],
                                         "candidate_failure": bad[0][2]}) + "\n```"
    steps = _steps(_section(prompt, "Attempt (outcome", "Rules:"))
    fail = next(i for i, s in enumerate(steps) if s[3] not in (None, 0))
    choice = max(i for i in range(fail) if steps[i][1] == "assistant")
    switch = min(i for i in range(fail + 1, len(steps)) if steps[i][1] == "assistant")
    quotes = {"choice": _q(steps[choice]), "failure": _q(steps[fail]), "switch": _q(steps[switch]),
              "success": _q(steps[-1])}
    if "[gen:badquote]" in prompt:
        quotes["failure"]["text"] = "a passage that never appears"
    if "[gen:badorder]" in prompt:
        quotes["choice"], quotes["success"] = quotes["success"], quotes["choice"]
    if "[gen:nosignal]" in prompt:
        quotes["failure"] = _q(steps[fail - 1])
    if "[gen:missingstep]" in prompt:
        quotes["switch"]["step"] = 999
    return json.dumps({"verdict": "accept", "reason": "clean", "abandoned": steps[choice][2],
                       "correction": steps[switch][2], "quotes": quotes})


def judge_reply(name: str, prompt: str) -> str:
    if prompt.startswith(TRIVIAL_HEADER):
        a = _section(prompt, "\nA: ", "\n\nB: ")
        b = _section(prompt, "\n\nB: ", "\n\nWhich")
        for letter, text in (("A", a), ("B", b)):
            if "obvious" in text or f"hint-{name}" in text:
                return f"Looks clear.\nANSWER: {letter}"
        return "Cannot tell from the wording alone."
    score = {}
    for letter in "AB":
        m = re.search(rf"Recorded outcome after candidate {letter}: (-?[\d.]+)", prompt)
        score[letter] = float(m.group(1)) if m else float("-inf")
    best = "A" if score["A"] > score["B"] else "B"
    if f"[dispute:{name}]" in prompt:
        best = "B" if best == "A" else "A"
    return f"The record shows it.\nANSWER: {best}"


def fake_reply(model: str, prompt: str) -> str:
    return generator_reply(prompt) if model == "generator" else judge_reply(model, prompt)


class FakeBackend(GenerationBackend):
    """``fake_reply`` behind the generation interface; ``model`` = "generator" or a judge name."""

    name = "fake"

    def __init__(self, model: str):
        self.model = model
        self.calls = 0

    def generate(self, requests, *, progress=False, desc="generate"):
        self.calls += len(requests)
        out = []
        for r in requests:
            prompt = r.prompt if r.messages is None else r.messages[-1]["content"]
            out.append(GenerationResult(request=r, samples=[Sample(fake_reply(self.model, prompt), [], [], "stop")]))
        return out

    def score_labels(self, prompts, labels):  # pragma: no cover - not used by mining
        raise NotImplementedError


def traj(task_id, attempt_id, outcome, steps, *, task=None, model="m1", domain=None):
    """One trajectory record; ``steps``: (role, content[, exit_code]) tuples, ids 1.. in order."""
    rec = {"task_id": task_id, "attempt_id": attempt_id, "model": model, "outcome": outcome,
           "steps": [{"step_id": i, "role": s[0], "content": s[1], **({"exit_code": s[2]} if len(s) > 2 else {})}
                     for i, s in enumerate(steps, start=1)]}
    if task is not None:
        rec["task"] = task
    if domain is not None:
        rec["domain"] = domain
    return rec


def _pair(task_id, marker, good_step, bad_step, domain=None):
    shared = [("user", f"Task {task_id}: make the tests pass. {marker}"), ("assistant", "Read  the\nfailing test.")]
    return [traj(task_id, "s", 1.0, shared + [("assistant", good_step), ("tool", "28 passed", 0)],
                 task=f"Task {task_id} {marker}", domain=domain),
            traj(task_id, "f", 0.0, shared + [("assistant", bad_step), ("tool", "3 failed", 1)],
                 task=f"Task {task_id} {marker}", domain=domain)]


def _detour(task_id, marker, domain=None):
    steps = [("user", f"Task {task_id}"), ("assistant", "Inspect the helper module."),
             ("assistant", "Extend the helper's default return   structure."), ("tool", "ran the linter: ok", 0),
             ("tool", "pytest: 3 failed, AssertionError in test_helpers", 1),
             ("assistant", "Put the placeholder on the call path instead."), ("tool", "28 passed in 2.1s", 0)]
    return [traj(task_id, "d", 1.0, steps, task=f"Task {task_id} {marker}", domain=domain)]


def mining_corpus() -> list[dict]:
    """Trajectories under which every stage keeps and drops something (see tests/eval_hooks/builders/test_taste_mining.py)."""
    recs = []
    recs += _pair("P1", "", "Copy the five fields into the config.", "Assign the whole auth block.")
    recs += _pair("P2", "[gen:garbage]", "Route A.", "Route B.")
    recs += _pair("P3", "[gen:reject]", "Route A.", "Route B.")
    recs += _pair("P4", "", "Correctly patch the parser.", "Patch the lexer.")
    recs += _pair("P5", "", "Write a general solution (the obvious choice).", "Hard-code the three known answers.")
    recs += _pair("P6", "", "Cache the results (hint-j1).", "Recompute the results each call.", domain="research")
    recs += _pair("P7", "[dispute:j2]", "Use the single-pixel attack.", "Use the multi-strategy attack.",
                  domain="research")
    same = [("user", "Task P8"), ("assistant", "Run the tests.")]
    recs += [traj("P8", "s", 1.0, same), traj("P8", "f", 0.0, same)]   # no divergence
    recs += _detour("D1", "")
    recs += _detour("D2", "[gen:badquote]")
    recs += _detour("D3", "[gen:badorder]")
    recs += _detour("D4", "[gen:nosignal]")
    recs += _detour("D5", "[gen:missingstep]")
    recs += _detour("D6", "", domain="research")
    return recs
