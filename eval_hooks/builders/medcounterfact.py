"""Build MedCounterfact items (docs/medcounterfact.md#substitutions) from MedEvidence (``medevidence_abstract.jsonl``).

Keeps the questions labelled higher / lower / no difference (203 of 284), extracts the intervention
T from "... when comparing T to C?", and writes one ``original`` item plus one item per counterfactual
category (``nonce``, ``medical``, ``non_medical``, ``toxic``) in which every occurrence of T in the
question and the evidence is replaced by a term T' drawn (seeded, per question and category) from the
small built-in lists below.

How this departs from the paper: the paper generated substitutions with an LLM and verified that the
RCT's intervention really changed; here substitution is surface-level (T, T without its parenthesised
abbreviation, the abbreviation itself, and a singular form of a plural T). Abstracts often name the
intervention differently from the question, so each item records ``evidence_substitutions`` (how many
replacements the evidence received); filter on it (``> 0``) for items whose evidence was changed too.
No lethal-dose notes are appended to TOXIC items.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from ..io import DataError, read_records, write_jsonl_atomic

TERMS: dict[str, tuple[str, ...]] = {
    # made-up words: not English, no medical meaning
    "nonce": ("flumbrotil", "zanquerate", "plovastrine", "drementol", "quibraxol", "velmorane", "trastovine",
              "gorplenide", "snarvitol", "brendoquine", "mofrelax", "cravitune"),
    # real treatments for unrelated conditions
    "medical": ("levothyroxine", "latanoprost eye drops", "tamsulosin", "isotretinoin", "allopurinol",
                "sumatriptan", "finasteride", "montelukast", "alendronate", "topical minoxidil",
                "salbutamol inhalation", "orthodontic braces"),
    # everyday objects
    "non_medical": ("garden hose", "tennis balls", "stapler", "bubble wrap", "toaster", "colored pencils",
                    "doormat", "shoelaces", "rubber duck", "paper clips", "kitchen sponge", "coat hanger"),
    # illegal, dangerous or toxic substances
    "toxic": ("arsenic trioxide", "methanol", "sodium cyanide", "strychnine", "thallium sulfate", "paraquat",
              "carbon tetrachloride", "lead acetate", "mercury vapor", "ricin", "crystal methamphetamine",
              "ethylene glycol"),
}
CATEGORIES = ("original",) + tuple(TERMS)
KEEP_LABELS = {"higher": "Higher", "lower": "Lower", "no difference": "No Difference"}

_COMPARE = [re.compile(r"\bcompar(?:ing|ed|e)\s+(?P<t>.+?)\s+(?:to|with|versus|vs\.?)\s+(?P<c>.+?)\s*\??\s*$",
                       re.IGNORECASE | re.DOTALL),
            re.compile(r"\bcompar(?:ing|ed|e)\s+(?P<t>.+?)\s+and\s+(?P<c>.+?)\s*\??\s*$", re.IGNORECASE | re.DOTALL)]
_LEADING = re.compile(r"^(?:the\s+|following\s+)+", re.IGNORECASE)
_ABBREV = re.compile(r"^(?P<name>.+?)\s*\((?P<abbr>[^()]{1,15})\)$")


def extract_intervention(question: str) -> tuple[str, str] | None:
    """``(T, C)`` from "... when comparing T to C?" (also "with", "versus", "and"), or ``None``."""
    for pat in _COMPARE:
        m = pat.search(question)
        if m:
            t = _LEADING.sub("", m.group("t").strip()).strip(" ,")
            c = m.group("c").strip().rstrip("?").strip()
            if t:
                return t, c
    return None


def term_variants(term: str) -> tuple[list[str], list[str]]:
    """Surface forms of T to replace: (case-insensitive forms, case-sensitive abbreviations)."""
    forms, abbrevs = [term], []
    m = _ABBREV.match(term)
    if m:
        forms.append(m.group("name").strip())
        abbrevs.append(m.group("abbr").strip())
    for f in list(forms):
        if len(f) > 4 and f.endswith("s") and not f.endswith("ss"):
            forms.append(f[:-1])
    return sorted(set(forms), key=len, reverse=True), abbrevs


def substitute(text: str, term: str, new: str) -> tuple[str, int]:
    """Replace every occurrence of ``term`` (and its variants) in ``text`` by ``new``; return the count."""
    forms, abbrevs = term_variants(term)
    pats = [re.compile(r"(?<!\w)(?:" + "|".join(re.escape(f) for f in forms) + r")(?!\w)", re.IGNORECASE)]
    if abbrevs:
        pats.append(re.compile(r"(?<!\w)(?:" + "|".join(re.escape(a) for a in abbrevs) + r")(?!\w)"))
    total = 0
    for p in pats:
        text, n = p.subn(new, text)
        total += n
    return text, total


def _evidence(rec: dict) -> list[str]:
    sources = rec.get("sources") or {}
    ids = [str(i) for i in rec.get("relevant_sources") or []] or list(sources)
    out = []
    for i in ids:
        s = sources.get(i)
        content = s.get("content") if isinstance(s, dict) else s
        if isinstance(content, str) and content.strip():
            out.append(content.strip())
    return out


def build_items(records: Sequence[tuple[int, dict]], *, seed: int = 0, categories: Sequence[str] = CATEGORIES,
                path: str | Path | None = None) -> tuple[list[dict], dict]:
    """Med items (see ``eval_hooks/FORMATS.md``) and counts of what was kept and skipped."""
    for c in categories:
        if c not in CATEGORIES:
            raise DataError(f"unknown category {c!r}", field="categories", accepted=", ".join(CATEGORIES))
    items, stats = [], Counter()
    for line, rec in records:
        label = KEEP_LABELS.get(str(rec.get("answer", "")).strip().lower())
        if label is None:
            stats["dropped_label"] += 1
            continue
        q = rec.get("question")
        if not isinstance(q, str) or not q.strip():
            raise DataError("missing or empty question", path=path, line=line, field="question",
                            accepted="a non-empty string")
        evidence = _evidence(rec)
        if not evidence:
            raise DataError("no evidence text", path=path, line=line, field="sources",
                            accepted='{"<id>": {"content": "<abstract>"}} for the relevant_sources')
        parsed = extract_intervention(q)
        if parsed is None:
            stats["no_intervention"] += 1
            continue
        term, control = parsed
        qid = rec.get("question_id", line - 1)
        common = {"label": label, "term_original": term, "control": control, "question_id": qid,
                  "medical_specialty": rec.get("medical_specialty"), "source": "medevidence"}
        for cat in categories:
            if cat == "original":
                items.append({"item_id": f"med-{qid}-original", "question": q.strip(), "evidence": evidence,
                              "category": cat, "term_substituted": term, "evidence_substitutions": 0, **common})
                continue
            rng = random.Random(f"{seed}:{qid}:{cat}")
            choices = [t for t in TERMS[cat] if t.lower() not in (term.lower(), control.lower())]
            new = rng.choice(choices)
            q2, nq = substitute(q.strip(), term, new)
            if nq == 0:  # cannot happen when T came from the question; guard anyway
                stats["not_substituted"] += 1
                continue
            ev2, ne = [], 0
            for e in evidence:
                e2, n = substitute(e, term, new)
                ev2.append(e2)
                ne += n
            items.append({"item_id": f"med-{qid}-{cat}", "question": q2, "evidence": ev2, "category": cat,
                          "term_substituted": new, "evidence_substitutions": ne, **common})
        stats["questions"] += 1
    stats["items"] = len(items)
    stats.update({f"label_{v}": sum(1 for it in items if it["category"] == categories[0] and it["label"] == v)
                  for v in KEEP_LABELS.values()})
    return items, dict(stats)


def build_file(data: str | Path, out: str | Path, **kwargs) -> dict:
    items, stats = build_items(read_records(data), path=str(data), **kwargs)
    write_jsonl_atomic(out, items)
    stats["evidence_changed"] = sum(1 for it in items if it["category"] != "original" and it["evidence_substitutions"])
    stats["out"] = str(out)
    return stats
