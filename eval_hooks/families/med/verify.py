"""Independent verifier of a MedCounterfact substitution (deterministic, no model).

It shares no matching code with the substitution (``grammar``): texts are normalised here
(Unicode hyphens/dashes/spaces folded, case folded for names) and aliases are found by a plain
scan for each surface variant with word-boundary checks. An item passes when

1. ``T'`` occurs in the question and in the evidence (at least one abstract);
2. no alias of ``T`` (nor its hyphen/space, plural or possessive variants) remains anywhere;
3. every mention of the comparator ``C`` is unchanged (same count per text);
4. the label-bearing sentences of each abstract still exist (the multiset of their result
   fingerprints: numbers, p-values and effect words, is unchanged);
5. every ``T'`` at a sentence start is capitalised and every article before ``T'`` fits it.

:func:`verify` returns the list of failed checks (empty = verified).
"""

from __future__ import annotations

import re
from collections import Counter

_FOLD = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
                       "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2019": "'"})
_RESULT_WORDS = ("significant", "p <", "p =", "p<", "p=", "95% ci", "confidence interval", "differ", "odds ratio",
                 "relative risk", "hazard ratio", "reduc", "increas", "improv", "no effect")
_FINGERPRINT = re.compile(r"\d+(?:\.\d+)?|\bnot?\b|\bsignificant(?:ly)?\b|\bnon-?significant\b|\bhigher\b|\blower\b"
                          r"|\bgreater\b|\bless\b|\bfewer\b|\bmore\b|\breduc\w*|\bincreas\w*", re.IGNORECASE)


def fold(text: str) -> str:
    return text.translate(_FOLD)


def _variants(alias: str) -> list[str]:
    a = fold(alias).strip()
    base = {a, a.replace("-", " "), a.replace("-", ""), a.replace(" ", "-")}
    out = set()
    for b in base:
        out |= {b, b + "s", b + "es", b + "'s"}
        if b.endswith("s") and len(b) > 4:
            out.add(b[:-1])
    return sorted(out, key=len, reverse=True)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_-"


def find_all(text: str, alias: str, *, case_sensitive: bool) -> list[int]:
    """Start offsets of ``alias`` (any variant) in ``text`` as a whole word (hyphens join words)."""
    hay = fold(text) if case_sensitive else fold(text).lower()
    hits = set()
    for v in _variants(alias):
        needle = v if case_sensitive else v.lower()
        i = hay.find(needle)
        while i != -1:
            end = i + len(needle)
            if (i == 0 or not _is_word_char(hay[i - 1])) and (end == len(hay) or not _is_word_char(hay[end])):
                hits.add(i)
            i = hay.find(needle, i + 1)
    return sorted(hits)


def _case_sensitive(alias: str) -> bool:
    return " " not in alias and sum(c.isupper() for c in alias) >= 2


def label_fingerprints(abstract: str, ignore: list[str] = ()) -> Counter:
    """Result fingerprints of the sentences carrying a result (numbers and effect words, in order),
    with the mentions of ``ignore`` (the intervention's names) blanked first."""
    text = fold(abstract)
    for term in ignore:
        for i in find_all(text, term, case_sensitive=_case_sensitive(term)):
            text = text[:i] + "#" * len(term) + text[i + len(term):]
    out: Counter = Counter()
    for sent in re.split(r"(?<=[.!?])\s+", text):
        low = sent.lower()
        if any(w in low for w in _RESULT_WORDS):
            out[tuple(m.group(0).lower() for m in _FINGERPRINT.finditer(sent))] += 1
    return out


def _expected_article(word: str) -> str:
    w = word.lower()
    if re.match(r"(?:uni|use|usu|eu|one|once|ur[aeiou])", w):
        return "a"
    if re.match(r"(?:hour|honest|honou?r|heir)", w) or (w[:1] in "aeiou"):
        return "an"
    return "a"


def grammar_problems(text: str, new_term: str) -> list[str]:
    """Lowercase sentence starts and wrong articles at the mentions of ``new_term``."""
    problems = []
    t = fold(text)
    for i in find_all(t, new_term, case_sensitive=False):
        before = t[:i].rstrip()
        if (not before or before[-1] in ".!?\n") and t[i].islower():
            problems.append(f"lowercase sentence start {t[i:i + len(new_term)]!r}")
        m = re.search(r"(?:^|\s)(an?)\s*$", t[:i], re.IGNORECASE)
        if m and m.group(1).lower() != _expected_article(new_term):
            problems.append(f"wrong article {m.group(1)!r} before {new_term!r}")
    return problems


def _count_outside(text: str, term: str, within: list[str]) -> int:
    """Mentions of ``term`` that do not lie inside a mention of one of ``within``."""
    spans = []
    for w in within:
        lw = len(w)
        spans += [(i, i + lw + 3) for i in find_all(text, w, case_sensitive=_case_sensitive(w))]
    hits = find_all(text, term, case_sensitive=_case_sensitive(term))
    return sum(1 for i in hits if not any(s <= i < e for s, e in spans))


def verify(*, question: str, evidence: list[str], new_question: str, new_evidence: list[str], aliases: list[str],
           comparator_terms: list[str], new_term: str) -> list[str]:
    """Failed checks of one substituted item (see the module docstring); ``[]`` means verified."""
    fails = []
    if len(new_evidence) != len(evidence):
        return [f"evidence has {len(new_evidence)} abstracts, expected {len(evidence)}"]
    texts = [("question", question, new_question)] + [(f"evidence[{k}]", e, e2)
                                                       for k, (e, e2) in enumerate(zip(evidence, new_evidence))]
    if not find_all(new_question, new_term, case_sensitive=False):
        fails.append(f"question: substituted term {new_term!r} absent")
    if not any(find_all(e, new_term, case_sensitive=False) for e in new_evidence):
        fails.append(f"evidence: substituted term {new_term!r} absent from every abstract")
    for name, old, new in texts:
        for a in aliases:
            if find_all(new, a, case_sensitive=_case_sensitive(a)):
                fails.append(f"{name}: alias {a!r} of the original intervention remains")
        for c in comparator_terms:
            n0 = _count_outside(old, c, aliases)
            n1 = _count_outside(new, c, [new_term])
            if n0 != n1:
                fails.append(f"{name}: comparator {c!r} mentioned {n1} times, originally {n0}")
        fails += [f"{name}: {p}" for p in grammar_problems(new, new_term)]
        if name != "question" and label_fingerprints(old, aliases) != label_fingerprints(new, [new_term]):
            fails.append(f"{name}: a label-bearing sentence changed or disappeared")
    return fails
