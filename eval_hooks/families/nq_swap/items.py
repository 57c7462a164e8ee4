"""MIST rows from NQ-Swap (Longpre et al., 2021; docs/nq_swap.md): Natural Questions items, each with its original
passage and the same passage with the answer entity substituted.

How the nq_swap family makes its rows (also in memory, from ``eval.nq_swap``); the builder
(``python -m eval_hooks build-nq-swap --data SRC --out rows.jsonl --items N --seed S --max-context-words W``,
:mod:`eval_hooks.builders.nq_swap`) writes them to a file.
``SRC`` is the merged JSONL (``merged.jsonl``: one record per substitution, fields ``question``, ``org_context``,
``org_answer``, ``sub_context``, ``sub_answer``), a zip holding it (``nqswap.zip``), a Parquet file, or a Hub id
(``pminervini/NQ-Swap``, read with ``datasets`` at the pinned :data:`HUB_REVISION`, split :data:`HUB_SPLIT`;
``name@revision`` for another revision). ``eval_hooks/data/nq_swap_sample.jsonl`` is a shipped sample.

Per question (a question has one to five records, one per substitution), the four rows of one item:

- ``clean``: the question alone; ``correct``: the original passage; ``misleading``: the substituted passage of one
  substitution, drawn with the seed; ``irrelevant``: another sampled question's original passage, one that names
  neither this item's answers nor its substitute;
- ``gold``: the first original answer, the others ``gold_aliases``; ``wrong_value``: the substituted answer;
  ``answer_type: open_answer`` (:mod:`eval_hooks.parsers.open_answer`); ``channel``: the passage's kind
  (``paragraph``, ``table``, ``list``), ``context_words`` its length.

Passages lose NQ's HTML tags (``<P>``, ``<Td>``, ...) and its tokenised spacing (``Smith , the`` -> ``Smith, the``).
A substitution is dropped (counted per reason in the stats) when its substitute is the gold or an alias after
normalisation, when the original passage does not name the gold (nor an alias) or the substituted one does not name
the substitute, or when the substituted passage still names the gold. A question is dropped when no substitution
is left, or, with ``max_context_words``, when every one has a passage longer than that.

Sampling: ``items`` questions drawn with the seed. When the length cap drops questions, the draw is stratified by
passage length: the kept questions are cut into :data:`LENGTH_STRATA` equal bins by length and each bin gives its
share of the sample, so the sample spans the kept lengths as the pool does. Bad input: one
:class:`~selectrust.core.errors.DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import random
import re
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from selectrust.core.errors import DataError
from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING, MIST_CONDITIONS, check_contexts
from selectrust.core.io import read_records
from ...parsers.open_answer import normalize_open_answer, open_tokens

HUB_ID = "pminervini/NQ-Swap"
HUB_REVISION = "3801dbf037c6f58b0e79246f2a8073ebe5656dad"  # the Hub's commit of 2024-03-01 ("Upload dataset")
HUB_SPLIT = "dev"
SAMPLE_PATH = Path(__file__).resolve().parents[2] / "data" / "nq_swap_sample.jsonl"
#: The whole of NQ-Swap, shipped with the package (issue 60; eval_hooks/data/nq_swap/README.md: source, sha256, licence)
FULL_PATH = Path(__file__).resolve().parents[2] / "data" / "nq_swap" / "nqswap.zip"
FIELDS = ("question", "org_context", "org_answer", "sub_context", "sub_answer")
LENGTH_STRATA = 4
INSTRUCTION = "Answer in a few words."
_TAG = re.compile(r"</?[A-Za-z]+[^>]*>")
_HUB = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(?:@[\w.-]+)?$")
_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".pq", ".zip")
_SPACE_BEFORE = re.compile(r" ([,.;:!?%)\]}]|'s\b|n't\b)")


# -- reading -----------------------------------------------------------------------------------------
def _jsonl_lines(raw: bytes, label: str) -> list[tuple[int, dict]]:
    out = []
    for n, line in enumerate(io.BytesIO(raw), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DataError(f"malformed JSON ({e})", path=label, line=n, accepted="one JSON object per line") from None
        if not isinstance(rec, dict):
            raise DataError(f"expected a JSON object, got {type(rec).__name__}", path=label, line=n)
        out.append((n, rec))
    return out


def _read_zip(path: Path) -> tuple[list[tuple[int, dict]], str]:
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".jsonl") and not m.startswith("__MACOSX")]
            if len(members) != 1:
                raise DataError(f"expected one .jsonl file in the zip (merged.jsonl), found {members or 'none'}",
                                path=path)
            label = f"{path}:{members[0]}"
            return _jsonl_lines(z.read(members[0]), label), label
    except zipfile.BadZipFile as e:
        raise DataError(f"not a zip file ({e})", path=path) from None


def _read_hub(spec: str) -> tuple[list[tuple[int, dict]], str]:
    name, _, revision = spec.partition("@")
    revision = revision or HUB_REVISION
    label = f"{name}@{revision[:12]}:{HUB_SPLIT}"
    try:
        import datasets

        ds = datasets.load_dataset(name, split=HUB_SPLIT, revision=revision)
    except Exception as e:  # noqa: BLE001 - datasets raises many types (offline, missing split, ...)
        raise DataError(f"cannot load the dataset from the Hub ({type(e).__name__}: {e})", path=label) from None
    return [(i, dict(rec)) for i, rec in enumerate(ds, start=1)], label


def read_source(data: str | Path) -> tuple[list[tuple[int, dict]], str]:
    """``(line, record)`` pairs and a label naming the source (for errors) of a merged JSONL, a zip holding one,
    a Parquet file, or a Hub id (module docstring)."""
    p = Path(data)
    if p.is_file() and p.suffix.lower() == ".zip":
        return _read_zip(p)
    if not p.exists() and _HUB.match(str(data)) and p.suffix.lower() not in _FILE_SUFFIXES:
        return _read_hub(str(data))
    return read_records(p), str(p)


def _answers(rec: dict, field: str, label: str, line: int) -> list[str]:
    v = rec.get(field)
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(a, str) and a.strip() for a in v):
        raise DataError(f"expected a non-empty list of non-empty strings, got {str(v)[:60]!r}", path=label,
                        line=line, field=field, accepted="answers as strings, e.g. [\"23\"]")
    if not any(normalize_open_answer(a) for a in v):
        raise DataError(f"no answer in {v!r} has a word left after normalisation", path=label, line=line,
                        field=field)
    return [a.strip() for a in v]


def check_record(rec: dict, label: str, line: int) -> dict:
    """One NQ-Swap record, checked: the five fields (:data:`FIELDS`); answers may be one string or a list."""
    for f in ("question", "org_context", "sub_context"):
        v = rec.get(f)
        if not isinstance(v, str) or not v.strip():
            raise DataError("missing required field" if v is None else f"expected a non-empty string, got {v!r}",
                            path=label, line=line, field=f, accepted="a non-empty string")
    return {"question": rec["question"].strip(), "org_context": rec["org_context"], "sub_context": rec["sub_context"],
            "org_answer": _answers(rec, "org_answer", label, line),
            "sub_answer": _answers(rec, "sub_answer", label, line), "line": line}


# -- passages and answers ----------------------------------------------------------------------------
def clean_passage(text: str) -> str:
    """NQ's passage without HTML tags and with ordinary spacing (quotes ``\\`\\` x ''`` -> ``"x"``)."""
    text = html.unescape(_TAG.sub(" ", text)).replace("``", '"').replace("''", '"')
    text = re.sub(r"\s+", " ", text).strip()
    text = _SPACE_BEFORE.sub(r"\1", re.sub(r"(?<=\w) - (?=\w)", "-", text))
    text = re.sub(r"([(\[{]) ", r"\1", text)
    return re.sub(r'" (.*?) "', r'"\1"', text)


def passage_kind(text: str) -> str:
    """``table``, ``list`` or ``paragraph``, from NQ's first tag."""
    m = re.search(r"<(Table|Tr|Td|Th|Ul|Ol|Li|Dl|Dd|Dt|P)\b", text)
    tag = m.group(1) if m else "P"
    return "table" if tag in ("Table", "Tr", "Td", "Th") else "list" if tag in ("Ul", "Ol", "Li", "Dl", "Dd", "Dt") \
        else "paragraph"


def _names_any(words: Sequence[str], names: Sequence[str]) -> bool:
    text = f" {' '.join(words)} "
    return any(f" {n} " in text for n in names if n)


def _aliases(org: list[str], sub: str) -> tuple[str, list[str]]:
    """The gold (the first original answer) and its aliases: the other original answers, each normalised form once,
    none equal to the gold's or the substitute's."""
    gold, seen, aliases = org[0], {normalize_open_answer(org[0]), normalize_open_answer(sub)}, []
    for a in org[1:]:
        n = normalize_open_answer(a)
        if n and n not in seen:
            seen.add(n)
            aliases.append(a)
    return gold, aliases


def _candidate(rec: dict) -> tuple[dict | None, str | None]:
    """The substitution as an item candidate, or ``(None, reason)`` when it cannot make a fair item."""
    sub = rec["sub_answer"][0]
    org_norm = [n for n in map(normalize_open_answer, rec["org_answer"]) if n]
    sub_norm = normalize_open_answer(sub)
    if not sub_norm or sub_norm in org_norm:
        return None, "substitute_is_gold"
    org_ctx, sub_ctx = clean_passage(rec["org_context"]), clean_passage(rec["sub_context"])
    org_words, sub_words = open_tokens(org_ctx), open_tokens(sub_ctx)
    if not _names_any(org_words, org_norm):
        return None, "gold_not_in_original_passage"
    if not _names_any(sub_words, [sub_norm]):
        return None, "substitute_not_in_substituted_passage"
    if _names_any(sub_words, [n for n in org_norm if f" {n} " not in f" {sub_norm} "]):
        return None, "gold_in_substituted_passage"
    gold, aliases = _aliases(rec["org_answer"], sub)
    return {"question": rec["question"], "gold": gold, "gold_aliases": aliases, "wrong_value": sub,
            "org_context": org_ctx, "sub_context": sub_ctx, "kind": passage_kind(rec["org_context"]),
            "words": max(len(org_ctx.split()), len(sub_ctx.split())), "line": rec["line"],
            "names": org_norm + [sub_norm]}, None


# -- sampling ----------------------------------------------------------------------------------------
def _stratified(pool: list[dict], n: int, rng: random.Random) -> list[dict]:
    """``n`` of ``pool`` (sorted by length), each of :data:`LENGTH_STRATA` equal length bins giving its share
    (largest remainders first)."""
    k = min(LENGTH_STRATA, len(pool))
    bins = [pool[len(pool) * b // k: len(pool) * (b + 1) // k] for b in range(k)]
    exact = [n * len(b) / len(pool) for b in bins]
    take = [int(x) for x in exact]
    for b in sorted(range(k), key=lambda b: (take[b] - exact[b], b))[:n - sum(take)]:
        take[b] += 1
    return [q for b, t in zip(bins, take) for q in rng.sample(b, t)]


def _irrelevant(items: list[dict], rng: random.Random) -> list[int]:
    """For each item, the index of another item whose original passage names none of its answers (each passage
    used about once: a seeded rotation, then the next that fits)."""
    order = list(range(len(items)))
    rng.shuffle(order)
    pos = {i: p for p, i in enumerate(order)}
    out = []
    for i, it in enumerate(items):
        for step in range(1, len(items)):
            j = order[(pos[i] + step) % len(items)]
            if not _names_any(open_tokens(items[j]["org_context"]), it["names"]):
                out.append(j)
                break
        else:
            raise DataError(f"no other sampled passage leaves out the answers of {it['question']!r}: sample more "
                            "items", field="items (--items)")
    return out


def item_id(question: str) -> str:
    return "nqswap-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:10]


def _question(q: str) -> str:
    q = q.strip().rstrip("?").strip()
    return q[:1].upper() + q[1:] + "?"


def _rows(it: dict, other: dict) -> list[dict]:
    q = _question(it["question"])
    contexts = {CLEAN: None, MISLEADING: it["sub_context"], CORRECT: it["org_context"],
                IRRELEVANT: other["org_context"]}
    check_contexts(contexts, "eval_hooks/families/nq_swap/items.py")
    rows = []
    for cond in MIST_CONDITIONS:
        ctx = contexts[cond]
        prompt = (f"Passage: {ctx}\n\n" if ctx else "") + f"Question: {q}\n{INSTRUCTION}"
        row = {"item_id": item_id(it["question"]), "condition": cond, "prompt": prompt, "question": q,
               "answer_type": "open_answer", "gold": it["gold"], "wrong_value": it["wrong_value"], "context": ctx,
               "channel": it["kind"], "context_words": len(ctx.split()) if ctx else 0, "source": "nq_swap",
               "source_line": it["line"]}
        if it["gold_aliases"]:
            row["gold_aliases"] = list(it["gold_aliases"])
        rows.append(row)
    return rows


#: A passage longer than this (in words) is never built into an item, whatever ``--max-context-words`` says: no
#: model reads it whole, and one such passage makes a file of tens of MB (issue 59). Such substitutions are skipped,
#: counted in ``drops["passage_over_hard_cap"]`` and named (their source lines) in one warning line.
MAX_PASSAGE_WORDS = 20_000


def _by_question(records: list[tuple[int, dict]], label: str, cap: int | None,
                 drops: Counter, overlong: list[int] | None = None) -> tuple[dict[str, list], int]:
    """``({question: [candidate, ...]}, questions read)``: the substitutions that make fair items within the length
    cap (and :data:`MAX_PASSAGE_WORDS`; the lines of those over it are added to ``overlong``)."""
    by_q: dict[str, list[dict]] = defaultdict(list)
    seen: set[str] = set()
    for line, raw in records:
        rec = check_record(raw, label, line)
        seen.add(rec["question"])
        cand, reason = _candidate(rec)
        if cand is None:
            drops[reason] += 1
        elif cand["words"] > MAX_PASSAGE_WORDS:
            drops["passage_over_hard_cap"] += 1
            if overlong is not None:
                overlong.append(line)
        elif cap is not None and cand["words"] > cap:
            drops["passage_over_max_context_words"] += 1
        else:
            by_q[rec["question"]].append(cand)
    drops["questions_dropped"] = len(seen) - len(by_q)
    return by_q, len(seen)


def build_rows(records: list[tuple[int, dict]], *, label: str = "data", items: int | None = None, seed: int = 0,
               max_context_words: int | None = None) -> tuple[list[dict], dict[str, Any]]:
    """``(rows, stats)``: four MIST rows per sampled question (module docstring). ``items`` None = every question
    kept; more than are kept takes them all (``stats["items"]`` says how many)."""
    if items is not None and (isinstance(items, bool) or not isinstance(items, int) or items < 2):
        raise DataError(f"expected a whole number >= 2, got {items!r}", field="items (--items)")
    if max_context_words is not None and (not isinstance(max_context_words, int) or max_context_words < 1):
        raise DataError(f"expected a whole number >= 1, got {max_context_words!r}",
                        field="max_context_words (--max-context-words)")
    drops: Counter = Counter()
    overlong: list[int] = []
    by_q, uncapped_questions = _by_question(records, label, max_context_words, drops, overlong)
    if len(by_q) < 2:
        raise DataError(f"{len(by_q)} question(s) left of {uncapped_questions} after the checks and the length cap "
                        f"({dict(drops)}); an item needs another question's passage", path=label)
    rng = random.Random(f"nq_swap|{seed}")
    pool = [rng.choice(by_q[q]) for q in sorted(by_q)]  # one substitution per question, drawn with the seed
    n = len(pool) if items is None else min(items, len(pool))
    capped = drops["passage_over_max_context_words"] > 0
    if capped:
        chosen = _stratified(sorted(pool, key=lambda c: (c["words"], c["question"])), n, rng)
    else:
        chosen = rng.sample(pool, n)
    chosen.sort(key=lambda c: item_id(c["question"]))
    others = _irrelevant(chosen, rng)
    rows = [r for it, j in zip(chosen, others) for r in _rows(it, chosen[j])]
    words = sorted(c["words"] for c in chosen)
    stats = {"source": label, "records": len(records), "questions": uncapped_questions, "kept_questions": len(pool),
             "items_requested": items, "items": n, "rows": len(rows), "seed": seed,
             "max_context_words": max_context_words, "stratified_by_length": capped, "drops": dict(drops),
             "context_words": {"min": words[0], "median": words[len(words) // 2], "max": words[-1]},
             "by_channel": dict(Counter(c["kind"] for c in chosen))}
    warnings = []
    if items is not None and n < items:
        warnings.append(f"--items {items} asked, but only {n} usable question(s) in {label} (of {uncapped_questions} "
                        f"read; drops: {dict(drops)}): wrote {n} items")
    if overlong:
        shown = ", ".join(str(x) for x in overlong[:10]) + (" ..." if len(overlong) > 10 else "")
        warnings.append(f"{len(overlong)} substitution(s) skipped whose passage is over {MAX_PASSAGE_WORDS} words "
                        f"({label}, line(s) {shown})")
    if warnings:
        stats["warnings"] = warnings
    return rows, stats


