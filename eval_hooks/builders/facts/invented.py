"""Invented entities (issue 61, Deliver 1's first lever): training items about places and things that do not exist,
so no model knows them, across several relations and wordings, so that the ``unknown_correct`` pool of
knowledge-aware SCOPE ("use the context when you cannot know") is not tied to the four trained relations.

``build-facts --invented-items N`` (:attr:`.build.FactsSettings.invented_items`) appends the rows of N such items to
``facts_train.jsonl`` only; the held-out, dev and transfer files are byte-for-byte what they are without them.

- **Names** come from syllables (pronounceable, capitalised: "Vostrania", "Queltar"), drawn from one generator with a
  fixed seed (:data:`INVENTED_SEED`, independent of the run's seed, like the fixed split's ``FIXED_DRAW_SEED``), so
  for one GeoNames source the first N items of a larger N have the same subjects and answers (from N = 24 on).
  Every word has five letters or more and is unique; no word equals a word of any real name the build's GeoNames
  data has (countries, capitals, currencies, cities, US states, the builder's aliases, the continents), of the fixed
  prompt text (:func:`.wording.fixed_text`, these templates included) or of a held-out, dev or transfer subject,
  gold or alias; and none holds such a word of four letters or more ("Perunia" holds Peru).
- **Relations** (:data:`INVENTED_RELATIONS`): the four trained place relations' own templates with invented
  subjects *and* invented answers ("What is the capital of Vostrania?" -> Queltar; an invented city in an invented
  country; an invented city in an invented US state), so the base cannot be right by luck, and four relations whose
  answers are not places, with templates of their own (a company's founder, a country's main export, the river
  through a city, a country's national dish). None uses the held-out relations' questions or facts
  (:data:`HELD_OUT_RELATIONS`: ``continent``, the transfer relation, and ``currency``, kept for a second held-out
  relation): what the model is tested on when it has never been trained on it stays that way.
- **Items** have the shape of :func:`.relations._item` (``relation``, ``subject``, ``gold``, ``aliases`` (none),
  ``wrong_options``: the other invented answers of the relation, the next item's first; ``group`` ``invented``; id
  ``invented-<relation>-<k>``); the misleading context states the next item's answer, the irrelevant context
  another invented item's fact of the same relation, in the training wordings; rows carry ``source: invented``.

Item k has relation ``k mod r`` of :data:`INVENTED_RELATIONS`' order (r = all eight, fewer when N < 24: each
relation needs three items, for a wrong value and an irrelevant fact that differ from the gold).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from ...parsers import normalize_short_text
from .relations import ALIASES, CONTINENT_ALIASES, CONTINENTS, CURRENCY_ALIASES, RELATIONS
from .wording import item_rows

#: The seed of every draw of the invented items (names, wordings, irrelevant facts): a constant, so the items are
#: the same whatever the run's seed (issue 61).
INVENTED_SEED = 61
SOURCE = "invented"
GROUP = "invented"
#: The relations an invented item never uses (their questions and facts): the held-out relation (``continent``)
#: and the one kept for a second held-out relation whose answers are not places (``currency``).
HELD_OUT_RELATIONS = ("continent", "currency")
#: The fewest letters of a word of an invented name: shorter draws are often English words ("Moan").
MIN_LETTERS = 5
#: Each relation needs this many items: an item's wrong value and its irrelevant fact are two others' answers.
MIN_PER_RELATION = 3


@dataclass(frozen=True)
class InventedRelation:
    question: str  # {s}: the subject
    fact: str  # what a context states: {s} the subject, {o} the object
    subject: str  # the kind of name (:data:`KINDS`) of the subject
    answer: str  # ... and of the answer


def _same_as(rel: str, subject: str, answer: str) -> InventedRelation:
    return InventedRelation(RELATIONS[rel].question, RELATIONS[rel].fact, subject, answer)


#: relation -> its templates and the kinds of its names, in the order items are dealt (places and non-places
#: alternate, so a small N has both).
INVENTED_RELATIONS = {
    "capital": _same_as("capital", "country", "city"),
    "founder": InventedRelation("Who founded the company {s}?", "{s} was founded by {o}", "company", "person"),
    "city_country": _same_as("city_country", "city", "country"),
    "export": InventedRelation("What is the main export of {s}?", "the main export of {s} is {o}", "country",
                               "product"),
    "capital_country": _same_as("capital_country", "city", "country"),
    "river": InventedRelation("Which river flows through {s}?", "the {o} River flows through {s}", "city", "river"),
    "us_state": _same_as("us_state", "city", "state"),
    "dish": InventedRelation("What is the national dish of {s}?", "the national dish of {s} is {o}", "country",
                             "dish"),
}

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kr", "st",
           "tr", "th", "sh", "qu", "vr", "kl", "pl")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o")
_CODAS = ("", "", "", "n", "r", "l", "s", "m")
#: kind -> (syllables before the suffix, suffixes).
KINDS = {
    "country": ((2, 2), ("ania", "ovia", "eth", "istra", "aria", "and", "ora")),
    "city": ((1, 2), ("tar", "mont", "vik", "dor", "esh", "gard", "ul", "opol")),
    "state": ((2, 2), ("ana", "ota", "ida", "essa", "amar")),
    "company": ((2, 2), ("ex", "ica", "ix", "ora", "eon")),
    "first_name": ((1, 2), ("a", "o", "en", "is", "el")),
    "last_name": ((2, 2), ("ov", "ard", "ley", "ane", "ick")),
    "product": ((2, 2), ("ite", "ine", "ene", "um", "oss")),
    "river": ((2, 2), ("a", "an", "es", "ova", "el")),
    "dish": ((2, 2), ("o", "ash", "ati", "enna", "ou")),
}


def _syllable(rng: random.Random) -> str:
    onset = rng.choice(_ONSETS)
    return onset + rng.choice([v for v in _VOWELS if not (onset == "qu" and v == "u")]) + rng.choice(_CODAS)


def _word(rng: random.Random, kind: str) -> str:
    (lo, hi), suffixes = KINDS[kind]
    return ("".join(_syllable(rng) for _ in range(rng.randint(lo, hi))) + rng.choice(suffixes)).capitalize()


def reserved_words(data: dict, extra: Iterable[str] = (), fixed: str = "") -> set[str]:
    """The normalised words no invented name may use: every word of every real name of ``data`` (countries,
    capitals, currencies, cities, US states), of the builder's aliases and the continents, of ``extra`` (held-out,
    dev and transfer subjects, golds and aliases) and of ``fixed`` (the fixed prompt text)."""
    names = [n for c in data["countries"] for n in (c["name"], c["capital"], c.get("currency", ""))]
    names += [x["name"] for x in data["cities"]] + [s["name"] for s in data.get("us_states", [])]
    for table in (ALIASES, CURRENCY_ALIASES, CONTINENT_ALIASES):
        names += [*table, *(a for v in table.values() for a in v)]
    names += [*CONTINENTS.values(), *extra, fixed]
    return {w for n in names if n for w in (normalize_short_text(n) or "").split()}


def clashes(name: str, reserved: set[str], min_inside: int = 4) -> bool:
    """``name`` (an invented name) has a word that is a reserved word, or that holds one of ``min_inside`` letters or
    more ("Perunia" holds "peru")."""
    for w in (normalize_short_text(name) or "").split():
        if w in reserved:
            return True
        inside = {w[i:j] for i in range(len(w)) for j in range(i + min_inside, len(w) + 1)}
        if inside & reserved:
            return True
    return False


class NameMaker:
    """Unique invented names of each kind from one fixed-seed generator, none clashing with ``reserved``."""

    def __init__(self, reserved: set[str]):
        self.rng = random.Random(f"selectrust-invented|{INVENTED_SEED}")
        self.reserved = reserved
        self.taken: set[str] = set()  # normalised words of names given out

    def __call__(self, kind: str) -> str:
        for _ in range(10_000):
            name = (f"{_word(self.rng, 'first_name')} {_word(self.rng, 'last_name')}" if kind == "person"
                    else _word(self.rng, kind))
            words = (normalize_short_text(name) or "").split()
            if (min(map(len, words)) >= MIN_LETTERS and not clashes(name, self.reserved)
                    and not self.taken & set(words) and len(set(words)) == len(words)):
                self.taken.update(words)
                return name
        raise RuntimeError(f"invented names: no new {kind} name in 10000 draws")  # a bug: the space is large


def relations_for(n: int) -> list[str]:
    """The relations ``n`` invented items are dealt over: all of :data:`INVENTED_RELATIONS` (in order), fewer when
    ``n`` leaves one fewer than :data:`MIN_PER_RELATION` items."""
    return list(INVENTED_RELATIONS)[:min(len(INVENTED_RELATIONS), n // MIN_PER_RELATION)]


def invented_items(n: int, reserved: set[str]) -> list[dict]:
    """``n`` invented items (module docstring), each with its ``wrong_value`` (the next item of its relation's
    answer, cyclically), in id order."""
    rels = relations_for(n)
    make = NameMaker(reserved)
    by_rel: dict[str, list[dict]] = {r: [] for r in rels}
    for k in range(n if rels else 0):
        rel = rels[k % len(rels)]
        spec = INVENTED_RELATIONS[rel]
        idx = len(by_rel[rel])
        by_rel[rel].append({"relation": rel, "subject": make(spec.subject), "gold": make(spec.answer), "aliases": [],
                            "group": GROUP, "id": f"invented-{rel}-{idx}"})
    out = []
    for rel, items in by_rel.items():
        golds = [it["gold"] for it in items]
        for i, it in enumerate(items):
            wrong = golds[i + 1:] + golds[:i]  # the next item's answer first
            out.append({**it, "wrong_options": wrong, "draw_from": 1, "wrong_value": wrong[0]})
    return out


def invented_rows(items: list[dict]) -> list[dict]:
    """The training rows of ``items`` (:func:`invented_items`): four per item, in the training wordings, the
    irrelevant context another item's fact of the same relation, ``source: invented``."""
    rows = []
    for it in items:
        same = [o for o in items
                if o["relation"] == it["relation"] and o["gold"] not in (it["gold"], it["wrong_value"])]
        other = random.Random(f"{INVENTED_SEED}|irrelevant|{it['id']}").choice(same)
        spec = INVENTED_RELATIONS[it["relation"]]
        item = {k: v for k, v in it.items() if k not in ("wrong_options", "draw_from")}
        rows += [r | {"source": SOURCE} for r in item_rows(item, other, spec.question, spec.fact, INVENTED_SEED,
                                                           "train")]
    return rows


def templates() -> tuple[list[str], list[str]]:
    """(questions, facts) of the invented relations: part of the fixed prompt text of a build that has them."""
    return [r.question for r in INVENTED_RELATIONS.values()], [r.fact for r in INVENTED_RELATIONS.values()]
