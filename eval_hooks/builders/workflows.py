"""Box2 workflow data tools: build, verify, freeze and expand workflows (docs/box2.md#conditions).

Input: stored workflow steps per task, one record each::

    {"item_id": "aime-3", "task": "...", "gold": 204, "answer_type": "numeric",
     "good_steps": ["g+_1", ..., "g+_T"],            # W+ (planner output from a verified trajectory)
     "bad_steps":  ["c_1", ..., "c_T"],              # C_{-0}, the misleading workflow
     "bad_continuations": {"2": [...], ...},         # optional: C_{-k} per change point k
     "choices": ..., <extra fields are kept>}

- :func:`build_workflow_items` runs the verifiers (the built-in leakage check, plus any callables or
  a model judge from :func:`judge_verifier`), drops and *reports* rejected items, and returns Box2
  items (``bad_continuations[k]`` defaults to ``bad_steps[k:]`` for the requested change points).
- :func:`freeze_workflows` writes the items with a per-item ``workflow_hash`` (sha256 of the content
  that defines the five conditions) and a manifest; :func:`load_frozen` re-checks every hash, so
  every model is evaluated on byte-identical workflows.
- :func:`expand_conditions` is the Box2 family's own expansion (``eval_hooks.families.box2``:
  none / good / bad / partial_k / mixed_k) — one implementation for training and evaluation.
- :func:`counterfactual_sft_rows` / :func:`rl_prompt_rows`: training data from frozen items, always
  with the *bad* workflow (the good one is held out for evaluation).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from selectrust.core.hashing import file_sha256
from selectrust.core.io import DataError

#: ``verifier(item, kind, steps) -> (ok, reason)``; ``kind`` is "good" or "bad"
Verifier = Callable[[dict, str, list], "tuple[bool, str]"]


# ---------------------------------------------------------------------------------------------------
# Verifiers
# ---------------------------------------------------------------------------------------------------
def leaked_answer(step: str, gold: Any, answer_type: str, choices: Any = None) -> str | None:
    """What in ``step`` reveals the gold answer, or None: the answer type's leak check
    (:meth:`eval_hooks.parsers.AnswerType.leaked`). Numeric: any number in the step equal to the gold's value
    (``1,000`` = ``1000`` = ``1000.0``), or the gold's text itself. Multiple choice: the gold option's text, or
    "answer/option/choice (is) <letter>". Boolean: "answer (is|:) yes/no". A type without a leak check finds
    nothing; an unknown answer type is a :class:`DataError` naming the known ones."""
    from eval_hooks.parsers import answer_type as lookup

    return lookup(answer_type).leaked(step or "", gold, choices)


def leakage_verifier(item: dict, kind: str, steps: list) -> tuple[bool, str]:
    """Built-in check: no step of any workflow may contain the gold answer or its numeric value."""
    for i, s in enumerate(steps, start=1):
        why = leaked_answer(s, item["gold"], item["answer_type"], item.get("choices"))
        if why:
            return False, f"leak: {kind} step {i} {why}"
    return True, ""


JUDGE_TEMPLATE = (
    "Task:\n{task}\n\nProposed workflow ({kind}):\n{steps}\n\n"
    "Is every step relevant and plausible for this task, and does no step reveal the final answer? "
    "Reply YES or NO."
)


def judge_verifier(backend, *, template: str = JUDGE_TEMPLATE, accept: str = "YES", max_new_tokens: int = 8,
                   kinds: Sequence[str] = ("good", "bad")) -> Verifier:
    """A model-based verifier over any GenerationBackend (greedy): the item passes iff the reply
    starts with ``accept`` (case-insensitive). ``template`` gets ``{task}``, ``{kind}``, ``{steps}``."""
    from selectrust.generation.backends.base import GenerationRequest

    def verify(item: dict, kind: str, steps: list) -> tuple[bool, str]:
        if kind not in kinds:
            return True, ""
        text = template.format(task=item["task"], kind=kind,
                               steps="\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)))
        res = backend.generate([GenerationRequest(messages=[{"role": "user", "content": text}],
                                                  max_new_tokens=max_new_tokens, temperature=0.0)])
        reply = res[0].samples[0].text.strip()
        ok = reply.upper().startswith(accept.upper())
        return ok, "" if ok else f"judge rejected the {kind} workflow: {reply[:80]!r}"

    return verify


# ---------------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------------
@dataclass
class BuildReport:
    items_in: int = 0
    items_kept: int = 0
    rejected: Counter = field(default_factory=Counter)  # reason kind -> count ("leak", "verifier", ...)
    rejections: list[dict] = field(default_factory=list)  # {item_id, kind, reason}

    def to_json(self) -> dict:
        return {"items_in": self.items_in, "items_kept": self.items_kept, "rejected": dict(self.rejected),
                "rejections": self.rejections}


def build_workflow_items(records: Iterable[dict], *, change_points: Sequence[int] | None = None,
                         verifiers: Sequence[Verifier] = (), leak_check: bool = True,
                         path: str | None = None) -> tuple[list[dict], BuildReport]:
    """Verify stored workflows and return Box2 items plus a report of what was rejected and why.

    ``change_points``: the k of partial_k / mixed_k (default: every k with a non-empty bad
    continuation, i.e. 0..T-1). Structural problems raise :class:`DataError`; workflows that fail a
    verifier (leakage first) are dropped and reported.
    """
    report = BuildReport()
    items = []
    checks: list[tuple[str, Verifier]] = ([("leak", leakage_verifier)] if leak_check else []) + \
        [("verifier", v) for v in verifiers]
    for line, rec in enumerate(records, start=1):
        report.items_in += 1
        for f in ("item_id", "task", "gold", "answer_type", "good_steps", "bad_steps"):
            if rec.get(f) is None:
                raise DataError("missing field", path=path, line=line, field=f,
                                accepted="{item_id, task, gold, answer_type, good_steps, bad_steps[, bad_continuations]}")
        good, bad = list(rec["good_steps"]), list(rec["bad_steps"])
        if not good or not bad:
            raise DataError("empty workflow", path=path, line=line, field="good_steps" if not good else "bad_steps",
                            accepted="at least one step")
        if rec.get("bad_continuations"):
            conts = {int(k): list(v) for k, v in rec["bad_continuations"].items()}
            conts.setdefault(0, bad)
        else:
            ks = change_points if change_points is not None else range(len(bad))
            conts = {}
            for k in ks:
                if not 0 <= k <= len(good):
                    raise DataError(f"change point {k} outside 0..{len(good)}", path=path, line=line,
                                    field="change_points")
                if bad[k:]:
                    conts[int(k)] = bad[k:]
            conts.setdefault(0, bad)
        item = {k: v for k, v in rec.items() if k not in ("bad_steps", "bad_continuations")}
        item["bad_continuations"] = {str(k): conts[k] for k in sorted(conts)}
        workflows = [("good", good)] + [(f"bad@{k}", v) for k, v in sorted(conts.items())]
        reason = None
        for label, verify in checks:
            for kind, steps in workflows:
                ok, why = verify(item, kind.split("@")[0], steps)
                if not ok:
                    reason = (label, kind, why or f"{label} rejected the {kind} workflow")
                    break
            if reason:
                break
        if reason:
            report.rejected[reason[0]] += 1
            report.rejections.append({"item_id": str(rec["item_id"]), "kind": reason[1], "reason": reason[2]})
            continue
        items.append(item)
    report.items_kept = len(items)
    return items, report


# ---------------------------------------------------------------------------------------------------
# Freezing
# ---------------------------------------------------------------------------------------------------
HASHED_FIELDS = ("item_id", "task", "answer_type", "gold", "good_steps", "bad_continuations", "choices")


def workflow_hash(item: dict) -> str:
    """sha256 (hex, 16 chars) of the fields that define an item's five conditions."""
    blob = json.dumps({k: item.get(k) for k in HASHED_FIELDS}, sort_keys=True, ensure_ascii=True,
                      separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def freeze_workflows(items: Sequence[dict], path: str | Path, *, report: BuildReport | None = None) -> dict:
    """Write ``items`` (each with its ``workflow_hash``) to ``path`` (JSONL) and ``<path>.manifest.json``
    (count, per-item hashes, the file's sha256, the build report). Returns the manifest."""
    from selectrust.core.io import write_json_atomic, write_jsonl_atomic

    frozen = [{**it, "workflow_hash": workflow_hash(it)} for it in items]
    p = write_jsonl_atomic(path, frozen)
    manifest = {"n_items": len(frozen), "file_sha256": file_sha256(p),
                "hashes": {str(it["item_id"]): it["workflow_hash"] for it in frozen},
                "build_report": report.to_json() if report is not None else None}
    write_json_atomic(str(p) + ".manifest.json", manifest)
    return manifest


def load_frozen(path: str | Path) -> list[dict]:
    """Read frozen items back, refusing any item whose content no longer matches its hash."""
    from selectrust.core.io import read_records

    items = []
    for line, rec in read_records(path):
        h = rec.get("workflow_hash")
        if h is None:
            raise DataError("missing workflow_hash (not a frozen workflow file)", path=path, line=line,
                            field="workflow_hash", accepted="files written by eval_hooks.builders.workflows.freeze_workflows")
        if workflow_hash(rec) != h:
            raise DataError(f"item {rec.get('item_id')!r} changed after freezing (hash {h} != {workflow_hash(rec)})",
                            path=path, line=line, field="workflow_hash")
        items.append(rec)
    return items


# ---------------------------------------------------------------------------------------------------
# Expansion and training data
# ---------------------------------------------------------------------------------------------------
def expand_conditions(items: Sequence[dict], path: str | None = None) -> list[dict]:
    """The five conditions per item, by the Box2 family's own expansion (rows carry ``workflow_hash``)."""
    from eval_hooks.families.box2 import Box2Family

    return Box2Family().expand_records([(i, dict(it)) for i, it in enumerate(items, start=1)], path)


def _bad_prompt(item: dict) -> str:
    from eval_hooks.families.box2 import render_box2_prompt

    return render_box2_prompt(item["task"], item["bad_continuations"]["0"], item["answer_type"], item.get("choices"),
                              style=item.get("prompt_style") or "full")


def counterfactual_sft_rows(items: Sequence[dict], trajectories: dict[str, str]) -> list[dict]:
    """SFT rows ``{item_id, messages}``: user = task + bad workflow (the Box2 renderer), assistant =
    the verified-correct trajectory ``trajectories[item_id]``. Items without one are skipped."""
    out = []
    for it in items:
        tau = trajectories.get(str(it["item_id"]))
        if tau:
            out.append({"item_id": str(it["item_id"]), "workflow_hash": it.get("workflow_hash"),
                        "messages": [{"role": "user", "content": _bad_prompt(it)},
                                     {"role": "assistant", "content": tau}]})
    return out


def rl_prompt_rows(items: Sequence[dict]) -> list[dict]:
    """GRPO prompt rows with the bad workflow: ``{item_id, prompt, gold, answer_type[, choices]}``."""
    out = []
    for it in items:
        row = {"item_id": str(it["item_id"]), "prompt": _bad_prompt(it), "gold": it["gold"],
               "answer_type": it["answer_type"]}
        if it.get("choices") is not None:
            row["choices"] = it["choices"]
        out.append(row)
    return out
