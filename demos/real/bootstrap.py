"""The two-level bootstrap behind the decision rule (:mod:`demos.real.decision`) and NQ-Swap's question-clustered
interval (:mod:`demos.real.pooled_nq_swap`): seeds drawn with replacement, then items, one item draw shared by every
seed when the seeds evaluated the same items (issue 60). Numpy only, so the pooling modules can use it."""

from __future__ import annotations

import numpy as np


def shared_items(ids: dict[int, list[str]]) -> bool:
    """Whether every seed evaluated the same items (then they are crossed with the seeds: one draw for all)."""
    first = sorted(next(iter(ids.values())))
    return all(sorted(v) == first for v in ids.values())


def aligned(ids: dict[int, list[str]], per_seed: dict[int, dict[str, np.ndarray]]) -> dict[int, dict[str, np.ndarray]]:
    """``per_seed`` with every seed's rows in the first seed's item order (the items being shared)."""
    order = next(iter(ids.values()))
    out = {}
    for s, feats in per_seed.items():
        where = {i: j for j, i in enumerate(ids[s])}
        idx = [where[i] for i in order]
        out[s] = {a: f[idx] for a, f in feats.items()}
    return out


def two_level_sums(ids: dict[int, list[str]], per_seed: dict[int, dict[str, np.ndarray]], arms: list[str], *,
                   n_boot: int, boot_seed: int, resample_seeds: bool = True) -> dict[str, np.ndarray]:
    """Each arm's feature sums over ``n_boot`` replicates, ``(n_boot, F)``: seeds drawn with replacement (or, with
    ``resample_seeds`` False, every seed once: the item bootstrap clustered by item), then the items (one draw for
    every seed when they are shared, :func:`shared_items`; else within each seed). Every arm shares the draws."""
    rng = np.random.default_rng(boot_seed)
    seeds = sorted(per_seed)
    n_seeds = len(seeds)
    mult = (rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=n_boot) if resample_seeds
            else np.ones((n_boot, n_seeds), dtype=np.int64))  # (n_boot, S): each seed's draws
    out = {}
    if shared_items(ids):
        per = aligned(ids, per_seed)
        n = len(next(iter(ids.values())))
        w = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)  # (n_boot, n): one item draw for every seed
        for a in arms:
            x = np.stack([per[s][a] for s in seeds])  # (S, n, F)
            out[a] = np.einsum("bs,bn,snf->bf", mult, w, x, optimize=True).astype(float)
        return out
    weights = []
    for s in seeds:
        n = len(ids[s])
        weights.append(rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot))
    for a in arms:
        out[a] = sum(mult[:, [j]] * (weights[j] @ per_seed[s][a]) for j, s in enumerate(seeds)).astype(float)
    return out
