"""Taste-Bench metrics (docs/taste.md#scoring): paired-order accuracy of decision forks.

Each item is asked twice, ``seeded`` (stored order) and ``reversed``; ``correct`` is per answer
(unparsable = wrong). With ``c_s, c_r`` the two correctness bits of an item and N items:

- ``seeded = mean c_s``, ``reversed = mean c_r``;
- ``strict = #{c_s and c_r} / N`` (random guessing 25%, always-same-slot 0%);
- ``mean = (sum c_s + sum c_r) / 2N``;
- ``average = ½ (strict over engineering items + strict over research items)``, the headline. When
  only one domain is present it is that domain's strict accuracy (mean over present domains);
- paired outcomes ``CC, CW, WC, WW`` = (seeded, reversed) correct/wrong counts;
- position choices ``seeded_A, seeded_B, reversed_A, reversed_B`` count the parsed letter.

The same statistics are given per cell ``<construction>_<domain>``, per domain and per horizon.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...metrics.common import check_rows, group_by_item, require_complete, slice_key
from selectrust.conditions import TASTE_CONDITIONS
DOMAINS = ("engineering", "research")


def _choice(row: dict) -> str | None:
    c = row.get("choice", row.get("parsed"))
    return c if c in ("A", "B") else None


def pair_stats(c_s: np.ndarray, c_r: np.ndarray, choice_s: Sequence[str | None],
               choice_r: Sequence[str | None]) -> dict[str, Any]:
    """Statistics of N paired items. ``c_s, c_r``: ``(N,)`` bool; ``choice_*``: N letters or None."""
    n = int(c_s.size)
    outcomes = {"CC": int((c_s & c_r).sum()), "CW": int((c_s & ~c_r).sum()),
                "WC": int((~c_s & c_r).sum()), "WW": int((~c_s & ~c_r).sum())}
    return {
        "n": n,
        "seeded": float(c_s.mean()),
        "reversed": float(c_r.mean()),
        "strict": outcomes["CC"] / n,
        "mean": float((c_s.sum() + c_r.sum()) / (2 * n)),
        "seeded_correct": int(c_s.sum()),
        "reversed_correct": int(c_r.sum()),
        "paired_outcomes": outcomes,
        "position_choices": {
            "seeded_A": sum(c == "A" for c in choice_s), "seeded_B": sum(c == "B" for c in choice_s),
            "reversed_A": sum(c == "A" for c in choice_r), "reversed_B": sum(c == "B" for c in choice_r),
        },
    }


def taste_metrics(item_scores: Sequence[dict]) -> dict[str, Any]:
    """The Taste part of ``metrics.json``.

    Keys: ``seeded, reversed, strict, mean, average, n_items, seeded_correct, reversed_correct,
    paired_outcomes.{CC,CW,WC,WW}, position_choices.{seeded_A,seeded_B,reversed_A,reversed_B},
    unparsed.{seeded,reversed}``, and ``per_cell.<construction>_<domain>``, ``per_domain.<domain>``,
    ``per_horizon.<horizon>`` (when any row has a horizon; missing = ``"<missing>"``) each with
    ``n, seeded, reversed, strict, mean, seeded_correct, reversed_correct, paired_outcomes,
    position_choices``.
    """
    check_rows(item_scores, "taste", required=("construction", "domain"))
    items = group_by_item(item_scores, "taste", TASTE_CONDITIONS)
    require_complete(items, TASTE_CONDITIONS, "taste")
    ids = list(items)
    for item_id in ids:
        s, r = items[item_id]["seeded"], items[item_id]["reversed"]
        for f in ("construction", "domain", "horizon"):
            if s.get(f) != r.get(f):
                raise ValueError(f"taste: item {item_id!r} has {f}={s.get(f)!r} when seeded but "
                                 f"{r.get(f)!r} when reversed; both presentations share it")
    c_s = np.array([bool(items[i]["seeded"]["correct"]) for i in ids])
    c_r = np.array([bool(items[i]["reversed"]["correct"]) for i in ids])
    ch_s = [_choice(items[i]["seeded"]) for i in ids]
    ch_r = [_choice(items[i]["reversed"]) for i in ids]

    def grouped(key_of) -> dict[str, dict[str, Any]]:
        keys = [key_of(items[i]["seeded"]) for i in ids]
        out = {}
        for k in sorted(set(keys)):
            m = np.array([x == k for x in keys])
            out[k] = pair_stats(c_s[m], c_r[m], [c for c, t in zip(ch_s, m) if t], [c for c, t in zip(ch_r, m) if t])
        return out

    out = pair_stats(c_s, c_r, ch_s, ch_r)
    out["n_items"] = out.pop("n")
    per_domain = grouped(lambda row: str(row["domain"]))
    out["average"] = float(np.mean([per_domain[d]["strict"] for d in per_domain]))
    out["per_cell"] = grouped(lambda row: f"{row['construction']}_{row['domain']}")
    out["per_domain"] = per_domain
    if any(items[i]["seeded"].get("horizon") is not None for i in ids):
        out["per_horizon"] = grouped(lambda row: slice_key(row.get("horizon")))
    out["unparsed"] = {"seeded": sum(c is None for c in ch_s), "reversed": sum(c is None for c in ch_r)}
    return out
