"""MedCounterfact substitution terms: loading the shipped lists and generating the NONCE list.

The lists live in ``eval_hooks/families/med/term_lists/<category>.txt`` (``nonce``, ``medical``,
``non_medical``, ``toxic``). Each file starts with ``# version: N`` and ``# method: ...`` comment
lines; every other non-blank line is one term, with tab-separated columns:

- ``nonce``: the word;
- ``medical``: the treatment, its indication, then ``;``-separated indication keywords (a term is
  never drawn for a question whose text contains one of its keywords);
- ``non_medical``: the object;
- ``toxic``: the substance, then a lethal-dose note (empty where none is documented).

Regenerate the NONCE list with ``python -m eval_hooks.families.med.terms --out PATH`` (needs the
``english-words`` package, a dev dependency).
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from pathlib import Path

from selectrust.conditions import MED_SUBSTITUTED as CATEGORIES

TERM_DIR = Path(__file__).with_name("term_lists")
#: endings that make a made-up word read like a drug name
DRUG_SUFFIXES = ("ol", "ine", "ide", "mab", "nib", "pril", "olol", "sartan", "statin", "azole", "cillin", "mycin",
                 "cycline", "floxacin", "vir", "dipine", "pam", "lam", "tide", "parin", "afil", "one", "ate", "ium",
                 "ane", "ene", "in", "il", "ex", "ax", "ix", "an", "um")
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gl", "kr", "pl", "sn",
           "sp", "st", "tr", "pr", "fl", "gr", "sk", "bl")
_VOWELS = ("a", "e", "i", "o", "u", "oo", "ee", "ai")
_CODAS = ("", "", "", "n", "m", "r", "s", "k", "p", "b", "g", "sh", "nk", "mp")


@dataclass(frozen=True)
class Term:
    term: str
    indication: str = ""
    keywords: tuple[str, ...] = ()
    note: str = ""


def read_terms(category: str, directory: Path = TERM_DIR) -> tuple[list[Term], dict[str, str]]:
    """``(terms, header)`` of one category's list; header holds ``version`` and ``method``."""
    path = directory / f"{category}.txt"
    header: dict[str, str] = {}
    terms: list[Term] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#"):
            key, _, val = raw[1:].partition(":")
            header[key.strip()] = val.strip()
            continue
        if not raw.strip():
            continue
        cols = raw.split("\t")
        if category == "medical":
            kws = tuple(k.strip().lower() for k in (cols[2] if len(cols) > 2 else "").split(";") if k.strip())
            terms.append(Term(cols[0].strip(), indication=cols[1].strip() if len(cols) > 1 else "", keywords=kws))
        elif category == "toxic":
            terms.append(Term(cols[0].strip(), note=cols[1].strip() if len(cols) > 1 else ""))
        else:
            terms.append(Term(cols[0].strip()))
    return terms, header


def load_all(directory: Path = TERM_DIR) -> tuple[dict[str, list[Term]], dict[str, str]]:
    """All four lists and their versions (``{"nonce": "1", ...}``)."""
    terms, versions = {}, {}
    for c in CATEGORIES:
        terms[c], header = read_terms(c, directory)
        versions[c] = header.get("version", "?")
    return terms, versions


def nonce_rejection(word: str, english: set[str]) -> str | None:
    """Why ``word`` is not an acceptable NONCE term, or ``None``."""
    w = word.lower()
    if w in english or w.rstrip("s") in english:
        return "an English word"
    for suf in DRUG_SUFFIXES:
        if w.endswith(suf):
            return f"drug-name suffix -{suf}"
    return None


def english_words() -> set[str]:
    """Lower-case English words (Webster's 2nd + GCIDE) from the ``english-words`` package."""
    from english_words import get_english_words_set  # dev dependency; only needed to (re)check NONCE

    return get_english_words_set(["web2", "gcide"], lower=True)


def generate_nonce(n: int, *, seed: int = 0, english: set[str] | None = None) -> list[str]:
    """``n`` pronounceable made-up words (3 syllables of onset+vowel(+coda)), each accepted by
    :func:`nonce_rejection`; deterministic from ``seed``."""
    english = english_words() if english is None else english
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        sylls = [rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.choice((2, 3)))]
        word = "".join(sylls)
        if 6 <= len(word) <= 11 and word not in out and nonce_rejection(word, english) is None:
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write a fresh NONCE list")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    words = generate_nonce(args.n, seed=args.seed)
    head = ("# version: 1\n# method: generate_nonce(n=%d, seed=%d): 2-3 syllables of onset+vowel(+coda); rejected if "
            "in the english-words web2+gcide list or ending in a drug-name suffix (DRUG_SUFFIXES)\n" % (args.n, args.seed))
    Path(args.out).write_text(head + "\n".join(words) + "\n", encoding="utf-8")
    print(f"wrote {len(words)} words to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
