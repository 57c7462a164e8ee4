"""Readable, filesystem-safe, distinct job names built from the swept values only
(``beta-0.05__lambda_m-0.25``), so extending a sweep later keeps the names of the jobs already there."""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from launch.sweeper.jobs import SweepError

MAX_NAME_LEN = 100


def _short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Last dotted component of each key, or the whole key where two keys share a last component."""
    last = {k: k.lstrip("+~").rsplit(".", 1)[-1] for k in keys}
    counts: dict[str, int] = {}
    for v in last.values():
        counts[v] = counts.get(v, 0) + 1
    return {k: (last[k] if counts[last[k]] == 1 else k.lstrip("+~")) for k in keys}


def _safe(text: str) -> str:
    """Filesystem-safe token: letters, digits and ``._+-``; Hydra quotes are dropped."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    out = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")
    return out or "empty"


def _digest(parts: Sequence[str], n: int = 8) -> str:
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:n]


def job_name(swept: dict[str, str], short: dict[str, str]) -> str:
    """Readable, filesystem-safe name from the swept values, e.g. ``beta-0.05__lambda_m-0.25``."""
    if not swept:
        return "base"
    name = "__".join(f"{_safe(short[k])}-{_safe(v)}" for k, v in swept.items())
    if len(name) > MAX_NAME_LEN:
        name = name[: MAX_NAME_LEN - 9].rstrip("-_.") + "-" + _digest([f"{k}={v}" for k, v in swept.items()])
    return name


def job_names(keys: Sequence[str], combos: Sequence[dict[str, str]]) -> list[str]:
    """One distinct filesystem-safe name per combination of the swept ``keys``' values."""
    short = _short_keys(keys)
    names = [job_name(c, short) for c in combos]
    groups: dict[str, list[int]] = {}
    for i, n in enumerate(names):
        groups.setdefault(n, []).append(i)
    for n, idx in groups.items():
        if len(idx) > 1:
            for i in idx:
                names[i] = f"{n[: MAX_NAME_LEN - 9]}-{_digest([f'{k}={v}' for k, v in combos[i].items()])}"
    if len(set(names)) != len(names):  # pragma: no cover - would need a sha1 prefix collision
        raise SweepError("could not give the jobs distinct names; shorten or simplify the swept values")
    return names
