"""Training data: validated pair quartets, SFT examples, and the samplers.

Pair files (written by ``recipes/mine_pairs.py``) hold one row per (quartet, condition)::

    {"pair_id": "q17", "item_id": "gsm-17", "condition": "misleading", "prompt": "...",
     "chosen": "...", "rejected": "...", ...provenance fields}

SFT files hold ``{"messages": [{"role": ..., "content": ...}, ...]}`` (every assistant turn is a
target in multi-turn mode, the last one otherwise) or ``{"prompt": ..., "completion": ...}``.

Every loader takes a data path through :func:`resolve_data_path` (:mod:`selectrust.core.data_sources`): a
path ``<scheme>:<rest>`` of a registered data source resolves to the file that source provides.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from selectrust.core.io import DataError, read_records
from selectrust.conditions import MIST_CONDITIONS as CONDITIONS, SCOPE_POOLS as POOLS, UNKNOWN_POOLS
from selectrust.conditions import condition_mass, pool_mass  # noqa: F401 - the samplers' masses, imported from here too

from selectrust.core.data_sources import resolve_data_path


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


# -- SFT examples ---------------------------------------------------------------------------------
def load_sft_examples(path: str) -> list[dict]:
    """Validate SFT rows and normalise them to ``{"item_id", "messages"}``."""
    real = resolve_data_path(path)
    out = []
    for line, rec in read_records(real):
        if "messages" in rec:
            msgs = rec["messages"]
            if not isinstance(msgs, list) or not msgs:
                raise DataError("expected a non-empty list of {role, content}", path=real, line=line, field="messages")
            for j, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                    raise DataError(f"turn {j} must be an object with string role and content", path=real,
                                    line=line, field=f"messages[{j}]")
            if not any(m["role"] == "assistant" for m in msgs):
                raise DataError("no assistant turn to train on", path=real, line=line, field="messages")
        elif "prompt" in rec and "completion" in rec:
            if not str(rec["completion"]).strip():
                raise DataError("empty completion", path=real, line=line, field="completion")
            msgs = [{"role": "user", "content": str(rec["prompt"])},
                    {"role": "assistant", "content": str(rec["completion"])}]
        else:
            raise DataError("missing field", path=real, line=line, field="messages",
                            accepted="{messages: [...]} or {prompt, completion}")
        out.append({"item_id": str(rec.get("item_id", f"line{line}")), "messages": msgs})
    return out


# -- samplers -------------------------------------------------------------------------------------
def length_grouped_order(lengths: Sequence[int], *, block: int, blocks_per_chunk: int, rng,
                         within_window: bool = True) -> np.ndarray:
    """Length-grouped order of a sequence of draws: a permutation of ``range(len(lengths))``.

    The draws are cut into windows of ``block * blocks_per_chunk`` (``block`` = the global micro-batch
    size); each window is sorted by length (stable) and cut into blocks of ``block``, and the blocks are
    shuffled with ``rng``: within their window (each window keeps exactly its draws, so a run that stops
    mid-epoch makes the same draws as without grouping), or with ``within_window=False`` across all
    windows (SFT's original scheme). The multiset of draws is unchanged (so is every sampling mass), each
    micro-batch holds draws of similar length, and the result is a pure function of the inputs and the
    RNG state: seeded, and the same on every rank. The one grouping routine of SFT, DPO and (later)
    distillation batches."""
    lengths = np.asarray(lengths)
    window = block * blocks_per_chunk
    blocks, out = [], []
    for start in range(0, len(lengths), window):
        part = np.arange(start, min(start + window, len(lengths)))
        part = part[np.argsort(lengths[part], kind="stable")]
        blocks += [part[i:i + block] for i in range(0, len(part), block)]
        if within_window:
            out += [blocks[i] for i in rng.permutation(len(blocks))]
            blocks = []
    out += [blocks[i] for i in rng.permutation(len(blocks))] if blocks else []
    return np.concatenate(out) if out else np.arange(0)


def check_pool_mass(pools, mass: dict[str, float]) -> None:
    """Every pool with positive mass must hold pairs (``pools``: anything with ``pool in pools`` and
    ``len(pools[pool])``); run before any model loads."""
    for c, m in mass.items():
        if m > 0 and not pools.get(c):
            raise DataError(f"pool {c!r} has sampling mass {m:g} but the data has no {c} pairs"
                            + (" (mine with knowledge.enabled=true)" if c in UNKNOWN_POOLS else ""))


class ConditionSampler:
    """Draws pair indices with the configured mass over condition pools.

    ``mode='sample'`` (the paper): each draw picks a condition with probability ``mass[c]`` and then
    the next pair of that pool (pools are reshuffled every time they are exhausted).
    ``mode='loss'``: a uniform shuffle of all rows; each row carries weight ``mass[c] / (n_c / N)`` so
    the expected loss equals Σ_c mass[c] L_c. An epoch is N = (number of rows) draws either way.

    The draw sequence of epoch e is a pure function of (seed, e), so the state is just
    ``(epoch, position)``: exact resume needs no RNG state.

    With ``lengths`` (one per row) and ``block`` (the global micro-batch size), each epoch's draws are
    regrouped by :func:`length_grouped_order` (windows of ``blocks_per_chunk`` micro-batches sorted by
    length, cut, and the micro-batches shuffled): the same draws, hence the same per-condition mass.
    """

    def __init__(self, conditions: Sequence[str], mass: dict[str, float], *, seed: int, mode: str = "sample",
                 lengths: Sequence[int] | None = None, block: int = 1, blocks_per_chunk: int = 16):
        if lengths is not None and len(lengths) != len(conditions):
            raise ValueError(f"lengths has {len(lengths)} entries for {len(conditions)} rows")
        self.lengths = None if lengths is None else np.asarray(lengths)
        self.block = block
        self.blocks_per_chunk = blocks_per_chunk
        self.conditions = list(conditions)
        self.mass = dict(mass)
        self.seed = seed
        self.mode = mode
        self.pools: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(self.conditions):
            self.pools[c].append(i)
        check_pool_mass(self.pools, self.mass)
        self.n = len(self.conditions)
        self.epoch = 0
        self.position = 0
        self._plan: list[tuple[int, float]] | None = None

    def _epoch_plan(self, epoch: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng([self.seed, epoch])
        plan = self._draw_plan(rng)
        if self.lengths is not None and self.block > 1:
            order = length_grouped_order(self.lengths[[i for i, _ in plan]], block=self.block,
                                         blocks_per_chunk=self.blocks_per_chunk, rng=rng)
            plan = [plan[k] for k in order]
        return plan

    def _draw_plan(self, rng) -> list[tuple[int, float]]:
        if self.mode == "loss":
            counts = {c: len(ix) for c, ix in self.pools.items()}
            weight = {c: (self.mass.get(c, 0.0) / (counts[c] / self.n)) if counts[c] else 0.0 for c in counts}
            order = rng.permutation(self.n)
            return [(int(i), weight[self.conditions[i]]) for i in order if weight[self.conditions[i]] > 0]
        names = [c for c in sorted(self.mass) if self.mass[c] > 0]
        p = np.array([self.mass[c] for c in names], dtype=float)
        picks = rng.choice(len(names), size=self.n, p=p / p.sum())
        cursors = {c: 0 for c in names}
        perms = {c: list(rng.permutation(self.pools[c])) for c in names}
        plan = []
        for k in picks:
            c = names[k]
            if cursors[c] == len(perms[c]):
                perms[c] = list(rng.permutation(self.pools[c]))
                cursors[c] = 0
            plan.append((int(perms[c][cursors[c]]), 1.0))
            cursors[c] += 1
        return plan

    def draw(self, k: int) -> list[tuple[int, float]]:
        """The next ``k`` (row index, weight) draws; crossing an epoch end increments ``epoch``."""
        out = []
        while len(out) < k:
            if self._plan is None:
                self._plan = self._epoch_plan(self.epoch)
            take = self._plan[self.position:self.position + (k - len(out))]
            out.extend(take)
            self.position += len(take)
            if self.position >= len(self._plan):
                self.epoch += 1
                self.position = 0
                self._plan = None
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._plan = None


class ShuffleSampler(ConditionSampler):
    """Uniform reshuffle each epoch (SFT): the condition sampler with one pool and full mass.

    With ``lengths`` (one per example) and ``block`` (the global micro-batch size), each epoch's
    permutation is cut into chunks of ``block * blocks_per_chunk`` examples, each chunk is sorted by
    length and split into blocks, and the blocks are shuffled: micro-batches hold examples of similar
    length (little padding) while their order stays random. Still a pure function of (seed, epoch)."""

    def __init__(self, n: int, *, seed: int, lengths: Sequence[int] | None = None, block: int = 1,
                 blocks_per_chunk: int = 16):
        super().__init__(["all"] * n, {"all": 1.0}, seed=seed, mode="sample", lengths=lengths, block=block,
                         blocks_per_chunk=blocks_per_chunk)

    def _epoch_plan(self, epoch: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.n)
        if self.lengths is not None and self.block > 1:
            order = order[length_grouped_order(self.lengths[order], block=self.block, within_window=False,
                                               blocks_per_chunk=self.blocks_per_chunk, rng=rng)]
        return [(int(i), 1.0) for i in order]


class SamplerSource:
    """Batch source over a dataset: draws a *global* micro-batch (``batch_size * world``) and keeps
    this rank's slice, so a 2-rank run sees exactly the examples of a 1-rank run with twice the batch."""

    def __init__(self, sampler: ConditionSampler, collate, *, batch_size: int, rank: int = 0, world: int = 1):
        self.sampler = sampler
        self.collate = collate
        self.batch_size = batch_size
        self.rank = rank
        self.world = world

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_microbatch(self) -> dict:
        draws = self.sampler.draw(self.batch_size * self.world)
        mine = draws[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        return self.collate([i for i, _ in mine], [w for _, w in mine])

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


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


def truncation_policy(rows: Sequence, measure: Callable[[Any], tuple[Any, tuple[str, str] | None]], *,
                      truncation: str, what: str, path: str | None = None) -> tuple[list, int]:
    """``data.truncation`` over ``rows``, once, up front (the one length policy of every trainer).
    ``measure(row) -> (row, over)``: the row to keep (possibly bounded or annotated) and ``None`` when it
    fits, else ``(message, field)`` describing the excess. ``keep_end``/``keep_start`` keep over-long rows
    (the collator cuts them), ``drop`` removes them, ``error`` raises a DataError naming the first one.
    Returns the kept rows and how many were dropped; no row left is an error naming ``what``."""
    keep, dropped = [], 0
    for row in rows:
        row, over = measure(row)
        if over is not None:
            if truncation == "error":
                raise DataError(over[0], path=path, field=over[1], accepted="set data.truncation to keep_end, keep_start or drop")
            if truncation == "drop":
                dropped += 1
                continue
        keep.append(row)
    if not keep:
        raise DataError(f"every {what} exceeds the length limits", path=path)
    return keep, dropped


def apply_length_policy(pairs: PairSet, tokenizer, *, max_prompt_len: int, max_completion_len: int,
                        truncation: str, prompt_settings=None, on_invalid: str = "drop") -> PairSet:
    """:func:`truncation_policy` for preference pairs (prompts over ``max_prompt_len`` or a completion over
    ``max_completion_len`` tokens); the counts land in ``pairs.stats['truncated']``. A kept pair whose chosen
    and rejected are the same tokens once cut to ``max_completion_len`` (they differ only past it) teaches
    nothing and its DPO margin is 0 by construction: it is dropped and counted in
    ``pairs.stats['dropped']['identical_after_truncation']``, or a DataError naming it when ``on_invalid ==
    'error'`` (``data.on_invalid``)."""
    from trainer.logprobs.logprobs import build_pair_batch

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


def keep_whole_items(rows: list[dict], max_rows: int | None) -> list[dict]:
    """At most ``max_rows`` rows, whole items only, in file order (``None``: all)."""
    if max_rows is not None and len(rows) > max_rows:
        keep_items: list[str] = []
        count = 0
        for r in rows:  # whole items only, in file order
            if r["item_id"] not in keep_items:
                if count >= max_rows:
                    break
                keep_items.append(r["item_id"])
            count += 1
        keep = set(keep_items)
        rows = [r for r in rows if r["item_id"] in keep]
    return rows
