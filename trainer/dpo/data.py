"""DPO's data: validated pair quartets (:func:`load_pairs`), the unmatched ablation and the pairs' length policy (:func:`apply_length_policy`). The sampler that draws them with each pool's mass
is ``trainer/data/train_data.py``'s :class:`~trainer.data.train_data.ConditionSampler`, shared with the other
trainers' samplers; the micro-batch is ``trainer/dpo/pairs.py``.

Pair files (written by ``recipes/mine_pairs.py``) hold one row per (quartet, condition)::

    {"pair_id": "q17", "item_id": "gsm-17", "condition": "misleading", "prompt": "...",
     "chosen": "...", "rejected": "...", ...provenance fields}
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from selectrust.conditions import MIST_CONDITIONS as CONDITIONS, SCOPE_POOLS as POOLS, UNKNOWN_POOLS
from selectrust.core.data_sources import resolve_data_path
from selectrust.core.io import DataError, read_records
from trainer.data.train_data import truncation_policy
from trainer.logprobs.logprobs import build_pair_batch


# -- pairs ----------------------------------------------------------------------------------------
@dataclass
class PairSet:
    rows: list[dict]
    stats: dict[str, Any] = field(default_factory=dict)


REQUIRED_PAIR_FIELDS = ("pair_id", "condition", "prompt", "chosen", "rejected")


def load_pairs(path: str, *, on_invalid: str = "drop", require_quartets: bool = True) -> PairSet:
    """Load and validate a pair file. Structural errors (missing field, unknown condition, duplicate
    (pair_id, condition)) always raise; content problems (identical chosen/rejected, empty completion,
    incomplete quartet) are counted and dropped, or raise when ``on_invalid == 'error'``."""
    real = resolve_data_path(path)
    seen: dict[tuple[str, str], int] = {}
    rows: list[dict] = []
    dropped: Counter = Counter()
    lines: dict[int, int] = {}
    for line, rec in read_records(real):
        for f in REQUIRED_PAIR_FIELDS:
            if f not in rec:
                raise DataError("missing field", path=real, line=line, field=f,
                                accepted="pair rows with " + ", ".join(REQUIRED_PAIR_FIELDS))
            if not isinstance(rec[f], str):
                raise DataError(f"expected a string, got {type(rec[f]).__name__}", path=real, line=line, field=f)
        if rec["condition"] not in CONDITIONS:
            raise DataError(f"unknown condition {rec['condition']!r}", path=real, line=line, field="condition",
                            accepted="|".join(CONDITIONS))
        pool = rec.get("pool", rec["condition"])
        if pool not in POOLS or (pool in UNKNOWN_POOLS and UNKNOWN_POOLS[pool] != rec["condition"]) or \
                (pool in CONDITIONS and pool != rec["condition"]):
            raise DataError(f"pool {pool!r} does not fit condition {rec['condition']!r}", path=real, line=line,
                            field="pool", accepted="the condition itself, or " + " | ".join(
                                f"{p} (condition {c})" for p, c in UNKNOWN_POOLS.items()))
        key = (rec["pair_id"], rec["condition"])
        if key in seen:
            raise DataError(f"duplicate condition {rec['condition']!r} for pair_id {rec['pair_id']!r} "
                            f"(first at line {seen[key]})", path=real, line=line, field="condition")
        seen[key] = line
        problem = None
        if not rec["chosen"].strip() or not rec["rejected"].strip():
            problem = "empty_completion"
        elif rec["chosen"] == rec["rejected"]:
            problem = "identical_chosen_rejected"
        if problem:
            if on_invalid == "error":
                raise DataError(problem.replace("_", " "), path=real, line=line,
                                field="chosen" if problem.startswith("identical") else "chosen/rejected")
            dropped[problem] += 1
            continue
        rec = dict(rec)
        rec.setdefault("item_id", rec["pair_id"])
        rec["pool"] = pool
        lines[len(rows)] = line
        rows.append(rec)
    if require_quartets:
        conds = defaultdict(set)
        for r in rows:
            if r["pool"] in CONDITIONS:
                conds[r["pair_id"]].add(r["condition"])
        incomplete = {pid for pid, cs in conds.items() if len(cs) != len(CONDITIONS)}
        if incomplete:
            if on_invalid == "error":
                pid = sorted(incomplete)[0]
                first = next(i for i, r in enumerate(rows) if r["pair_id"] == pid)
                raise DataError(f"quartet {pid!r} lacks conditions {sorted(set(CONDITIONS) - conds[pid])}",
                                path=real, line=lines[first], field="condition")
            dropped["incomplete_quartet_rows"] += sum(1 for r in rows if r["pair_id"] in incomplete)
            rows = [r for r in rows if r["pair_id"] not in incomplete or r["pool"] in UNKNOWN_POOLS]
    if not rows:
        raise DataError(f"no usable pairs left after validation (dropped: {dict(dropped)})", path=real)
    stats = {"path": real, "rows": len(rows), "dropped": dict(dropped),
             "per_condition": dict(Counter(r["condition"] for r in rows)),
             "per_pool": dict(Counter(r["pool"] for r in rows))}
    return PairSet(rows=rows, stats=stats)


def unmatch_pairs(pairs: PairSet, *, seed: int) -> PairSet:
    """The unmatched-pairs ablation: every quartet keeps only one randomly chosen condition, so no
    (r+, r-) pair is seen under more than one context (the matched construction is what SCOPE adds)."""
    rng = np.random.default_rng(seed)
    by_pid = defaultdict(list)
    rows = []
    for r in pairs.rows:
        if r.get("pool") in UNKNOWN_POOLS:
            rows.append(r)  # one context per pair already
        else:
            by_pid[r["pair_id"]].append(r)
    for pid in sorted(by_pid):
        group = sorted(by_pid[pid], key=lambda r: r["condition"])
        rows.append(group[int(rng.integers(len(group)))])
    return PairSet(rows=rows, stats={**pairs.stats, "unmatched": True, "rows": len(rows)})


MAX_CHARS_PER_TOKEN = 16  # tokens average ~4 characters; a text this much longer than its budget is cut first


def bound_characters(row: dict, *, max_prompt_len: int, max_completion_len: int, keep_start: bool) -> dict:
    """The row with its prompt cut to ``max_prompt_len * MAX_CHARS_PER_TOKEN`` characters (and each
    completion to ``max_completion_len * ...``) before anything tokenises it: a 20 MB prompt would otherwise
    be tokenised in full (minutes, gigabytes) only to be truncated. The prompt keeps its end (its start with
    ``keep_start``), completions their start; token-level truncation then applies as before."""
    limits = {"prompt": max_prompt_len, "chosen": max_completion_len, "rejected": max_completion_len}
    out = row
    for key, tokens in limits.items():
        text, n = row.get(key), tokens * MAX_CHARS_PER_TOKEN
        if isinstance(text, str) and len(text) > n:
            out = dict(out) if out is row else out
            out[key] = text[:n] if key != "prompt" or keep_start else text[-n:]
    return out


def apply_length_policy(pairs: PairSet, tokenizer, *, max_prompt_len: int, max_completion_len: int,
                        truncation: str, prompt_settings=None, on_invalid: str = "drop") -> PairSet:
    """:func:`truncation_policy` for preference pairs (prompts over ``max_prompt_len`` or a completion over
    ``max_completion_len`` tokens); the counts land in ``pairs.stats['truncated']``. A kept pair whose chosen
    and rejected are the same tokens once cut to ``max_completion_len`` (they differ only past it) teaches
    nothing and its DPO margin is 0 by construction: it is dropped and counted in
    ``pairs.stats['dropped']['identical_after_truncation']``, or a DataError naming it when ``on_invalid ==
    'error'`` (``data.on_invalid``)."""
    long = Counter()
    identical: set[tuple[str, str]] = set()

    def measure(r):
        r = bound_characters(r, max_prompt_len=max_prompt_len, max_completion_len=max_completion_len,
                             keep_start=truncation == "keep_start")
        b = build_pair_batch(tokenizer, [r["prompt"]] * 2, [r["chosen"], r["rejected"]],
                             max_prompt_len=max_prompt_len, max_completion_len=max_completion_len,
                             truncation="keep_end", prompt_settings=prompt_settings)
        p_long, c_long = bool(b.prompt_truncated.any()), bool(b.completion_truncated.any())
        long.update(prompts=p_long, completions=c_long)
        # one prompt for both rows: rows of one length and equal tokens are equal completions
        same = b.completion_lengths[0] == b.completion_lengths[1] and bool((b.input_ids[0] == b.input_ids[1]).all())
        if c_long and same:
            identical.add((r["pair_id"], r["condition"]))
        over = None
        if p_long or c_long:
            over = (f"pair {r['pair_id']!r} ({r['condition']}) exceeds data.max_prompt_len={max_prompt_len} / "
                    f"data.max_completion_len={max_completion_len}", "prompt" if p_long else "chosen/rejected")
        return {**r, "num_tokens": int(b.attention_mask.sum(dim=1).max())}, over  # num_tokens: padded row width

    keep, dropped = truncation_policy(pairs.rows, measure, truncation=truncation, path=pairs.stats.get("path"),
                                      what=f"pair (max_prompt_len={max_prompt_len}, max_completion_len={max_completion_len})")
    same = [r for r in keep if (r["pair_id"], r["condition"]) in identical]
    if same and on_invalid == "error":
        first = same[0]
        raise DataError(f"pair {first['pair_id']!r} ({first['condition']}): chosen and rejected are identical once "
                        f"cut to data.max_completion_len={max_completion_len} tokens", path=pairs.stats.get("path"),
                        field="chosen/rejected", accepted="pairs that differ within data.max_completion_len tokens "
                                                          "(raise it, or set data.on_invalid=drop)")
    keep = [r for r in keep if (r["pair_id"], r["condition"]) not in identical]
    if not keep:
        raise DataError(f"no usable pairs left: every kept pair's chosen and rejected are identical once cut to "
                        f"data.max_completion_len={max_completion_len} tokens", path=pairs.stats.get("path"))
    stats = dict(pairs.stats)
    if same:
        stats["dropped"] = {**stats.get("dropped", {}), "identical_after_truncation": len(same)}
    stats["truncated"] = {"prompts_over_max": long["prompts"], "completions_over_max": long["completions"],
                          "policy": truncation, "dropped": dropped}
    stats["rows"] = len(keep)
    stats["per_condition"] = dict(Counter(r["condition"] for r in keep))
    stats["per_pool"] = dict(Counter(r.get("pool", r["condition"]) for r in keep))
    return PairSet(rows=keep, stats=stats)
