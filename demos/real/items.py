"""Which items the real demo's numbers are on (issue 54): the facts set each demo builds (``real.facts_size``), the
fixed, seeded, relation-stratified sample of the held-out items (``real.heldout_items``) and the knowledge estimate
each label comes from (``real.mine_knowledge`` for mining; ``real.stages.knowledge`` for the metrics).

The sample (stage ``<prefix>_sample``, :func:`sample_step`): the held-out file's items grouped by ``relation``; each
relation gets its share of ``n`` in proportion to its items (largest remainders; ties by relation name), drawn from
its item ids (sorted) with ``random.Random("<seed>|heldout_sample|<relation>")``; every row of a drawn item is kept,
in file order. The same seed, file and size give the same items on any machine.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Callable
from selectrust.core.errors import ConfigError
from selectrust.core.io import read_records, write_jsonl_atomic

SAMPLE_FILE = "items.jsonl"  # in stages/<prefix>_sample/


def facts_size(cfg) -> str:
    """The facts set a run builds: ``real.facts_size``, or its demo's own (``demos.config.DEMOS``)."""
    from ..config import DEMOS  # deferred: imports omegaconf

    chosen = cfg.real.facts_size
    return str(chosen) if chosen is not None else DEMOS[cfg.demo].facts_size


def heldout_items(cfg) -> int | None:
    """The held-out sample's size a run evaluates: ``real.heldout_items`` (0: every item, None), or its demo's own
    (``demos.config.DEMOS``' ``heldout_items``: None, every item, in both real demos)."""
    from ..config import DEMOS  # deferred: imports omegaconf

    chosen = cfg.real.heldout_items
    n = DEMOS[cfg.demo].heldout_items if chosen is None else int(chosen)
    return n or None


def allocate(counts: dict[str, int], n: int) -> dict[str, int]:
    """``n`` items shared over the relations in proportion to ``counts`` (largest remainders, ties by relation
    name); all of them when ``n`` is at least their total."""
    total = sum(counts.values())
    if n >= total:
        return dict(counts)
    quota = {r: n * c / total for r, c in counts.items()}
    out = {r: int(q) for r, q in quota.items()}
    for r in sorted(counts, key=lambda r: (-(quota[r] - out[r]), r))[:n - sum(out.values())]:
        out[r] += 1
    return out


def stratified_sample(rows: list[dict], n: int, seed: int) -> tuple[list[dict], dict]:
    """The rows of ``n`` items drawn per relation (module docstring) and ``{"from", "items", "per_relation",
    "seed"}``."""
    if n < 1:
        raise ValueError(f"real.heldout_items must be >= 1, got {n}")
    relation = {}
    for r in rows:
        relation.setdefault(r["item_id"], r.get("relation", "<none>"))
    counts = Counter(relation.values())
    share = allocate(dict(counts), n)
    keep = set()
    for rel in sorted(share):
        ids = sorted(i for i, r in relation.items() if r == rel)
        keep.update(random.Random(f"{seed}|heldout_sample|{rel}").sample(ids, share[rel]))
    info = {"from": len(relation), "items": len(keep), "per_relation": {r: share[r] for r in sorted(share)},
            "seed": seed}
    return [r for r in rows if r["item_id"] in keep], info


def sample_step(seed: int, n: int) -> Callable[[Path, dict], dict]:
    """Stage ``<prefix>_sample``: the sample of ``declared["rows"]`` (the held-out file) written to
    ``<stage>/items.jsonl``; returns :func:`stratified_sample`'s counts."""
    def step(out: Path, declared: dict) -> dict:
        rows, info = stratified_sample([row for _, row in read_records(declared["rows"])], n, seed)
        write_jsonl_atomic(Path(out) / SAMPLE_FILE, rows)
        return info

    return step


def mine_knowledge_overrides(cfg) -> list[str]:
    """The ``knowledge.*`` overrides ``real.mine_knowledge`` adds to the ``mine`` stage (after
    ``real.stages.knowledge``): none for ``greedy``; for ``sampled``, ``k`` samples at ``temperature`` scored by their
    accuracy, known at ``known_min / k`` and unknown at ``unknown_max / k`` (exactly "at least known_min right" and
    "at most unknown_max right"). A ConfigError in one line for settings that cannot be that rule."""
    mk = cfg.real.mine_knowledge
    if str(mk.estimate) == "greedy":
        return []
    if mk.k < 4:
        raise ConfigError(f"real.mine_knowledge.k={mk.k}: the sampled estimate takes at least 4 answers")
    if not 0 <= mk.unknown_max < mk.known_min <= mk.k:
        raise ConfigError(f"real.mine_knowledge: needs 0 <= unknown_max < known_min <= k, got unknown_max="
                          f"{mk.unknown_max}, known_min={mk.known_min}, k={mk.k}")
    if mk.temperature <= 0:
        raise ConfigError(f"real.mine_knowledge.temperature={mk.temperature} must be > 0 (the answers are sampled)")
    return [f"knowledge.k={mk.k}", f"knowledge.temperature={mk.temperature}", "knowledge.score=accuracy",
            f"knowledge.known_threshold={mk.known_min / mk.k!r}",
            f"knowledge.unknown_threshold={mk.unknown_max / mk.k!r}"]


def knowledge_labels(cfg) -> dict:
    """``summary.json``'s ``knowledge_labels``: which estimate each number's labels come from. The metrics
    (``unknown_correct_accuracy``, ``by_knowledge``) of every arm use the base's estimate on the evaluated items
    (``real.stages.knowledge``), the same for every arm and run; mining (its pools, the GRPO prompts' sides) uses
    ``real.mine_knowledge``'s."""
    ev = ["knowledge.enabled=true", *cfg.real.stages.knowledge]
    mk = cfg.real.mine_knowledge
    mining = {"estimate": str(mk.estimate), "overrides": [*ev, *mine_knowledge_overrides(cfg)]}
    if str(mk.estimate) == "sampled":
        mining["rule"] = (f"known when >= {mk.known_min} of {mk.k} clean answers sampled at temperature "
                          f"{mk.temperature} are right, unknown when <= {mk.unknown_max}, else uncertain")
    else:
        mining["rule"] = "the evaluation's estimate (real.stages.knowledge)"
    return {"metrics": {"stages": "eval_base / transfer_base (their knowledge.jsonl, on the evaluated items)",
                        "overrides": ev},
            "mining": mining}
