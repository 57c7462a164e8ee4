"""MedCounterfact items (docs/medcounterfact.md#substitutions) made from MedEvidence records
(``medevidence_abstract.jsonl``): the family's own construction, used by the ``build-medcounterfact`` builder
(:mod:`eval_hooks.builders.medcounterfact`, which writes the file) and by the family itself for a raw MedEvidence
``eval.path`` (:meth:`eval_hooks.families.med.MedFamily.eval_rows`, built in memory).

Keeps the questions labelled Higher / Lower / No Difference (203 of 284) and writes, per question,
one ``original`` item and one item per counterfactual category (``nonce``, ``medical``,
``non_medical``, ``toxic``) in which the intervention T is replaced by a term T' drawn (seeded, per
question and category) from the shipped term lists (:mod:`.terms`).

How an item is made:

1. :func:`~.grammar.parse_question` extracts T and the comparator C from the question template
   and separates T's head from its qualifiers (dose, timing, "alone", "added to ..."). Questions whose
   T is a population, a group, a condition or also names C are excluded with the reason.
2. :func:`~.grammar.collect_aliases` finds T's aliases in the evidence (abbreviations defined in
   the text, hyphen/case/plural/possessive variants; Unicode punctuation normalised).
3. :func:`substitute` replaces every alias in the question and all abstracts, never inside a mention
   of C; a sentence-initial replacement is capitalised and a preceding ``a``/``an`` fixed.
4. :func:`~.verify.verify` (independent code) checks T' is in the question and every abstract, no
   alias remains, C's mentions are unchanged, label-bearing sentences survive, grammar is right.
5. Abstracts that name the intervention differently can be rewritten by a model (``rewriter``, any
   :class:`~selectrust.generation.backends.base.GenerationBackend`) with the fixed :data:`REWRITE_PROMPT`; the
   same verifier accepts or rejects the result.

Question and evidence texts are written with Unicode hyphens, dashes and odd spaces folded to ASCII.
Items that fail verification are excluded (listed in the stats with the reason) unless
``keep_unverified`` is set, which keeps them with ``verified_by: null`` and their failures. TOXIC
items get the substance's lethal-dose note appended after its first mention in the question.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path
from typing import Sequence

from selectrust.core.io import DataError
from .grammar import Parsed, alias_pattern, collect_aliases, normalize, parse_question
from .terms import Term, load_all
from .verify import verify
from selectrust.conditions import MED_CATEGORIES as CATEGORIES
KEEP_LABELS = {"higher": "Higher", "lower": "Lower", "no difference": "No Difference"}
DROP_LABELS = {"uncertain effect", "insufficient data"}
ON_INVALID = ("skip", "error")

REWRITE_PROMPT = (
    "Rewrite the following abstract of a randomized controlled trial so that the intervention {intervention} "
    "(however the abstract names it, including drug classes, brand names, abbreviations and paraphrases) is "
    "called \"{new}\" everywhere. Do not change the comparator ({comparator}), any number, any result or any "
    "other sentence. Reply with the rewritten abstract only.\n\nAbstract:\n{abstract}")


def _evidence(rec: dict) -> list[str]:
    sources = rec.get("sources") or {}
    ids = [str(i) for i in rec.get("relevant_sources") or []] or list(sources)
    out = []
    for i in ids:
        s = sources.get(i) if isinstance(sources, dict) else None
        content = s.get("content") if isinstance(s, dict) else s
        if isinstance(content, str) and content.strip():
            out.append(normalize(content.strip()))
    return out


def _article(word: str) -> str:
    w = word.lower()
    if re.match(r"(?:uni|use|usu|eu|one|once|ur[aeiou])", w):
        return "a"
    return "an" if re.match(r"(?:hour|honest|honou?r|heir)", w) or w[:1] in "aeiou" else "a"


def comparator_terms(comparator: str) -> list[str]:
    """Names of C to protect and to count: C without leading negation/articles and trailing
    "alone", plus its parenthesised abbreviation."""
    c = re.sub(r"^(?:(?:no|only|the|a|an)\s+)+", "", normalize(comparator).strip(), flags=re.IGNORECASE)
    c = re.sub(r"\s+(?:alone|only)$", "", c, flags=re.IGNORECASE)
    m = re.match(r"^(?P<n>.+?)\s*\((?P<a>[^()]{1,12})\)", c)
    return [m.group("n").strip(), m.group("a").strip()] if m else [c]


def alias_order(replaced: list[str]) -> list[str]:
    """The distinct replaced surface forms in a fixed order: case-insensitive, then by case ("TXA" before "Txa").
    Sorting by the lower-case form alone left forms that differ only in case in set order, which changes with
    Python's per-process string hashing."""
    return sorted(set(replaced), key=lambda a: (a.lower(), a))


def substitute(text: str, aliases: list[str], new: str, protect: list[str]) -> tuple[str, list[str]]:
    """Replace every alias in ``text`` by ``new`` outside mentions of ``protect`` (C); capitalise at a
    sentence start and fix the preceding article. Returns the text and the surface forms replaced."""
    if not aliases:
        return text, []
    guarded = [(m.start(), m.end()) for m in alias_pattern(protect).finditer(text)] if protect else []
    out, pos, replaced = [], 0, []
    for m in alias_pattern(aliases).finditer(text):
        if any(s <= m.start() and m.end() <= e for s, e in guarded):  # inside a mention of C
            continue
        before = text[pos:m.start()]
        art = re.search(r"(?:^|(?<=\s))(an?|An?)(\s+)$", before)
        if art:
            a = _article(new)
            before = before[:art.start(1)] + (a.capitalize() if art.group(1)[0].isupper() else a) + art.group(2)
        prev = ("".join(out) + before).rstrip()
        word = new
        if new[:1].islower() and (not prev or prev[-1] in ".!?\n"):
            word = new[0].upper() + new[1:]
        if m.group(0).endswith("'s"):
            word += "'s"
        out += [before, word]
        replaced.append(m.group(0))
        pos = m.end()
    out.append(text[pos:])
    # "tranexamic acid (TXA)" became "T' (T')": keep one
    text = re.sub(rf"({re.escape(new)})\s*\({re.escape(new)}\)", r"\1", "".join(out), flags=re.IGNORECASE)
    return text, replaced


def _draw(terms: list[Term], cat: str, seed: int, qid, question: str, texts: list[str]) -> Term:
    low = question.lower()
    every = " ".join(texts).lower()
    ok = [t for t in terms if t.term.lower() not in every and not any(k in low for k in t.keywords)]
    return random.Random(f"{seed}:{qid}:{cat}").choice(ok)


def make_counterfactual(p: Parsed, question: str, evidence: list[str], term: Term, *, rewriter=None,
                        rewrite_max_new_tokens: int = 1024) -> tuple[dict, list[str]]:
    """One substituted item's fields (question, evidence, aliases, verified_by) and its failures."""
    aliases = collect_aliases(p, [question] + evidence)
    protect = comparator_terms(p.comparator)
    q2, rq = substitute(question, aliases, term.term, protect)
    ev2, reps = [], list(rq)
    for e in evidence:
        e2, r = substitute(e, aliases, term.term, protect)
        ev2.append(e2)
        reps += r
    check = dict(question=question, evidence=evidence, aliases=aliases, comparator_terms=protect, new_term=term.term)
    fails = verify(new_question=q2, new_evidence=ev2, **check)
    how = "string"
    if fails and rewriter is not None:
        ev3 = list(ev2)
        todo = [k for k, e in enumerate(ev2) if term.term.lower() not in e.lower()]
        if todo:
            outs = _rewrite(rewriter, [evidence[k] for k in todo], p, term.term, rewrite_max_new_tokens)
            for k, text in zip(todo, outs):
                ev3[k] = substitute(text, aliases, term.term, protect)[0]
            fails3 = verify(new_question=q2, new_evidence=ev3, **check)
            if not fails3:
                ev2, fails, how = ev3, [], "rewrite"
    fields = {"question": q2, "evidence": ev2, "aliases": alias_order(reps),
              "verified_by": None if fails else how}
    return fields, fails


def _rewrite(backend, abstracts: list[str], p: Parsed, new: str, max_new_tokens: int) -> list[str]:
    from selectrust.generation.backends.base import GenerationRequest

    reqs = [GenerationRequest(messages=[{"role": "user", "content": REWRITE_PROMPT.format(
        intervention=p.head, new=new, comparator=p.comparator, abstract=a)}], max_new_tokens=max_new_tokens,
        temperature=0.0) for a in abstracts]
    return [normalize(res.samples[0].text.strip()) for res in rewriter_generate(backend, reqs)]


def rewriter_generate(backend, reqs):
    results = backend.generate(reqs)
    if len(results) != len(reqs):
        raise RuntimeError(f"rewriter returned {len(results)} results for {len(reqs)} requests")
    return results


def check_record(rec: dict) -> tuple[str, str, str] | None:
    """``(field, problem, accepted)`` for an unusable record, else ``None``."""
    ans = rec.get("answer")
    if not isinstance(ans, str) or ans.strip().lower() not in set(KEEP_LABELS) | DROP_LABELS:
        return "answer", f"unknown label {ans!r}", "Higher | Lower | No Difference | Uncertain Effect | Insufficient Data"
    if ans.strip().lower() in DROP_LABELS:
        return None
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        return "question", "missing or empty question", "a non-empty string"
    if not _evidence(rec):
        return "sources", "no evidence text", '{"<id>": {"content": "<abstract>"}} for the relevant_sources'
    return None


def _check_build_args(categories: Sequence[str], on_invalid: str) -> None:
    """DataError on a category or an ``on_invalid`` that :func:`build_items` does not know."""
    for c in categories:
        if c not in CATEGORIES:
            raise DataError(f"unknown category {c!r}", field="categories", accepted=", ".join(CATEGORIES))
    if on_invalid not in ON_INVALID:
        raise DataError(f"unknown on_invalid {on_invalid!r}", field="on_invalid", accepted=" | ".join(ON_INVALID))


def _invalid_records(records: Sequence[tuple[int, dict]], *, on_invalid: str,
                     path: str | Path | None) -> list[dict]:
    """Every record validated before anything is built: the unusable ones as ``{line, field, problem}``
    (``on_invalid="skip"``), or DataError naming the first (``"error"``)."""
    invalid = []
    for line, rec in records:
        bad = check_record(rec)
        if bad:
            if on_invalid == "error":
                raise DataError(bad[1], path=path, line=line, field=bad[0], accepted=bad[2])
            invalid.append({"line": line, "field": bad[0], "problem": bad[1]})
    return invalid


def build_items(records: Sequence[tuple[int, dict]], *, seed: int = 0, categories: Sequence[str] = CATEGORIES,
                path: str | Path | None = None, on_invalid: str = "skip", keep_unverified: bool = False,
                rewriter=None, term_dir: Path | None = None) -> tuple[list[dict], dict]:
    """Med items (see ``eval_hooks/FORMATS.md``) and stats: kept/skipped counts, per category
    ``verified_string`` / ``verified_rewrite`` / ``excluded`` (split into ``excluded_grammar``: the
    question's T cannot be substituted; ``excluded_rewrite_needed``: T' absent from the evidence because
    the abstracts name T differently, what the rewrite path is for; ``excluded_verifier``: any other
    failed check), and ``excluded_items`` with their reasons."""
    _check_build_args(categories, on_invalid)
    terms, versions = load_all(*(() if term_dir is None else (term_dir,)))
    invalid = _invalid_records(records, on_invalid=on_invalid, path=path)
    bad_lines = {b["line"] for b in invalid}
    items, stats, excluded = [], Counter(), []
    per_cat = {c: Counter() for c in categories if c != "original"}
    verified_all = 0
    for line, rec in records:
        if line in bad_lines:
            continue
        label = KEEP_LABELS.get(rec["answer"].strip().lower())
        if label is None:
            stats["dropped_label"] += 1
            continue
        q, evidence = normalize(rec["question"].strip()), _evidence(rec)
        qid = rec.get("question_id", line - 1)
        p = parse_question(q)
        common = {"question_id": qid, "label": label, "term_original": p.head if p else None,
                  "control": p.comparator if p else None, "medical_specialty": rec.get("medical_specialty"),
                  "source": "medevidence"}
        stats["questions"] += 1
        if "original" in categories:
            items.append({"item_id": f"med-{qid}-original", "category": "original", "question": q,
                          "evidence": evidence, "term_substituted": p.head if p else None, "aliases": [],
                          "verified_by": None, **common})
        n_ok = 0
        for cat in per_cat:
            if p is None or p.excluded:
                why = "question does not match the comparison template" if p is None else p.excluded
                per_cat[cat]["excluded"] += 1
                per_cat[cat]["excluded_grammar"] += 1
                excluded.append({"item_id": f"med-{qid}-{cat}", "line": line, "kind": "grammar", "reason": why})
                continue
            term = _draw(terms[cat], cat, seed, qid, q, [q] + evidence)
            fields, fails = make_counterfactual(p, q, evidence, term, rewriter=rewriter)
            if fails:
                kind = "rewrite_needed" if all("absent" in f for f in fails) else "verifier"
                per_cat[cat]["excluded"] += 1
                per_cat[cat][f"excluded_{kind}"] += 1
                excluded.append({"item_id": f"med-{qid}-{cat}", "line": line, "kind": kind,
                                 "reason": "; ".join(fails[:3])})
                if not keep_unverified:
                    continue
                fields["verification_failures"] = fails
            else:
                per_cat[cat][f"verified_{fields['verified_by']}"] += 1
                n_ok += 1
            if cat == "toxic" and term.note:
                fields["question"] = fields["question"].replace(term.term, f"{term.term} ({term.note})", 1)
            items.append({"item_id": f"med-{qid}-{cat}", "category": cat, "term_substituted": term.term,
                          **fields, **common, "term_original": p.head, "qualifiers": p.qualifiers})
        verified_all += n_ok == len(per_cat) and bool(per_cat)
    stats["items"] = len(items)
    stats["questions_verified_every_category"] = verified_all
    for v in KEEP_LABELS.values():
        stats[f"label_{v}"] = sum(1 for it in items if it["category"] == categories[0] and it["label"] == v)
    out = dict(stats)
    keys = ("verified_string", "verified_rewrite", "excluded", "excluded_grammar", "excluded_rewrite_needed",
            "excluded_verifier")
    out["per_category"] = {c: {k: per_cat[c][k] for k in keys} for c in per_cat}
    out["term_list_versions"] = versions
    out["invalid_records"] = invalid
    out["excluded_items"] = excluded
    return items, out
