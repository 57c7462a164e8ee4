"""Taste-Bench fork mining: agent trajectories -> decision-fork items, through a generator model, code
checks and two judge filters, with a per-stage, per-cell funnel.

Constructions
-------------
- **parallel**: a successful (``outcome >= success_threshold``) and a failed attempt of one task, at
  most ``max_pairs_per_task`` pairs per task, pairs of the same model first (then file order). The
  fork is found in code: the shared prefix is the longest run of leading steps equal in role,
  whitespace-normalised content and exit code; the fork step is the first step after it. The
  generator writes the two directions (the successful branch's and the failed branch's) in neutral,
  parallel wording, or rejects the pair under the rubric. Label: the successful branch.
- **detour**: one successful attempt with at least one failure signal (a non-zero exit code or a
  step matching ``error_pattern``). The generator names the abandoned direction and the correction
  and quotes four passages with their step ids: ``choice`` (the abandoned direction is taken),
  ``failure``, ``switch``, ``success`` (evidence). The prefix is every step before the ``choice``
  step. Label: the correction.

Funnel stages (counted in total and per cell ``<construction>_<domain>``)
-----------------------------------------------------------------------
``considered`` (pairs / successful attempts looked at) -> ``candidates`` (a fork exists: the two
attempts diverge / the attempt has a failure signal; sent to the generator) -> ``parsed`` (the reply
holds a JSON object with the fields the construction needs) -> ``rubric`` (generator verdict
``accept``) -> ``checks`` (code: no leak word in either candidate, candidates differ; detour: every
quote occurs in its cited step after whitespace normalisation, ``choice < failure <= switch <=
success``, the failure passage's step has a non-zero exit code or the passage matches
``error_pattern``) -> ``trivial`` (kept unless **all** judges, shown only the two candidates, pick the
label) -> ``released`` (kept unless **any** judge, shown the full record, does not pick the label; an
unparsed judge answer counts as not picking it). Every drop is counted with its reason in
``dropped[stage][reason]``, and every candidate's fate is written to ``candidates.jsonl``.

The order of the two candidates in a released item is a shuffle seeded by ``(seed, item_id)``; the
label is recomputed for it.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from selectrust.generation.backends.base import GenerationBackend, GenerationRequest, derive_seed
from ..parsers import FORK_LETTERS, parse_fork_answer
from .trajectories import Step, Trajectory, normalize_ws

STAGES = ("considered", "candidates", "parsed", "rubric", "checks", "trivial", "released")
QUOTE_KEYS = ("choice", "failure", "switch", "success")
CONSTRUCTIONS = ("parallel", "detour")


@dataclass
class MiningSettings:
    """Knobs of :func:`mine_forks` (the ``mining`` part of ``conf/mine_forks.yaml``)."""

    constructions: list[str] = field(default_factory=lambda: list(CONSTRUCTIONS),
                                     metadata={"help": "Which constructions to mine: parallel, detour."})
    success_threshold: float = field(default=1.0, metadata={"help": "An attempt succeeded when outcome >= this."})
    max_pairs_per_task: int = field(default=8, metadata={"help": "parallel: at most this many (success, failure) pairs per task."})
    default_domain: str = field(default="engineering", metadata={"help": "Domain of trajectories without a 'domain' field."})
    leak_words: list[str] = field(default_factory=lambda: ["correctly", "better", "fixed"],
                                  metadata={"help": "Whole words (any case) that drop a candidate pair mentioning them."})
    error_pattern: str = field(default=r"(?i)\b(error|exception|traceback|failed|failure|fatal)\b",
                               metadata={"help": "Regex that marks a failure passage (besides a non-zero exit code)."})
    seed: int = field(default=0, metadata={"help": "Seed of the candidate-order shuffle (with the item id)."})
    max_step_chars: int = field(default=4000, metadata={"help": "Steps longer than this are cut in generator/judge prompts."})
    generator_max_new_tokens: int = field(default=2048, metadata={"help": "Generation budget of the generator."})
    judge_max_new_tokens: int = field(default=1024, metadata={"help": "Generation budget of each judge call."})

    def check(self) -> None:
        bad = [c for c in self.constructions if c not in CONSTRUCTIONS]
        if bad or not self.constructions:
            raise ValueError(f"mining.constructions={self.constructions!r}: accepted a non-empty subset of {CONSTRUCTIONS}")
        if self.max_pairs_per_task < 1:
            raise ValueError(f"mining.max_pairs_per_task must be >= 1, got {self.max_pairs_per_task}")
        if self.default_domain not in ("engineering", "research"):
            raise ValueError(f"mining.default_domain={self.default_domain!r}: accepted engineering | research")
        try:
            re.compile(self.error_pattern)
        except re.error as e:
            raise ValueError(f"mining.error_pattern is not a valid regex: {e}") from e


# -- finding forks --------------------------------------------------------------------------------------

def _same(a: Step, b: Step) -> bool:
    return a.role == b.role and a.exit_code == b.exit_code and normalize_ws(a.content) == normalize_ws(b.content)


def shared_prefix_len(a: Trajectory, b: Trajectory) -> int:
    n = 0
    while n < min(len(a.steps), len(b.steps)) and _same(a.steps[n], b.steps[n]):
        n += 1
    return n


def parallel_pairs(attempts: Sequence[Trajectory], threshold: float, max_pairs: int) -> list[tuple[Trajectory, Trajectory]]:
    """(success, failure) pairs of one task: same-model pairs first, then file order; at most ``max_pairs``."""
    good = [t for t in attempts if t.outcome >= threshold]
    bad = [t for t in attempts if t.outcome < threshold]
    pairs = [(i, j, g, b) for i, g in enumerate(good) for j, b in enumerate(bad)]
    pairs.sort(key=lambda p: (p[2].model != p[3].model, p[0], p[1]))
    return [(g, b) for _, _, g, b in pairs[:max_pairs]]


def has_failure_signal(step: Step, pattern: re.Pattern, text: str | None = None) -> bool:
    return (step.exit_code not in (None, 0)) or bool(pattern.search(step.content if text is None else text))


# -- prompts --------------------------------------------------------------------------------------------

RUBRIC = (
    "Rules: reject (verdict \"reject\") if the better direction is only knowable in hindsight, if one "
    "candidate is a strawman, or if the outcome difference comes from typos, crashes, luck or missing "
    "packages rather than from the direction taken. Write both candidates as neutral, parallel "
    "descriptions of similar length and tone, as they could have been proposed at the fork; never use "
    "words that reveal the outcome (e.g. \"correctly\", \"better\", \"fixed\").")


def _steps_text(steps: Sequence[Step], max_chars: int) -> str:
    out = []
    for s in steps:
        body = s.render()
        out.append(f"[step {s.step_id}] " + (body if len(body) <= max_chars else body[:max_chars] + " [...cut]"))
    return "\n".join(out) or "(none)"


def parallel_prompt(good: Trajectory, bad: Trajectory, k: int, st: MiningSettings) -> str:
    return (
        "You are building a decision-fork benchmark item from two attempts at the same task. The attempts "
        "share their first steps and diverge at the fork; one succeeded and one failed.\n\n"
        f"Task:\n{good.task.strip()}\n\n"
        f"Shared steps before the fork:\n{_steps_text(good.steps[:k], st.max_step_chars)}\n\n"
        f"Continuation of the successful attempt (outcome {good.outcome:g}):\n"
        f"{_steps_text(good.steps[k:], st.max_step_chars)}\n\n"
        f"Continuation of the failed attempt (outcome {bad.outcome:g}):\n"
        f"{_steps_text(bad.steps[k:], st.max_step_chars)}\n\n"
        f"{RUBRIC}\n\n"
        "Reply with one JSON object and nothing after it: {\"verdict\": \"accept\" or \"reject\", \"reason\": "
        "\"...\", \"candidate_success\": \"the direction the successful attempt took at the fork\", "
        "\"candidate_failure\": \"the direction the failed attempt took at the fork\"}")


def detour_prompt(t: Trajectory, st: MiningSettings) -> str:
    return (
        "You are building a decision-fork benchmark item from one successful attempt in which the agent "
        "took a direction, hit an observable failure, switched to another direction and succeeded.\n\n"
        f"Task:\n{t.task.strip()}\n\n"
        f"Attempt (outcome {t.outcome:g}):\n{_steps_text(t.steps, st.max_step_chars)}\n\n"
        f"{RUBRIC}\n\n"
        "Quote four passages verbatim, each with the id of the step it comes from: \"choice\" (the agent "
        "takes the abandoned direction), \"failure\" (the observed failure that ends it), \"switch\" (the "
        "agent chooses the correction), \"success\" (evidence that the correction worked).\n"
        "Reply with one JSON object and nothing after it: {\"verdict\": \"accept\" or \"reject\", \"reason\": "
        "\"...\", \"abandoned\": \"the abandoned direction\", \"correction\": \"the direction that succeeded\", "
        "\"quotes\": {\"choice\": {\"step\": <id>, \"text\": \"...\"}, \"failure\": {...}, \"switch\": {...}, "
        "\"success\": {...}}}")


TRIVIAL_HEADER = "Two candidate directions for an agent working on a task (the task itself is not shown)."


def trivial_prompt(a: str, b: str) -> str:
    return (f"{TRIVIAL_HEADER}\n\nA: {a.strip()}\n\nB: {b.strip()}\n\n"
            "Which direction is more likely to lead to a successful outcome? Reason briefly, then end your "
            "response with a final line of the form `ANSWER: X`, where X is A or B.")


def record_prompt(item: dict, after: dict[str, str], outcome: dict[str, str]) -> str:
    """The full record: task, prefix, both candidates, what followed each, recorded outcomes."""
    prefix = "\n".join(item["prefix"]) or "(nothing yet)"
    parts = [
        "You are checking a benchmark label against the full record of an agent's work.\n",
        f"Task:\n{item['task'].strip()}\n", f"Steps before the decision point:\n{prefix}\n"]
    for slot in ("A", "B"):
        parts.append(f"Candidate {slot}: {item['candidate_' + slot.lower()].strip()}\n"
                     f"What followed candidate {slot}:\n{after[slot]}\n"
                     f"Recorded outcome after candidate {slot}: {outcome[slot]}\n")
    parts.append("Given the whole record, which candidate was the better decision at this point? Reason "
                 "briefly, then end your response with a final line of the form `ANSWER: X`, where X is A or B.")
    return "\n".join(parts)


# -- parsing generator replies ----------------------------------------------------------------------------

def last_json_object(text: str) -> dict | None:
    """The last ``{...}`` in ``text`` that parses as a JSON object (code fences allowed), or None."""
    dec = json.JSONDecoder()
    found = None
    i = text.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found = obj
        i = text.find("{", end)
    return found


def _nonempty_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def parse_generator_reply(text: str, construction: str) -> tuple[dict | None, str]:
    """``(fields, "")`` or ``(None, reason)`` for a reply that cannot be used."""
    obj = last_json_object(text or "")
    if obj is None:
        return None, "no_json_object"
    if obj.get("verdict") not in ("accept", "reject"):
        return None, "bad_verdict"
    if obj["verdict"] == "reject":
        return obj, ""
    keys = ("candidate_success", "candidate_failure") if construction == "parallel" else ("abandoned", "correction")
    if not all(_nonempty_str(obj.get(k)) for k in keys):
        return None, "missing_candidates"
    if construction == "detour":
        q = obj.get("quotes")
        if not isinstance(q, dict) or not all(
                isinstance(q.get(k), dict) and isinstance(q[k].get("step"), int) and not isinstance(q[k]["step"], bool)
                and _nonempty_str(q[k].get("text")) for k in QUOTE_KEYS):
            return None, "missing_quotes"
    return obj, ""


# -- deterministic checks -----------------------------------------------------------------------------------

def leak_words_in(texts: Sequence[str], words: Sequence[str]) -> list[str]:
    found = []
    for w in words:
        if any(re.search(r"(?<!\w)" + re.escape(w) + r"(?!\w)", t, re.IGNORECASE) for t in texts):
            found.append(w)
    return found


def verify_quotes(t: Trajectory, quotes: dict, pattern: re.Pattern) -> str:
    """'' if the four quotes pass, else the reason: ``cited_step_missing``, ``quote_not_in_step``,
    ``steps_out_of_order``, ``no_failure_signal``."""
    for k in QUOTE_KEYS:
        step = t.by_id.get(quotes[k]["step"])
        if step is None:
            return "cited_step_missing"
        if normalize_ws(quotes[k]["text"]) not in normalize_ws(step.content):
            return "quote_not_in_step"
    c, f, s, e = (quotes[k]["step"] for k in QUOTE_KEYS)
    if not (c < f <= s <= e):
        return "steps_out_of_order"
    if not has_failure_signal(t.by_id[f], pattern, quotes["failure"]["text"]):
        return "no_failure_signal"
    return ""


# -- the pipeline ---------------------------------------------------------------------------------------------

class Funnel:
    def __init__(self) -> None:
        self.total = {s: 0 for s in STAGES}
        self.cells: dict[str, dict[str, int]] = defaultdict(lambda: {s: 0 for s in STAGES})
        self.dropped: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.cell_dropped: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))

    def passed(self, stage: str, cell: str) -> None:
        self.total[stage] += 1
        self.cells[cell][stage] += 1

    def drop(self, stage: str, cell: str, reason: str) -> None:
        self.dropped[stage][reason] += 1
        self.cell_dropped[cell][stage][reason] += 1

    def as_dict(self) -> dict:
        def plain(d):
            return {k: plain(v) for k, v in d.items()} if isinstance(d, dict) else d
        return {"stages": list(STAGES), "funnel": dict(self.total),
                "per_cell": {c: dict(v) for c, v in sorted(self.cells.items())},
                "dropped": plain(dict(self.dropped)), "dropped_per_cell": plain(dict(sorted(self.cell_dropped.items())))}


def _cand(construction: str, domain: str, item_id: str, task: Trajectory, **kw) -> dict:
    return {"item_id": item_id, "construction": construction, "domain": domain, "cell": f"{construction}_{domain}",
            "task_id": task.task_id, "task": task.task, "fate": None, **kw}


def _make_item(c: dict, first: str, second: str, prefix_steps: Sequence[Step], after: tuple[str, str],
               outcome: tuple[str, str], seed: int) -> None:
    """Fill the item fields of candidate ``c``: ``first`` is the label's text. Seeded order."""
    swap = random.Random(derive_seed(seed, c["item_id"])).random() < 0.5
    a, b = (second, first) if swap else (first, second)
    label = "B" if swap else "A"
    c["item"] = {"item_id": c["item_id"], "task_id": c["task_id"], "task": c["task"],
                 "prefix": [s.render() for s in prefix_steps], "candidate_a": a.strip(), "candidate_b": b.strip(),
                 "label": label, "construction": c["construction"], "domain": c["domain"], "horizon": None,
                 "fork_step": c["fork_step"], "source_attempts": c["attempts"]}
    order = (1, 0) if swap else (0, 1)
    c["after"] = {"A": after[order[0]], "B": after[order[1]]}
    c["outcome"] = {"A": outcome[order[0]], "B": outcome[order[1]]}


def collect_candidates(trajectories: Sequence[Trajectory], st: MiningSettings, funnel: Funnel) -> list[dict]:
    """Forks found in code (no model involved); each with its generator prompt."""
    pattern = re.compile(st.error_pattern)
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t)
    out = []
    for task_id, attempts in by_task.items():
        if "parallel" in st.constructions:
            for good, bad in parallel_pairs(attempts, st.success_threshold, st.max_pairs_per_task):
                domain = good.domain or st.default_domain
                c = _cand("parallel", domain, f"parallel/{task_id}/{good.attempt_id}-vs-{bad.attempt_id}", good,
                          attempts=[good.attempt_id, bad.attempt_id])
                funnel.passed("considered", c["cell"])
                k = shared_prefix_len(good, bad)
                if k >= min(len(good.steps), len(bad.steps)):
                    funnel.drop("candidates", c["cell"], "no_divergence")
                    c["fate"] = "dropped:candidates:no_divergence"
                    out.append(c)
                    continue
                c.update(fork_step=good.steps[k].step_id, prompt=parallel_prompt(good, bad, k, st),
                         good=good, bad=bad, k=k)
                funnel.passed("candidates", c["cell"])
                out.append(c)
        if "detour" in st.constructions:
            for t in attempts:
                if t.outcome < st.success_threshold:
                    continue
                domain = t.domain or st.default_domain
                c = _cand("detour", domain, f"detour/{task_id}/{t.attempt_id}", t, attempts=[t.attempt_id])
                funnel.passed("considered", c["cell"])
                if not any(has_failure_signal(s, pattern) for s in t.steps):
                    funnel.drop("candidates", c["cell"], "no_failure_signal")
                    c["fate"] = "dropped:candidates:no_failure_signal"
                    out.append(c)
                    continue
                c.update(prompt=detour_prompt(t, st), traj=t, fork_step=None)
                funnel.passed("candidates", c["cell"])
                out.append(c)
    return out


def _generate(backend: GenerationBackend, prompts: Sequence[str], max_new_tokens: int, desc: str) -> list[str]:
    if not prompts:
        return []
    reqs = [GenerationRequest(messages=[{"role": "user", "content": p}], max_new_tokens=max_new_tokens,
                              temperature=0.0) for p in prompts]
    return [r.samples[0].text for r in backend.generate(reqs, desc=desc)]


def _apply_reply(c: dict, reply: str, st: MiningSettings, funnel: Funnel, pattern: re.Pattern) -> bool:
    """Parse the generator reply, apply the rubric verdict and the code checks; build the item."""
    c["generator_reply"] = reply
    obj, why = parse_generator_reply(reply, c["construction"])
    if obj is None:
        return _drop(c, funnel, "parsed", why)
    funnel.passed("parsed", c["cell"])
    if obj["verdict"] == "reject":
        c["generator_reason"] = obj.get("reason")
        return _drop(c, funnel, "rubric", "generator_rejected")
    funnel.passed("rubric", c["cell"])
    if c["construction"] == "parallel":
        good, bad, k = c["good"], c["bad"], c["k"]
        right, wrong = obj["candidate_success"], obj["candidate_failure"]
        prefix = good.steps[:k]
        after = (_steps_text(good.steps[k:], st.max_step_chars), _steps_text(bad.steps[k:], st.max_step_chars))
        outcome = (f"{good.outcome:g} (succeeded)", f"{bad.outcome:g} (failed)")
    else:
        t = c["traj"]
        right, wrong = obj["correction"], obj["abandoned"]
        why = verify_quotes(t, obj["quotes"], pattern)
        if why:
            return _drop(c, funnel, "checks", why)
        q = {k: obj["quotes"][k]["step"] for k in QUOTE_KEYS}
        c["fork_step"], c["quotes"] = q["choice"], obj["quotes"]
        prefix = [s for s in t.steps if s.step_id < q["choice"]]
        after = (_steps_text([s for s in t.steps if s.step_id >= q["switch"]], st.max_step_chars),
                 _steps_text([s for s in t.steps if q["choice"] <= s.step_id < q["switch"]], st.max_step_chars))
        outcome = (f"{t.outcome:g} (the attempt succeeded after switching)",
                   "abandoned after the observable failure quoted above")
    if normalize_ws(right).lower() == normalize_ws(wrong).lower():
        return _drop(c, funnel, "checks", "identical_candidates")
    leaks = leak_words_in([right, wrong], st.leak_words)
    if leaks:
        c["leak_words"] = leaks
        return _drop(c, funnel, "checks", "leak_word")
    funnel.passed("checks", c["cell"])
    _make_item(c, right, wrong, prefix, after, outcome, st.seed)
    return True


def _drop(c: dict, funnel: Funnel, stage: str, reason: str) -> bool:
    funnel.drop(stage, c["cell"], reason)
    c["fate"] = f"dropped:{stage}:{reason}"
    return False


def _judge_all(judges: Sequence[tuple[str, GenerationBackend]], prompts: list[str], max_new_tokens: int,
               stage: str) -> tuple[list[dict[str, str | None]], list[dict[str, str]]]:
    """Per prompt, ``{judge name: parsed letter or None}`` and ``{judge name: raw reply}``."""
    votes: list[dict[str, str | None]] = [{} for _ in prompts]
    raws: list[dict[str, str]] = [{} for _ in prompts]
    for name, backend in judges:
        for v, raw, text in zip(votes, raws, _generate(backend, prompts, max_new_tokens, f"{stage} judge {name}")):
            v[name] = parse_fork_answer(text, FORK_LETTERS)
            raw[name] = text
    return votes, raws


def load_replies(path, trajectories: Sequence[Trajectory], st: MiningSettings) -> dict[str, str]:
    """Recorded generator replies (``{"item_id", "generator_reply"}`` per line, e.g. a previous run's
    ``candidates.jsonl``) to reuse instead of calling the generator. Checked before any model loads:
    the item id must be a candidate of these trajectories, and a detour reply's quotes must cite steps
    that exist in its attempt (``DataError`` naming file, line and field), unless the line records
    that very drop (``fate: dropped:checks:cited_step_missing``, as a previous run wrote it); such a
    reply is counted again as ``cited_step_missing``."""
    from ..families.base import Ctx
    from selectrust.core.io import read_records

    cands = {c["item_id"]: c for c in collect_candidates(trajectories, st, Funnel())}
    out: dict[str, str] = {}
    for line, rec in read_records(path):
        ctx = Ctx(path, line)
        iid = rec.get("item_id")
        if iid not in cands:
            raise ctx.error(f"{iid!r} is not a fork candidate of these trajectories", "item_id",
                            "an item_id from a previous run's candidates.jsonl on the same trajectories")
        reply = rec.get("generator_reply")
        if cands[iid]["fate"] is not None:  # no fork in code (no_divergence / no_failure_signal): nothing to reuse
            continue
        if not isinstance(reply, str):
            raise ctx.error(f"expected a string, got {reply!r}"[:200], "generator_reply", "the generator's raw reply")
        c = cands[iid]
        obj, _ = parse_generator_reply(reply, c["construction"])
        # a previous run's own record of this drop is replayed (and counted) as such; any other reply must
        # cite existing steps
        if c["construction"] == "detour" and obj is not None and obj["verdict"] == "accept" \
                and rec.get("fate") != "dropped:checks:cited_step_missing":
            for k in QUOTE_KEYS:
                if obj["quotes"][k]["step"] not in c["traj"].by_id:
                    raise ctx.error(f"cites step {obj['quotes'][k]['step']}, which attempt {c['attempts'][0]!r} of task "
                                    f"{c['task_id']!r} ({c['traj'].where()}) does not have",
                                    f"generator_reply.quotes.{k}.step", "a step id of the cited attempt")
        out[iid] = reply
    return out



def _votes(judges, cands: list[dict], prompts: list[str], stage: str, st, unparsed: dict) -> list[tuple[dict, dict]]:
    """Ask every judge about every candidate of ``stage``; store the votes on the candidate as
    ``<stage>_votes`` and the judges' raw replies as ``<stage>_judge_replies`` (so an unparsed vote can be
    diagnosed), count unparsed replies per judge into ``unparsed[stage]``; ``(candidate, votes)`` pairs."""
    votes, raws = _judge_all(judges, prompts, st.judge_max_new_tokens, stage)
    for c, v, raw in zip(cands, votes, raws):
        c[f"{stage}_votes"] = v
        c[f"{stage}_judge_replies"] = raw
        for n, x in v.items():
            unparsed[stage][n] += x is None
    return list(zip(cands, votes))


#: Generator prompts sent per ``generate`` call (replies are handed to ``on_reply`` chunk by chunk).
REPLY_CHUNK = 32


def mine_forks(trajectories: Sequence[Trajectory], generator: GenerationBackend | None,
               judges: Sequence[tuple[str, GenerationBackend]], st: MiningSettings, *,
               replies: dict[str, str] | None = None,
               on_reply: Callable[[dict], None] | None = None) -> tuple[list[dict], dict, list[dict]]:
    """``(items, stats, candidates)``: released Taste items, the funnel (``mining_stats.json``) and every
    candidate with its ``fate`` (``released`` or ``dropped:<stage>:<reason>``). ``replies`` (from
    :func:`load_replies`) replace generator calls for their item ids; ``generator`` may be None when
    every candidate has one. ``on_reply({"item_id", "generator_reply", "fate"})`` is called for each new
    generator reply as soon as its chunk of :data:`REPLY_CHUNK` prompts is back and checked (``fate``: the
    drop so far, or None), so the CLI can append it to a file a rerun passes to :func:`load_replies`."""
    st.check()
    if not judges:
        raise ValueError("mine_forks needs at least one judge")
    names = [n for n, _ in judges]
    if len(set(names)) != len(names):
        raise ValueError(f"judge names must be unique, got {names}")
    pattern = re.compile(st.error_pattern)
    funnel = Funnel()
    cands = collect_candidates(trajectories, st, funnel)
    live = [c for c in cands if c["fate"] is None]
    replies = dict(replies or {})
    ask = [c for c in live if c["item_id"] not in replies]
    n_recorded = len(live) - len(ask)
    if ask and generator is None:
        raise ValueError(f"{len(ask)} candidate(s) have no recorded reply and no generator is given")
    ok: dict[str, bool] = {}
    for start in range(0, len(ask), REPLY_CHUNK):
        chunk = ask[start:start + REPLY_CHUNK]
        new = _generate(generator, [c["prompt"] for c in chunk], st.generator_max_new_tokens,
                        f"generator {start + len(chunk)}/{len(ask)}")
        for c, r in zip(chunk, new):
            ok[c["item_id"]] = _apply_reply(c, r, st, funnel, pattern)
            if on_reply is not None:
                on_reply({"item_id": c["item_id"], "generator_reply": r, "fate": c["fate"]})
    live = [c for c in live if (ok[c["item_id"]] if c["item_id"] in ok
                                else _apply_reply(c, replies[c["item_id"]], st, funnel, pattern))]
    unparsed = {"trivial": defaultdict(int), "undecidable": defaultdict(int)}

    kept = []
    for c, v in _votes(judges, live, [trivial_prompt(c["item"]["candidate_a"], c["item"]["candidate_b"]) for c in live],
                       "trivial", st, unparsed):
        if all(x == c["item"]["label"] for x in v.values()):
            _drop(c, funnel, "trivial", "all_judges_pick_label")
        else:
            funnel.passed("trivial", c["cell"])
            kept.append(c)
    items = []
    for c, v in _votes(judges, kept, [record_prompt(c["item"], c["after"], c["outcome"]) for c in kept],
                       "undecidable", st, unparsed):
        against = [n for n, x in v.items() if x != c["item"]["label"]]
        if against:
            _drop(c, funnel, "released", "judge_disagrees" if all(v[n] is not None for n in against)
                  else "judge_unparsed")
        else:
            funnel.passed("released", c["cell"])
            c["fate"] = "released"
            items.append(c["item"])
    stats = funnel.as_dict()
    stats.update(judges=names, generator=getattr(generator, "model", None) or getattr(generator, "name", None),
                 recorded_replies_used=n_recorded,
                 judge_unparsed={k: dict(v) for k, v in unparsed.items()}, settings=dict(vars(st)))
    return items, stats, [_public(c) for c in cands]


def _public(c: dict) -> dict:
    """A candidate as written to ``candidates.jsonl`` (no trajectory objects, no prompts)."""
    return {k: v for k, v in c.items() if k not in ("good", "bad", "traj", "prompt", "k", "after", "outcome")}


def funnel_markdown(stats: dict) -> str:
    """The funnel as a Markdown table (total and per cell) plus the drop reasons."""
    stages = stats["stages"]
    lines = ["| cell | " + " | ".join(stages) + " |", "|---|" + "---:|" * len(stages)]
    lines.append("| **total** | " + " | ".join(str(stats["funnel"][s]) for s in stages) + " |")
    for cell, row in stats["per_cell"].items():
        lines.append(f"| {cell} | " + " | ".join(str(row[s]) for s in stages) + " |")
    lines += ["", "Dropped (stage: reason = count):", ""]
    for stage in stages:
        for reason, n in sorted(stats["dropped"].get(stage, {}).items()):
            lines.append(f"- {stage}: {reason} = {n}")
    return "\n".join(lines) + "\n"
